package store

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// Leases (docs/SPEC.md §2.9 Lease operations, §2.11 LeaseExpiry).
//
// The key-value store keeps the lease table durably and revokes (package
// mvcc: a revoke deletes every attached key at one revision); the Store
// keeps the time: each lease's expiry, moved by keep-alives, and the loop
// that revokes a lease once its TTL has passed since its grant or its last
// keep-alive — never earlier, later by up to one LeaseOptions.CheckInterval
// and the revoke's commit. After a restart every lease's expiry is its full
// TTL from Open, as etcd's lessor Promote does (lease/lessor.go): a lease
// never expires early because the server was down.

// Lease is a lease of the table: its ID and granted TTL, in seconds.
type Lease = mvcc.Lease

// MaxLeaseTTL is the largest TTL a lease may be granted with, in seconds
// (etcd's lease.MaxLeaseTTL).
const MaxLeaseTTL = mvcc.MaxLeaseTTL

// DefaultMinLeaseTTL is etcd's minimum TTL with its default heartbeat
// (100 ms) and election timeout (1000 ms): ⌈3/2 × election timeout⌉ = 2 s
// (etcdserver/server.go, minTTL).
const DefaultMinLeaseTTL = 2

// The lease errors; the texts are etcd's.
var (
	ErrLeaseNotFound    = mvcc.ErrLeaseNotFound
	ErrLeaseExist       = mvcc.ErrLeaseExist
	ErrLeaseTTLTooLarge = mvcc.ErrLeaseTTLTooLarge
)

// Clock is the time the leases run on: time.Now by default, a fake in
// tests, so that no test waits for a lease to expire.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// LeaseOptions configure the leases' clock.
type LeaseOptions struct {
	// MinTTL is the smallest TTL a lease is granted with, in seconds; a
	// grant below it is raised to it, as etcd's lessor does. Default
	// DefaultMinLeaseTTL.
	MinTTL int64
	// Clock is the time source (default the system clock).
	Clock Clock
	// CheckInterval is how often expired leases are revoked (default
	// 500 ms, as etcd's lessor checks). Negative: never by itself; the
	// caller calls Store.ExpireLeases (tests with a fake Clock).
	CheckInterval time.Duration
}

// LeaseStatus is what LeaseTimeToLive answers: the seconds left (truncated,
// as etcd's), the TTL granted and, when asked, the attached keys.
type LeaseStatus struct {
	ID         int64
	TTL        int64
	GrantedTTL int64
	Keys       []string
}

// lessor is the Store's lease clock.
type lessor struct {
	opts   LeaseOptions
	mu     sync.Mutex
	expiry map[int64]time.Time // leases granted or kept alive, with when they expire
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	gate   atomic.Pointer[sync.RWMutex]
}

func (s *Store) startLessor(opts LeaseOptions) {
	if opts.MinTTL <= 0 {
		opts.MinTTL = DefaultMinLeaseTTL
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = 500 * time.Millisecond
	}
	le := &s.le
	le.opts = opts
	le.expiry = map[int64]time.Time{}
	now := opts.Clock.Now()
	for _, l := range s.kv.Leases() { // etcd's Promote: the full TTL from now
		le.expiry[l.ID] = now.Add(time.Duration(l.TTL) * time.Second)
	}
	le.stop, le.done = make(chan struct{}), make(chan struct{})
	if opts.CheckInterval < 0 {
		close(le.done)
		return
	}
	go func() {
		defer close(le.done)
		t := time.NewTicker(opts.CheckInterval)
		defer t.Stop()
		for {
			select {
			case <-le.stop:
				return
			case <-t.C:
				s.ExpireLeases(context.Background())
			}
		}
	}()
}

func (s *Store) stopLessor() {
	s.le.once.Do(func() { close(s.le.stop) })
	<-s.le.done
}

// SetLeaseGate makes every revoke — asked for or by expiry — hold mu's
// read lock, as the server's other writes do: a server that runs some
// read-then-write requests alone under mu's write lock (impl/server's
// transactions and ignore_value puts) sets it before serving.
func (s *Store) SetLeaseGate(mu *sync.RWMutex) { s.le.gate.Store(mu) }

func (s *Store) gated() func() {
	if mu := s.le.gate.Load(); mu != nil {
		mu.RLock()
		return mu.RUnlock
	}
	return func() {}
}

