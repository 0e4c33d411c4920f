package mvcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
)

// Leases (docs/SPEC.md, Leases).
//
// The store keeps etcd's lease table — which leases exist and the TTL each
// was granted with — and which live keys are attached to which lease. Time
// is not its business: when a lease expires, and keep-alives, belong to the
// layer above (impl/store), which revokes a lease once its TTL has passed.
//
// Durability. The table is the file dir/leases, rewritten whole (written
// to leases.tmp, fsynced, renamed into place, the directory fsynced) by
// every grant and every revoke before the request is answered:
//
//	"WSPECLSE" | u32 version (1) | u32 count | count × (i64 ID | i64 TTL) |
//	u32 crc32c(everything before)   (big-endian)
//
// A key's lease is part of its record (see record.encode), so that ranges,
// watch events and the log carry it; the attachments are rebuilt from the
// live keys on Open. A revoke is applied by the committer: it removes the
// lease from the file first, then deletes every key attached to it at one
// revision, one frame of the log. A crash between the two leaves live keys
// attached to a lease the file no longer holds: Open finishes that revoke
// (deletes them, at one revision per lease) before it returns. A revoke is
// never half done once Open has returned, as in etcd, where the lease and
// its keys are deleted in one backend transaction (lease/lessor.go Revoke).
//
// Cost: a grant or a revoke rewrites the table, O(leases) bytes and two
// fsyncs, on the committer.

// MaxLeaseTTL is the largest TTL a lease may be granted with, in seconds
// (etcd's lease.MaxLeaseTTL).
const MaxLeaseTTL = 9_000_000_000

// Lease is a lease of the table: its ID and the TTL, in seconds, it was
// granted with.
type Lease struct {
	ID  int64
	TTL int64
}

const (
	leaseFileName  = "leases"
	leaseTmpName   = "leases.tmp"
	leaseMagic     = "WSPECLSE"
	leaseVersion   = 1
	leaseHeaderLen = 16
)

// leaseTable is the store's lease state. The committer changes it; readers
// take mu.
type leaseTable struct {
	mu       sync.RWMutex
	ttl      map[int64]int64               // the leases: ID → TTL
	keys     map[int64]map[string]struct{} // the live keys attached to each lease, as of the last durable commit
	keyLease map[string]int64              // the lease of each live key attached to one
}

func (lt *leaseTable) init() {
	lt.ttl = map[int64]int64{}
	lt.keys = map[int64]map[string]struct{}{}
	lt.keyLease = map[string]int64{}
}

func (lt *leaseTable) has(id int64) bool {
	lt.mu.RLock()
	defer lt.mu.RUnlock()
	_, ok := lt.ttl[id]
	return ok
}

// attach records that key now lives with lease id (0: none); the caller
// holds mu or is alone.
func (lt *leaseTable) attach(key string, id int64) {
	if old, ok := lt.keyLease[key]; ok {
		if old == id {
			return
		}
		delete(lt.keys[old], key)
		if len(lt.keys[old]) == 0 {
			delete(lt.keys, old)
		}
		delete(lt.keyLease, key)
	}
	if id == 0 {
		return
	}
	lt.keyLease[key] = id
	if lt.keys[id] == nil {
		lt.keys[id] = map[string]struct{}{}
	}
	lt.keys[id][key] = struct{}{}
}

// noteCommits updates the attachments with durable commits.
func (lt *leaseTable) noteCommits(cs []Commit) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	for _, c := range cs {
		for _, ev := range c.Events {
			if ev.Type == Delete {
				lt.attach(ev.KV.Key, 0)
			} else {
				lt.attach(ev.KV.Key, ev.KV.Lease)
			}
		}
	}
}

// noteRecord updates the attachments with a record read back on Open, in
// revision order.
func (lt *leaseTable) noteRecord(rec *record) {
	if rec.tomb {
		lt.attach(rec.kv.Key, 0)
	} else {
		lt.attach(rec.kv.Key, rec.kv.Lease)
	}
}

