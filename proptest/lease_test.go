package proptest

import (
	"errors"
	"slices"
	"sync"
	"time"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
)

// The state machine's lease actions (SPEC §2.9 Lease operations, §2.10
// LeaseAttach, §2.11 LeaseExpiry, §3.14 LeaseDeletes, §3.15 LeaseAtomic).
// The model's side is model/lease's Step for the lease table and
// model/kv's Step for the keys: a revoke, asked for or by expiry, is one
// transaction that deletes every key whose live version carries the lease,
// so the watches' validators demand all its DELETE events at one revision.
// Time is a fake clock the test moves; the store expires leases only when
// the test calls ExpireLeases, and the test knows when each lease is due.

// fakeClock is the store's lease clock: it moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// resetExpiry gives every live lease its full TTL from now, as Open does
// (etcd's lessor Promote): leases survive a restart with the TTL reset.
func (m *machine) resetExpiry() {
	m.expiry = map[int64]time.Time{}
	now := m.clock.Now()
	for _, id := range m.leases.IDs() {
		ttl, _ := m.leases.Live(id)
		m.expiry[id] = now.Add(time.Duration(ttl) * time.Second)
	}
}

// attached returns the keys whose live version carries lease id, in key
// order, as the model's key space holds them.
func (m *machine) attached(id int64) []string {
	_, r := kv.Step(m.model, kv.Request{Range: &kv.RangeRequest{Key: "\x00", RangeEnd: "\x00"}})
	var keys []string
	if r.Range != nil {
		for _, k := range r.Range.KVs {
			if k.Lease == id {
				keys = append(keys, k.Key)
			}
		}
	}
	return keys
}

// revokeModel revokes lease id on the model's side: the lease goes and its
// keys are deleted in one transaction, one revision (SPEC §3.15 LeaseAtomic).
// It returns how many keys were deleted.
func (m *machine) revokeModel(id int64) int {
	keys := m.attached(id)
	next, r := lease.Step(m.leases, lease.Request{Revoke: &lease.RevokeRequest{ID: id}})
	if r.Err != nil {
		m.t.Fatalf("model revoke of live lease %x: %v", id, r.Err)
	}
	m.leases = next
	delete(m.expiry, id)
	if len(keys) == 0 {
		return 0
	}
	var txn kv.TxnRequest
	for _, k := range keys {
		txn.Success = append(txn.Success, kv.Op{Delete: &kv.DeleteRequest{Key: k}})
	}
	nextKV, want := kv.Step(m.model, kv.Request{Txn: &txn})
	if want.Err != nil {
		m.t.Fatalf("model revoke of lease %x: deleting %q: %v", id, keys, want.Err)
	}
	c, _ := nextKV.LastCommit()
	if err := m.h.Append(c); err != nil {
		m.t.Fatalf("history: %v", err)
	}
	m.model = nextKV
	m.revokeRevs[nextKV.Revision()] = true
	return len(keys)
}

// leaseErr returns the error a put with a lease that is not live gives req
// (SPEC §2.10 LeaseAttach), or nil; want is the key-value model's answer,
// which leaves leases out. The request's own checks, which etcd's gRPC layer
// makes, come first. In a transaction, etcd checks the ops of the branch
// taken in order (etcdserver/txn/txn.go checkTxn at v3.7.3): a range at a
// revision compacted or in the future, or a put with a lease that is not
// live (txn/put.go checkLease); the first that fails decides the error.
func (m *machine) leaseErr(req kv.Request, want kv.Response) error {
	live := func(id int64) bool {
		_, ok := m.leases.Live(id)
		return id == 0 || ok
	}
	switch {
	case req.Put != nil:
		if want.Err == nil && !live(req.Put.Lease) {
			return lease.ErrNotFound
		}
	case req.Txn != nil:
		if want.Err != nil && want.Err != kv.ErrFutureRev && want.Err != kv.ErrCompacted {
			return nil
		}
		_, branch := kv.Step(m.model, kv.Request{Txn: &kv.TxnRequest{Compare: req.Txn.Compare}})
		ops := req.Txn.Failure
		if branch.Txn != nil && branch.Txn.Succeeded {
			ops = req.Txn.Success
		}
		for _, op := range ops {
			if r := op.Range; r != nil && r.Revision != 0 && (r.Revision > m.model.Revision() || r.Revision < m.model.CompactRevision()) {
				return nil
			}
			if op.Put != nil && !live(op.Put.Lease) {
				return lease.ErrNotFound
			}
		}
	}
	return nil
}

