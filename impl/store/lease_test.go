package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/watchspec/watchspec/impl/store"
)

// fakeClock is a Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openLeases(t *testing.T, dir string, clk *fakeClock) *store.Store {
	t.Helper()
	s, err := store.Open(dir, store.Options{Lease: store.LeaseOptions{Clock: clk, CheckInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func expire(t *testing.T, s *store.Store) []int64 {
	t.Helper()
	ids, err := s.ExpireLeases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// SPEC §2.11 LeaseExpiry: a lease does not expire
// before its TTL has passed since the grant or the last acknowledged
// keep-alive; once it has, the server revokes it and deletes its keys.
func TestLeaseExpiresNotBeforeTTL(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	s := openLeases(t, t.TempDir(), clk)
	defer s.Close()
	ctx := context.Background()
	l, err := s.LeaseGrant(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if l.ID <= 0 || l.TTL != 10 {
		t.Fatalf("granted %+v", l)
	}
	if _, err := s.Put(ctx, store.PutRequest{Key: "k", Value: "v", Lease: l.ID}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10*time.Second - time.Millisecond)
	if ids := expire(t, s); len(ids) != 0 {
		t.Fatalf("expired %v a millisecond before the TTL", ids)
	}
	if st, err := s.LeaseTimeToLive(l.ID, true); err != nil || st.TTL != 0 || st.GrantedTTL != 10 || !reflect.DeepEqual(st.Keys, []string{"k"}) {
		t.Fatalf("TimeToLive just before expiry: %+v %v", st, err)
	}
	// SPEC §2.11 LeaseExpiry: a keep-alive extends the lease by its TTL from now.
	ttl, err := s.LeaseKeepAlive(ctx, l.ID)
	if err != nil || ttl != 10 {
		t.Fatalf("keep-alive: %d %v", ttl, err)
	}
	clk.Advance(9 * time.Second)
	if ids := expire(t, s); len(ids) != 0 {
		t.Fatalf("expired %v 9 s after a keep-alive with TTL 10 s", ids)
	}
	if st, _ := s.LeaseTimeToLive(l.ID, false); st.TTL != 1 {
		t.Fatalf("remaining TTL %d, want 1", st.TTL)
	}
	clk.Advance(time.Second)
	before := s.Revision()
	if ids := expire(t, s); !reflect.DeepEqual(ids, []int64{l.ID}) {
		t.Fatalf("expired %v at the TTL, want %d", ids, l.ID)
	}
	if s.Revision() != before+1 {
		t.Fatalf("expiry at revision %d, want %d", s.Revision(), before+1)
	}
	if r, _ := s.Range(ctx, store.RangeRequest{Key: "k"}); r.Count != 0 {
		t.Fatal("the expired lease's key is still there")
	}
	if _, err := s.LeaseTimeToLive(l.ID, false); !errors.Is(err, store.ErrLeaseNotFound) {
		t.Fatalf("TimeToLive of an expired lease: %v", err)
	}
	if _, err := s.LeaseKeepAlive(ctx, l.ID); !errors.Is(err, store.ErrLeaseNotFound) {
		t.Fatalf("keep-alive of an expired lease: %v", err)
	}
}

// SPEC §2.11 LeaseExpiry: a keep-alive that comes after the TTL has passed does
// not revive the lease, even before the expiry loop has run.
func TestLeaseKeepAliveAfterExpiry(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	s := openLeases(t, t.TempDir(), clk)
	defer s.Close()
	ctx := context.Background()
	l, _ := s.LeaseGrant(ctx, 9, 5)
	s.Put(ctx, store.PutRequest{Key: "k", Value: "v", Lease: 9})
	clk.Advance(5 * time.Second)
	if _, err := s.LeaseKeepAlive(ctx, l.ID); !errors.Is(err, store.ErrLeaseNotFound) {
		t.Fatalf("keep-alive at the TTL: %v, want ErrLeaseNotFound", err)
	}
	if r, _ := s.Range(ctx, store.RangeRequest{Key: "k"}); r.Count != 0 {
		t.Fatal("a keep-alive refused as expired left the lease's key")
	}
}

// SPEC §2.9 Lease operations: the minimum and maximum TTL are etcd's.
func TestLeaseGrantTTLBounds(t *testing.T) {
	s := openLeases(t, t.TempDir(), &fakeClock{})
	defer s.Close()
	ctx := context.Background()
	if l, err := s.LeaseGrant(ctx, 1, 1); err != nil || l.TTL != store.DefaultMinLeaseTTL {
		t.Fatalf("grant of TTL 1: %+v %v, want the minimum %d", l, err, store.DefaultMinLeaseTTL)
	}
	if _, err := s.LeaseGrant(ctx, 2, store.MaxLeaseTTL+1); !errors.Is(err, store.ErrLeaseTTLTooLarge) {
		t.Fatalf("grant above the maximum: %v", err)
	}
	if _, err := s.LeaseGrant(ctx, 1, 5); !errors.Is(err, store.ErrLeaseExist) {
		t.Fatalf("grant of a taken ID: %v", err)
	}
}

// SPEC §2.9 Lease operations: leases survive a restart, and each one's remaining TTL
// is reset to its full TTL (etcd's lessor Promote): time spent down never
// expires a lease.
func TestLeasesSurviveRestartWithTTLReset(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	s := openLeases(t, dir, clk)
	ctx := context.Background()
	s.LeaseGrant(ctx, 7, 10)
	s.Put(ctx, store.PutRequest{Key: "k", Value: "v", Lease: 7})
	clk.Advance(8 * time.Second)
	s.Kill()
	clk.Advance(time.Hour) // down for an hour
	s = openLeases(t, dir, clk)
	defer s.Close()
	if got := s.Leases(); !reflect.DeepEqual(got, []store.Lease{{ID: 7, TTL: 10}}) {
		t.Fatalf("leases after the restart: %v", got)
	}
	st, err := s.LeaseTimeToLive(7, true)
	if err != nil || st.TTL != 10 || !reflect.DeepEqual(st.Keys, []string{"k"}) {
		t.Fatalf("after the restart: %+v %v, want the full TTL 10 and key k", st, err)
	}
	if ids := expire(t, s); len(ids) != 0 {
		t.Fatalf("expired %v right after the restart", ids)
	}
	clk.Advance(10 * time.Second)
	if ids := expire(t, s); !reflect.DeepEqual(ids, []int64{7}) {
		t.Fatalf("expired %v a full TTL after the restart, want 7", ids)
	}
}

// SPEC §3.15 LeaseAtomic: a revoke deletes every attached key at one revision: a
// watch sees all the DELETE events in one response at that revision.
func TestLeaseRevokeOneWatchResponse(t *testing.T) {
	s := openLeases(t, t.TempDir(), &fakeClock{})
	defer s.Close()
	ctx := context.Background()
	s.LeaseGrant(ctx, 3, 60)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Put(ctx, store.PutRequest{Key: k, Value: "v", Lease: 3}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := s.Watch(ctx, store.WatchRequest{Key: "a", RangeEnd: "z", StartRevision: s.Revision() + 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(ctx); err != nil { // created
		t.Fatal(err)
	}
	rev, err := s.LeaseRevoke(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Events) != 3 {
		t.Fatalf("the revoke's response has %d events, want 3 DELETEs: %+v", len(resp.Events), resp.Events)
	}
	for i, ev := range resp.Events {
		if ev.Type != store.Delete || ev.KV.ModRevision != rev || ev.KV.Key != string(rune('a'+i)) {
			t.Fatalf("event %d: %+v, want DELETE %c at %d", i, ev, 'a'+i, rev)
		}
	}
}

// Leases: grant, attach a key, keep alive, revoke.
func ExampleStore_LeaseGrant() {
	dir, _ := os.MkdirTemp("", "watchspec-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	l, _ := s.LeaseGrant(ctx, 0x1234, 60) // with ID 0 the store chooses one
	s.Put(ctx, store.PutRequest{Key: "session", Value: "me", Lease: l.ID})
	ttl, _ := s.LeaseKeepAlive(ctx, l.ID)
	st, _ := s.LeaseTimeToLive(l.ID, true)
	fmt.Printf("lease %x: TTL %d s, keys %v\n", l.ID, ttl, st.Keys)
	rev, _ := s.LeaseRevoke(ctx, l.ID) // deletes "session"
	r, _ := s.Range(ctx, store.RangeRequest{Key: "session"})
	fmt.Printf("revoked at %d; session left: %d\n", rev, r.Count)
	// Output:
	// lease 1234: TTL 60 s, keys [session]
	// revoked at 3; session left: 0
}