// encodeLeases encodes the table as the lease file holds it.
func encodeLeases(ttl map[int64]int64) []byte {
	ids := make([]int64, 0, len(ttl))
	for id := range ttl {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b := make([]byte, leaseHeaderLen, leaseHeaderLen+16*len(ids)+4)
	copy(b, leaseMagic)
	binary.BigEndian.PutUint32(b[8:], leaseVersion)
	binary.BigEndian.PutUint32(b[12:], uint32(len(ids)))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint64(b, uint64(ttl[id]))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeLeases decodes a lease file; it never panics on malformed input.
func decodeLeases(b []byte) (map[int64]int64, error) {
	if len(b) < leaseHeaderLen+4 || string(b[:8]) != leaseMagic {
		return nil, errors.New("not a lease table (wrong magic or cut short)")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("fails its checksum")
	}
	if v := binary.BigEndian.Uint32(b[8:]); v != leaseVersion {
		return nil, fmt.Errorf("lease table version %d (this watchspec reads %d)", v, leaseVersion)
	}
	n := int(binary.BigEndian.Uint32(b[12:]))
	if len(body) != leaseHeaderLen+16*n {
		return nil, fmt.Errorf("%d bytes for %d leases", len(body), n)
	}
	ttl := make(map[int64]int64, n)
	for i := range n {
		off := leaseHeaderLen + 16*i
		id, t := int64(binary.BigEndian.Uint64(body[off:])), int64(binary.BigEndian.Uint64(body[off+8:]))
		if id == 0 || t < 0 || t > MaxLeaseTTL {
			return nil, fmt.Errorf("lease %d with TTL %d is impossible", id, t)
		}
		ttl[id] = t
	}
	return ttl, nil
}

// loadLeases reads the lease file of dir; a store without one has no
// leases. A damaged file is an ErrCorrupt naming it.
func loadLeases(dir string) (map[int64]int64, error) {
	os.Remove(filepath.Join(dir, leaseTmpName)) // a rewrite a crash cut before its rename
	b, err := os.ReadFile(filepath.Join(dir, leaseFileName))
	if errors.Is(err, os.ErrNotExist) {
		return map[int64]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mvcc: read the lease table: %w", err)
	}
	ttl, err := decodeLeases(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (removing it drops every lease, and Open then deletes every key attached to one)",
			ErrCorrupt, filepath.Join(dir, leaseFileName), err)
	}
	return ttl, nil
}

// saveLeases makes ttl the durable lease table.
func (s *Store) saveLeases(ttl map[int64]int64) error {
	tmp, name := filepath.Join(s.dir, leaseTmpName), filepath.Join(s.dir, leaseFileName)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("mvcc: write the lease table: %w", err)
	}
	_, err = f.Write(encodeLeases(ttl))
	if err == nil && !s.opts.UnsafeNoFsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err == nil && !s.opts.UnsafeNoFsync {
		err = s.opts.FS.SyncDir(s.dir)
	}
	if err != nil {
		return fmt.Errorf("mvcc: write the lease table: %w", err)
	}
	return nil
}

// leaseFileError is a failure to write the lease table: the request fails,
// and the store goes on (the table on disk is the old or the new one whole).
type leaseFileError struct{ err error }

func (e *leaseFileError) Error() string { return e.err.Error() }
func (e *leaseFileError) Unwrap() error { return e.err }

// leaseRequest is a grant or a revoke waiting for the committer.
type leaseRequest struct {
	grant  *Lease
	revoke int64
	orphan bool // finish a revoke a crash cut: the lease is already gone from the table
}

// LeaseGrant adds a lease to the table and returns it; it returns once the
// lease is durable. ID 0 lets the store choose a free positive ID. It fails
// with ErrLeaseExist when the ID is taken and ErrLeaseTTLTooLarge above
// MaxLeaseTTL. The store does not raise small TTLs: that is the minimum TTL
// of the layer that runs the clock (etcd's lessor, lease/lessor.go Grant).
func (s *Store) LeaseGrant(ctx context.Context, l Lease) (Lease, error) {
	if l.TTL > MaxLeaseTTL {
		return Lease{}, ErrLeaseTTLTooLarge
	}
	resp, err := s.submit(&request{ctx: ctx, lease: &leaseRequest{grant: &l}})
	if err != nil {
		return Lease{}, err
	}
	return resp.(Lease), nil
}

// LeaseRevoke removes lease id from the table and deletes every key
// attached to it, all at one revision (docs/SPEC.md, Leases); watches see
// one DELETE event per key at that revision. It returns the store's
// revision after the revoke (unchanged when no key was attached), once the
// revoke is durable, or ErrLeaseNotFound.
func (s *Store) LeaseRevoke(ctx context.Context, id int64) (int64, error) {
	resp, err := s.submit(&request{ctx: ctx, lease: &leaseRequest{revoke: id}})
	if err != nil {
		return 0, err
	}
	return resp.(int64), nil
}