// leaseID draws a lease to name: a live one, one that was revoked or
// expired, or one never granted.
func (m *machine) leaseID(t *rapid.T, label string) int64 {
	live := m.leases.IDs()
	switch k := uniform(t, 8, label+"Kind"); {
	case k <= 5 && len(live) > 0:
		return sample(t, live, label)
	case k == 6 && len(m.gone) > 0:
		return sample(t, m.gone, label)
	}
	return sample(t, []int64{3, 77}, label+"Unknown")
}

// Grant grants a lease with an ID of the store's choice or the client's
// (perhaps a taken one), and a TTL perhaps below the minimum or above the
// maximum.
func (m *machine) Grant(t *rapid.T) {
	var id int64
	switch uniform(t, 4, "grantIDKind") {
	case 0, 1: // the server's choice
	case 2:
		id = between(t, 1, 5, "grantID")
	default:
		id = m.leaseID(t, "grantTaken")
	}
	ttl := between(t, 1, 8, "grantTTL")
	if oneIn(t, 8, "tooLarge") {
		ttl = lease.MaxTTL + between(t, 1, 2, "grantOver")
	}
	got, err := m.st.LeaseGrant(ctx, id, ttl)
	req := lease.GrantRequest{ID: id, TTL: ttl}
	if id == 0 && err == nil {
		// The ID is the server's choice (the model's is only one of them):
		// it must be positive and free; the model grants that one.
		if _, live := m.leases.Live(got.ID); got.ID <= 0 || live {
			t.Fatalf("grant with ID 0 chose %x: want a positive ID that is not a live lease (SPEC §2.9)", got.ID)
		}
		req.ID = got.ID
	}
	next, want := lease.Step(m.leases, lease.Request{Grant: &req})
	if !kv.SameError(err, want.Err) || (err == nil && (got.ID != want.ID || got.TTL != want.TTL)) {
		t.Fatalf("grant %+v:\n impl  %+v %v\n model %+v", lease.GrantRequest{ID: id, TTL: ttl}, got, err, want)
	}
	m.leases = next
	if err == nil {
		m.expiry[got.ID] = m.clock.Now().Add(time.Duration(got.TTL) * time.Second)
		m.gone = slices.DeleteFunc(m.gone, func(g int64) bool { return g == got.ID })
	}
	m.cov.add(func(c *coverage) {
		switch {
		case err == nil && id == 0:
			c.grants++
			c.serverIDs++
		case err == nil:
			c.grants++
		case errors.Is(err, store.ErrLeaseExist):
			c.grantsTaken++
		case errors.Is(err, store.ErrLeaseTTLTooLarge):
			c.grantsTooLarge++
		}
	})
}

// PutLease puts a key with a lease: live (the key is attached, SPEC §2.10),
// revoked, expired or never granted (the put fails).
func (m *machine) PutLease(t *rapid.T) {
	id := m.leaseID(t, "putLease")
	_, live := m.leases.Live(id)
	m.step(kv.Request{Put: &kv.PutRequest{Key: m.key(t, "key"), Value: m.value(t), PrevKV: rapid.Bool().Draw(t, "prevKV"), Lease: id}})
	m.cov.add(func(c *coverage) {
		if live {
			c.leasePuts++
		} else {
			c.leasePutsUnknown++
		}
	})
}

// Revoke revokes a lease, live or not: a live one's keys are deleted at one
// revision, which the store answers (SPEC §3.15).
func (m *machine) Revoke(t *rapid.T) {
	id := m.leaseID(t, "revoke")
	rev, err := m.st.LeaseRevoke(ctx, id)
	if _, live := m.leases.Live(id); !live {
		if !errors.Is(err, store.ErrLeaseNotFound) {
			t.Fatalf("revoke of lease %x, which is not live: %v, want %v (SPEC §2.9)", id, err, lease.ErrNotFound)
		}
		m.cov.add(func(c *coverage) { c.revokesUnknown++ })
		return
	}
	if err != nil {
		t.Fatalf("revoke of live lease %x: %v", id, err)
	}
	n := m.revokeModel(id)
	m.gone = append(m.gone, id)
	if rev != m.model.Revision() {
		t.Fatalf("revoke of lease %x (%d keys) answered revision %d, model %d", id, n, rev, m.model.Revision())
	}
	m.cov.add(func(c *coverage) {
		c.revokes++
		if n > 0 {
			c.revokesWithKeys++
		}
	})
}