// LeaseGrant grants a lease of ttl seconds with ID id, or an ID the store
// chooses when id is 0 (SPEC §2.9 Lease operations). A TTL below LeaseOptions.MinTTL is
// raised to it; the Lease returned says what was granted. It fails with
// ErrLeaseExist for a taken ID and ErrLeaseTTLTooLarge above MaxLeaseTTL.
// The lease expires ttl seconds from now unless kept alive.
func (s *Store) LeaseGrant(ctx context.Context, id, ttl int64) (Lease, error) {
	if ttl > MaxLeaseTTL {
		return Lease{}, ErrLeaseTTLTooLarge
	}
	ttl = max(ttl, s.le.opts.MinTTL)
	l, err := s.kv.LeaseGrant(ctx, Lease{ID: id, TTL: ttl})
	if err != nil {
		return Lease{}, err
	}
	s.le.mu.Lock()
	s.le.expiry[l.ID] = s.le.opts.Clock.Now().Add(time.Duration(l.TTL) * time.Second)
	s.le.mu.Unlock()
	return l, nil
}

// LeaseRevoke revokes lease id: every key attached to it is deleted at one
// revision, which it returns (the current revision when there were none),
// or ErrLeaseNotFound.
func (s *Store) LeaseRevoke(ctx context.Context, id int64) (int64, error) {
	defer s.gated()()
	rev, err := s.kv.LeaseRevoke(ctx, id)
	if err == nil || errors.Is(err, ErrLeaseNotFound) {
		s.le.mu.Lock()
		delete(s.le.expiry, id)
		s.le.mu.Unlock()
	}
	return rev, err
}

// LeaseKeepAlive renews lease id: it expires its TTL from now. It returns
// the TTL, or ErrLeaseNotFound for a lease that does not exist or has
// expired (an expired lease is revoked first, so that no key of it
// outlives the answer).
func (s *Store) LeaseKeepAlive(ctx context.Context, id int64) (int64, error) {
	s.le.mu.Lock()
	l, _, ok := s.kv.LeaseLookup(id)
	if !ok {
		s.le.mu.Unlock()
		return 0, ErrLeaseNotFound
	}
	now := s.le.opts.Clock.Now()
	if exp, ok := s.le.expiry[id]; ok && !now.Before(exp) {
		s.le.mu.Unlock()
		if _, err := s.LeaseRevoke(ctx, id); err != nil && !errors.Is(err, ErrLeaseNotFound) {
			return 0, err
		}
		return 0, ErrLeaseNotFound
	}
	s.le.expiry[id] = now.Add(time.Duration(l.TTL) * time.Second)
	s.le.mu.Unlock()
	return l.TTL, nil
}

// LeaseTimeToLive returns lease id's status, with its attached keys (in
// byte order) if keys is set, or ErrLeaseNotFound.
func (s *Store) LeaseTimeToLive(id int64, keys bool) (LeaseStatus, error) {
	l, ks, ok := s.kv.LeaseLookup(id)
	if !ok {
		return LeaseStatus{}, ErrLeaseNotFound
	}
	st := LeaseStatus{ID: id, GrantedTTL: l.TTL, TTL: l.TTL}
	s.le.mu.Lock()
	if exp, ok := s.le.expiry[id]; ok {
		st.TTL = max(int64(exp.Sub(s.le.opts.Clock.Now()).Seconds()), 0)
	}
	s.le.mu.Unlock()
	if keys {
		st.Keys = ks
	}
	return st, nil
}

// Leases returns every lease, by ID.
func (s *Store) Leases() []Lease { return s.kv.Leases() }

// ExpireLeases revokes every lease whose TTL has passed since its grant or
// its last keep-alive, and returns their IDs. The store calls it every
// LeaseOptions.CheckInterval; with a negative interval, the caller does.
func (s *Store) ExpireLeases(ctx context.Context) ([]int64, error) {
	s.le.mu.Lock()
	now := s.le.opts.Clock.Now()
	var due []int64
	for id, exp := range s.le.expiry {
		if !now.Before(exp) {
			due = append(due, id)
		}
	}
	s.le.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i] < due[j] })
	var revoked []int64
	for _, id := range due {
		s.le.mu.Lock()
		exp, ok := s.le.expiry[id]
		still := ok && !s.le.opts.Clock.Now().Before(exp) // not kept alive meanwhile
		s.le.mu.Unlock()
		if !still {
			continue
		}
		_, err := s.LeaseRevoke(ctx, id)
		switch {
		case err == nil:
			revoked = append(revoked, id)
		case errors.Is(err, ErrLeaseNotFound):
		default:
			return revoked, err
		}
	}
	return revoked, nil
}
