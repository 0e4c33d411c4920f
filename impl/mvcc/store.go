package mvcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Options configure a [Store]. The zero Options are etcd-like defaults.
type Options struct {
	// OnCommit, if set, is called once for every write revision, in revision
	// order, after the revision is durable and readable and before any
	// writer of its batch is answered. It runs on the store's commit
	// goroutine, so it must be quick, must not block, and must not call the
	// Store's write methods. The Commit and its events are shared: do not
	// modify them. Every non-creating event carries its PrevKV.
	OnCommit func(Commit)

	// MaxBatch bounds the number of requests one group commit applies in one
	// transaction of the data file (default 1024).
	MaxBatch int

	// CompactionBatchLimit is the number of records the physical compaction
	// deletes per transaction (default 1000, as etcd's
	// --experimental-compaction-batch-limit).
	CompactionBatchLimit int

	// CompactionSleepInterval is the pause between two compaction
	// transactions (default 0; etcd pauses 10ms).
	CompactionSleepInterval time.Duration

	// UnsafeNoFsync skips fsync on commit. A write is then acknowledged
	// before it is durable and a machine crash can lose it. For tests and
	// benchmarks that do not measure durability only.
	UnsafeNoFsync bool

	// compactionHook, if set, runs after every committed compaction batch
	// (numbered from 1; done marks the last). Tests use it to snapshot the
	// data file between batches.
	compactionHook func(rev int64, batch int, done bool)
}

func (o *Options) setDefaults() {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1024
	}
	if o.CompactionBatchLimit <= 0 {
		o.CompactionBatchLimit = 1000
	}
}

// Store is a durable MVCC key-value store with etcd's semantics: a global
// revision that starts at 1 and grows by one per writing request, every
// version of every key readable by revision down to the compact revision,
// transactions, and compaction (docs/SPEC.md §2).
//
// # Durability
//
// Every write is applied by one commit goroutine. Writers that arrive while a
// commit is being written to disk wait together and are applied, in arrival
// order, in the next transaction of the data file (group commit), so one
// fsync acknowledges many writes. A write method returns only after its
// transaction is on disk; a crash afterwards loses nothing it acknowledged,
// and a restart recovers the revision, the compact revision and every
// version at or above it. The revision never decreases across restarts.
//
// # Compaction
//
// Compact makes every revision below its argument unreadable at once and
// durably, then deletes the unreachable records in the background, in
// batches of CompactionBatchLimit records, oldest first. A crash part-way
// leaves a data file that reopens with the same revision and compact
// revision and finishes the job (etcd#17780, etcd#19179). The state of every
// key at the compact revision stays readable, including a tombstone exactly
// at it, so that a watch from the compact revision sees a DELETE there
// (etcd#18089).
//
// # Concurrency
//
// All methods are safe for concurrent use. Reads never wait for writes to
// reach the disk: they see the latest durable revision. Reads and writes are
// linearizable.
type Store struct {
	db   *bolt.DB
	opts Options
	idx  *index
	view atomic.Pointer[view] // what readers see; replaced after every commit

	mu      sync.Mutex
	queue   []*request
	wake    chan struct{} // cap 1: the committer has work
	closing bool
	failed  error         // a commit failed: the store refuses writes
	done    chan struct{} // closed when the committer has exited

	// Committer-owned logical state: the revision and compact revision after
	// the requests applied so far, durable or not.
	crev, ccompact int64

	compactor compactor
	commits   atomic.Int64 // transactions committed by the committer
}

// view is a consistent pair that readers load at once.
type view struct {
	rev        int64 // the latest durable revision
	compactRev int64 // the compact revision in force, -1 if none
}

// Bucket and meta key names in the data file.
var (
	bucketKey  = []byte("key")
	bucketMeta = []byte("meta")

	metaRev       = []byte("revision")          // the latest committed revision
	metaScheduled = []byte("scheduled-compact") // the latest acknowledged compaction
	metaFinished  = []byte("finished-compact")  // the latest physically finished compaction
	metaFormat    = []byte("format")
)

const formatVersion = 1