// KeepAlive renews a lease. One whose TTL has passed is expired by the
// keep-alive instead (the store revokes it first): the answer is "not
// found", as the model's TTL 0.
func (m *machine) KeepAlive(t *rapid.T) {
	id := m.leaseID(t, "keepAlive")
	if _, live := m.leases.Live(id); live && !m.clock.Now().Before(m.expiry[id]) {
		m.revokeModel(id)
		m.gone = append(m.gone, id)
		m.cov.add(func(c *coverage) { c.expiries++ })
	}
	ttl, err := m.st.LeaseKeepAlive(ctx, id)
	_, want := lease.Step(m.leases, lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: id}})
	switch {
	case want.TTL == 0 && !errors.Is(err, store.ErrLeaseNotFound):
		t.Fatalf("keep-alive of lease %x, which is not live: %d %v, want %v", id, ttl, err, lease.ErrNotFound)
	case want.TTL != 0 && (err != nil || ttl != want.TTL):
		t.Fatalf("keep-alive of lease %x: %d %v, model TTL %d", id, ttl, err, want.TTL)
	case want.TTL != 0:
		m.expiry[id] = m.clock.Now().Add(time.Duration(ttl) * time.Second)
		m.cov.add(func(c *coverage) { c.keepAlives++ })
	}
}

// TimeToLive asks for a lease's status, perhaps with its keys: the granted
// TTL and the keys are the model's; the seconds left, which the model
// leaves to time, are what the fake clock says, truncated as etcd's.
func (m *machine) TimeToLive(t *rapid.T) {
	id := m.leaseID(t, "ttl")
	keys := !oneIn(t, 4, "ttlNoKeys")
	got, err := m.st.LeaseTimeToLive(id, keys)
	_, want := lease.Step(m.leases, lease.Request{TimeToLive: &lease.TimeToLiveRequest{ID: id, Keys: keys}})
	if want.TTL == -1 {
		if !errors.Is(err, store.ErrLeaseNotFound) {
			t.Fatalf("time-to-live of lease %x, which is not live: %+v %v, want %v", id, got, err, lease.ErrNotFound)
		}
		return
	}
	left := max(int64(m.expiry[id].Sub(m.clock.Now())/time.Second), 0)
	var wantKeys []string
	if keys {
		wantKeys = m.attached(id)
	}
	if err != nil || got.ID != id || got.GrantedTTL != want.GrantedTTL || got.TTL != left || got.TTL > want.TTL || !slices.Equal(got.Keys, wantKeys) {
		t.Fatalf("time-to-live of lease %x: %+v %v, model %+v with %d s left and keys %q", id, got, err, want, left, wantKeys)
	}
	m.cov.add(func(c *coverage) {
		if len(wantKeys) > 0 {
			c.ttlKeys++
		}
	})
}

// Leases lists the leases: the model's, with their granted TTLs.
func (m *machine) Leases(t *rapid.T) {
	got := m.st.Leases()
	var want []store.Lease
	for _, id := range m.leases.IDs() {
		ttl, _ := m.leases.Live(id)
		want = append(want, store.Lease{ID: id, TTL: ttl})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("leases %+v, model %+v", got, want)
	}
}

// Expire moves the clock and expires the leases that are due: exactly
// those whose TTL has passed since their grant, last keep-alive or the
// store's last Open — never one earlier (SPEC §2.11 LeaseExpiry), each a
// revoke of its own.
func (m *machine) Expire(t *rapid.T) {
	m.clock.advance(time.Duration(between(t, 0, 12, "advance")) * time.Second / 2)
	if oneIn(t, 4, "advanceOnly") {
		return
	}
	now := m.clock.Now()
	var due []int64
	for _, id := range m.leases.IDs() {
		if !now.Before(m.expiry[id]) {
			due = append(due, id)
		}
	}
	got, err := m.st.ExpireLeases(ctx)
	if err != nil || !slices.Equal(got, due) {
		t.Fatalf("expire at %v: %x %v, want the leases due %x (SPEC §2.11)", now, got, err, due)
	}
	for _, id := range due {
		n := m.revokeModel(id)
		m.gone = append(m.gone, id)
		m.cov.add(func(c *coverage) {
			c.expiries++
			if n > 0 {
				c.expiriesWithKeys++
			}
		})
	}
}