// Leases returns the lease table, by ID.
func (s *Store) Leases() []Lease {
	s.lt.mu.RLock()
	defer s.lt.mu.RUnlock()
	out := make([]Lease, 0, len(s.lt.ttl))
	for id, ttl := range s.lt.ttl {
		out = append(out, Lease{ID: id, TTL: ttl})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// LeaseLookup returns lease id and the keys attached to it (in byte order),
// or false if the table has no such lease.
func (s *Store) LeaseLookup(id int64) (Lease, []string, bool) {
	s.lt.mu.RLock()
	defer s.lt.mu.RUnlock()
	ttl, ok := s.lt.ttl[id]
	if !ok {
		return Lease{}, nil, false
	}
	keys := make([]string, 0, len(s.lt.keys[id]))
	for k := range s.lt.keys[id] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return Lease{ID: id, TTL: ttl}, keys, true
}

// applyLease applies a grant or a revoke at the committer's state.
func (bt *batch) applyLease(lr *leaseRequest) (any, error) {
	s := bt.s
	lt := &s.lt
	if lr.grant != nil {
		l := *lr.grant
		lt.mu.RLock()
		_, taken := lt.ttl[l.ID]
		for l.ID == 0 || (lr.grant.ID == 0 && taken) {
			l.ID = rand.Int64() // positive, as etcd's (v3_server.go LeaseGrant)
			_, taken = lt.ttl[l.ID]
		}
		next := make(map[int64]int64, len(lt.ttl)+1)
		for id, t := range lt.ttl {
			next[id] = t
		}
		lt.mu.RUnlock()
		if taken {
			return nil, ErrLeaseExist
		}
		next[l.ID] = l.TTL
		if err := s.saveLeases(next); err != nil {
			return nil, &leaseFileError{err}
		}
		s.opts.point("lease: grant's table written")
		lt.mu.Lock()
		lt.ttl = next
		lt.mu.Unlock()
		return l, nil
	}
	id := lr.revoke
	if !lr.orphan {
		lt.mu.RLock()
		_, ok := lt.ttl[id]
		next := make(map[int64]int64, len(lt.ttl))
		for i, t := range lt.ttl {
			if i != id {
				next[i] = t
			}
		}
		lt.mu.RUnlock()
		if !ok {
			return nil, ErrLeaseNotFound
		}
		if err := s.saveLeases(next); err != nil {
			return nil, &leaseFileError{err}
		}
		s.opts.point("lease: revoke's table written")
		lt.mu.Lock()
		lt.ttl = next
		lt.mu.Unlock()
	}
	// The keys attached as of the last durable commit, and those this batch
	// attached: each is deleted if its live version still has the lease.
	cand := map[string]struct{}{}
	lt.mu.RLock()
	for k := range lt.keys[id] {
		cand[k] = struct{}{}
	}
	lt.mu.RUnlock()
	for _, c := range bt.commits {
		for _, ev := range c.Events {
			if ev.Type == Put && ev.KV.Lease == id {
				cand[ev.KV.Key] = struct{}{}
			}
		}
	}
	keys := make([]string, 0, len(cand))
	for k := range cand {
		keys = append(keys, k)
	}
	slices.Sort(keys) // etcd deletes them in key order (lessor.go Revoke)
	w := bt.begin()
	for _, key := range keys {
		prev, prevRev, err := w.current(key)
		if err != nil {
			return nil, err
		}
		if prev == nil || prev.Lease != id {
			continue
		}
		rec := record{kv: KeyValue{Key: key, ModRevision: w.rev}, tomb: true, hasPrev: true, prev: prevRev}
		if err := w.write(&rec); err != nil {
			return nil, err
		}
		w.events = append(w.events, Event{Type: Delete, KV: KeyValue{Key: key, ModRevision: w.rev}, PrevKV: prev})
	}
	w.end()
	return s.crev, nil
}

// checkLeases fails a put, or a transaction branch that puts, with a lease
// the table does not hold, before anything is written.
func (s *Store) checkLeases(ops []Op) error {
	for _, op := range ops {
		if op.Put != nil && op.Put.Lease != 0 && !s.lt.has(op.Put.Lease) {
			return ErrLeaseNotFound
		}
	}
	return nil
}

// finishRevokes deletes the live keys attached to leases the table does
// not hold: revokes a crash cut between the table and the log (see above).
func (s *Store) finishRevokes() error {
	s.lt.mu.RLock()
	var orphans []int64
	for id := range s.lt.keys {
		if _, ok := s.lt.ttl[id]; !ok {
			orphans = append(orphans, id)
		}
	}
	s.lt.mu.RUnlock()
	slices.Sort(orphans)
	for _, id := range orphans {
		if _, err := s.submit(&request{ctx: context.Background(), lease: &leaseRequest{revoke: id, orphan: true}}); err != nil {
			return fmt.Errorf("mvcc: finish the revoke of lease %d: %w", id, err)
		}
		s.recovered.Notes = append(s.recovered.Notes, fmt.Sprintf("finished the revoke of lease %x that a crash interrupted", id))
	}
	return nil
}

// checkLeases verifies the lease file, if any: a damaged one is damage of
// the store (Open refuses it, Check reports it, Recover moves it aside).
func (in *inspection) checkLeases() error {
	p := filepath.Join(in.dir, leaseFileName)
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("mvcc: read %s: %w", p, err)
	}
	if _, err := decodeLeases(b); err != nil {
		in.damaged(p, -1, "the lease table %v", err)
	}
	return nil
}