// Open opens (creating if needed) the store whose data lives in the
// directory dir, recovers its state, and resumes any compaction a crash
// interrupted. Only one process may open a directory at a time.
func Open(dir string, opts Options) (*Store, error) {
	opts.setDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mvcc: open %s: %w", dir, err)
	}
	db, err := bolt.Open(filepath.Join(dir, "mvcc.db"), 0o600, &bolt.Options{
		Timeout:        10 * time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		NoSync:         opts.UnsafeNoFsync,
	})
	if err != nil {
		return nil, fmt.Errorf("mvcc: open %s: %w", dir, err)
	}
	s := &Store{db: db, opts: opts, idx: newIndex(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	keep, err := s.recover()
	if err != nil {
		db.Close()
		return nil, err
	}
	s.compactor.start(s, keep)
	go s.commitLoop()
	return s, nil
}

// recover rebuilds the key index from the data file and restores the
// revision and compact revision. If an acknowledged compaction was not
// physically finished, it returns the records that compaction keeps so that
// the compactor can finish it.
func (s *Store) recover() (keep map[revision]struct{}, err error) {
	var rev, scheduled, finished int64 = 1, -1, -1
	err = s.db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucketIfNotExists(bucketKey)
		if err != nil {
			return err
		}
		mb, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if f := mb.Get(metaFormat); f == nil {
			if err := mb.Put(metaFormat, i64(formatVersion)); err != nil {
				return err
			}
		} else if v, ok := readI64(f); !ok || v != formatVersion {
			return fmt.Errorf("%w: unknown format %x", ErrCorrupt, f)
		}
		for _, m := range []struct {
			key []byte
			dst *int64
		}{{metaRev, &rev}, {metaScheduled, &scheduled}, {metaFinished, &finished}} {
			if b := mb.Get(m.key); b != nil {
				v, ok := readI64(b)
				if !ok {
					return fmt.Errorf("%w: meta %s", ErrCorrupt, m.key)
				}
				*m.dst = v
			}
		}
		return kb.ForEach(func(k, v []byte) error {
			r, err := parseRevKey(k)
			if err != nil {
				return err
			}
			rec, err := decodeRecord(r, v, true)
			if err != nil {
				return err
			}
			s.idx.add(rec.kv.Key, indexRev{main: r.main, sub: r.sub, tomb: rec.tomb})
			// The revision is the highest of what the meta says, what the
			// records say and the compaction: it never goes back (etcd#17780).
			rev = max(rev, r.main)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("mvcc: recover: %w", err)
	}
	rev = max(rev, scheduled)
	if scheduled >= 0 {
		keep = s.idx.compact(scheduled)
		if finished >= scheduled {
			keep = nil
		}
	}
	s.crev, s.ccompact = rev, scheduled
	s.view.Store(&view{rev: rev, compactRev: scheduled})
	return keep, nil
}

func i64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func readI64(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

// Revision returns the store's current revision: 1 for a fresh store, plus
// one for every request that wrote something.
func (s *Store) Revision() int64 { return s.view.Load().rev }

// CompactRevision returns the revision of the last compaction, or -1 when
// the store was never compacted.
func (s *Store) CompactRevision() int64 { return s.view.Load().compactRev }

// Close stops the store: requests not yet applied fail with ErrClosed, the
// background compaction stops (the next Open resumes it) and the data file
// is closed. Close waits for requests being applied to finish.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closing = true
	pending := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, r := range pending {
		r.finish(nil, ErrClosed)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.compactor.stop()
	return s.db.Close()
}

// request is one write waiting for the committer.
type request struct {
	ctx  context.Context
	put  *PutRequest
	del  *DeleteRequest
	txn  *TxnRequest
	comp *int64

	resp any
	err  error
	done chan struct{}
}

func (r *request) finish(resp any, err error) {
	r.resp, r.err = resp, err
	close(r.done)
}

// submit hands r to the committer and waits for its answer. If ctx ends
// first it returns ctx.Err(); the request may or may not be applied.
func (s *Store) submit(r *request) (any, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	r.done = make(chan struct{})
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return nil, ErrClosed
	case s.failed != nil:
		err := s.failed
		s.mu.Unlock()
		return nil, err
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return r.resp, r.err
	case <-r.ctx.Done():
		return nil, r.ctx.Err()
	}
}

// Put writes a key. It returns once the write is durable.
func (s *Store) Put(ctx context.Context, req PutRequest) (PutResponse, error) {
	if req.Key == "" {
		return PutResponse{}, ErrEmptyKey
	}
	resp, err := s.submit(&request{ctx: ctx, put: &req})
	if err != nil {
		return PutResponse{}, err
	}
	return resp.(PutResponse), nil
}

// Delete removes the live keys of a range. It returns once the deletion is
// durable; a deletion that removes nothing writes nothing.
func (s *Store) Delete(ctx context.Context, req DeleteRequest) (DeleteResponse, error) {
	if req.Key == "" {
		return DeleteResponse{}, ErrEmptyKey
	}
	resp, err := s.submit(&request{ctx: ctx, del: &req})
	if err != nil {
		return DeleteResponse{}, err
	}
	return resp.(DeleteResponse), nil
}

// Txn runs a transaction (see [TxnRequest]). It returns once its writes, if
// any, are durable. A transaction that fails validation changes nothing.
func (s *Store) Txn(ctx context.Context, req TxnRequest) (TxnResponse, error) {
	if err := checkTxn(&req); err != nil {
		return TxnResponse{}, err
	}
	resp, err := s.submit(&request{ctx: ctx, txn: &req})
	if err != nil {
		return TxnResponse{}, err
	}
	return resp.(TxnResponse), nil
}

// Compact makes every revision below rev unreadable. It fails with
// ErrCompacted when rev is at or below the compact revision and with
// ErrFutureRev when rev is above the current revision. It returns once the
// new compact revision is durable and in force; the unreachable records are
// deleted in the background.
func (s *Store) Compact(ctx context.Context, rev int64) (CompactResponse, error) {
	resp, err := s.submit(&request{ctx: ctx, comp: &rev})
	if err != nil {
		return CompactResponse{}, err
	}
	return resp.(CompactResponse), nil
}

// errWrongView makes a reader start over: a compaction came into force
// between loading the view and opening the read transaction.
var errWrongView = errors.New("view changed")

// read runs fn with a read transaction of the data file that holds every
// record needed to read at any revision in [v.compactRev, v.rev], and with
// the index read-locked (fn may release it early by calling unlock).
func (s *Store) read(fn func(v *view, tx *bolt.Tx, unlock func()) error) error {
	for {
		v := s.view.Load()
		tx, err := s.db.Begin(false)
		if err != nil {
			if errors.Is(err, bolt.ErrDatabaseNotOpen) {
				return ErrClosed
			}
			return err
		}
		// The transaction was opened after v's revision was durable, so it
		// holds it. It also holds every record a read at or above v's compact
		// revision needs, unless a later compaction (which deletes records
		// only after it is in force) was already in force when it opened:
		// check under the index lock, which such a compaction takes.
		s.idx.mu.RLock()
		locked := true
		unlock := func() {
			if locked {
				locked = false
				s.idx.mu.RUnlock()
			}
		}
		if s.view.Load().compactRev != v.compactRev {
			err = errWrongView
		} else {
			err = fn(v, tx, unlock)
		}
		unlock()
		tx.Rollback()
		if err != errWrongView {
			return err
		}
	}
}

// Range reads the keys of a range at a revision (see [RangeRequest]).
func (s *Store) Range(ctx context.Context, req RangeRequest) (RangeResponse, error) {
	if req.Key == "" {
		return RangeResponse{}, ErrEmptyKey
	}
	if err := ctx.Err(); err != nil {
		return RangeResponse{}, err
	}
	var out RangeResponse
	err := s.read(func(v *view, tx *bolt.Tx, unlock func()) error {
		rev := req.Revision
		if rev > v.rev {
			return ErrFutureRev
		}
		if rev <= 0 {
			rev = v.rev
		}
		if rev < v.compactRev {
			return ErrCompacted
		}
		refs, count, more := s.idx.rangeAt(req, rev)
		unlock()
		kvs, err := readKVs(tx.Bucket(bucketKey), refs, req.KeysOnly)
		if err != nil {
			return err
		}
		out = RangeResponse{Revision: v.rev, KVs: kvs, More: more, Count: count}
		return nil
	})
	if err != nil {
		return RangeResponse{}, err
	}
	return out, nil
}

// readKVs reads the key-values of the given records.
func readKVs(b *bolt.Bucket, refs []revision, keysOnly bool) ([]KeyValue, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	kvs := make([]KeyValue, 0, len(refs))
	for _, r := range refs {
		rec, err := getRecord(b, r, keysOnly)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, rec.kv)
	}
	return kvs, nil
}

func getRecord(b *bolt.Bucket, r revision, keyOnly bool) (record, error) {
	v := b.Get(revKey(r))
	if v == nil {
		return record{}, fmt.Errorf("%w: record %d.%d is missing", ErrCorrupt, r.main, r.sub)
	}
	return decodeRecord(r, v, keyOnly)
}

// Events returns the events of revisions from through to, in revision and
// operation order, stopping early at the end of the first revision that
// brings their number to maxEvents or more (maxEvents ≤ 0: no limit). It
// returns the last revision it covered completely: to, or the revision it
// stopped after. With withPrev, every event whose key existed at
// ModRevision-1 carries that state as PrevKV, unless ModRevision-1 is below
// the compact revision.
//
// It fails with ErrCompacted when from is below the compact revision and
// with ErrFutureRev when to is above the current revision. Events never
// splits a revision.
func (s *Store) Events(from, to int64, maxEvents int, withPrev bool) (evs []Event, last int64, err error) {
	err = s.read(func(v *view, tx *bolt.Tx, unlock func()) error {
		unlock()
		if from < v.compactRev {
			return ErrCompacted
		}
		if to > v.rev {
			return ErrFutureRev
		}
		evs, last = nil, to
		if from > to {
			return nil
		}
		b := tx.Bucket(bucketKey)
		c := b.Cursor()
		for k, val := c.Seek(revKey(revision{main: max(from, 0)})); k != nil; k, val = c.Next() {
			r, err := parseRevKey(k)
			if err != nil {
				return err
			}
			if r.main > to {
				break
			}
			if maxEvents > 0 && len(evs) >= maxEvents && r.main != evs[len(evs)-1].KV.ModRevision {
				last = evs[len(evs)-1].KV.ModRevision
				break
			}
			rec, err := decodeRecord(r, val, false)
			if err != nil {
				return err
			}
			e := rec.event()
			if withPrev && rec.hasPrev && r.main-1 >= v.compactRev {
				p, err := getRecord(b, rec.prev, false)
				if err != nil {
					return err
				}
				e.PrevKV = &p.kv
			}
			evs = append(evs, e)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return evs, last, nil
}
