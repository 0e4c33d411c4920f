package lease

import (
	"errors"
	"slices"
	"testing"
)

// SPEC §2.9: the lease operations answer as etcd v3.7.3's lessor does.
func TestStep(t *testing.T) {
	var s State
	var r Response
	do := func(req Request) Response {
		s, r = Step(s, req)
		return r
	}
	// A client-chosen ID is kept; a TTL below the minimum is raised to it.
	if r := do(Request{Grant: &GrantRequest{ID: 7, TTL: 1}}); r.Err != nil || r.ID != 7 || r.TTL != DefaultMinTTL {
		t.Fatalf("grant 7 TTL 1 = %+v, want ID 7 TTL %d", r, DefaultMinTTL)
	}
	// ID 0: the server chooses a positive ID that is not taken.
	if r := do(Request{Grant: &GrantRequest{TTL: 10}}); r.Err != nil || r.ID <= 0 || r.ID == 7 || r.TTL != 10 {
		t.Fatalf("grant 0 TTL 10 = %+v", r)
	}
	server := r.ID
	if r := do(Request{Grant: &GrantRequest{ID: 7, TTL: 5}}); !errors.Is(r.Err, ErrExist) {
		t.Fatalf("grant of a live ID = %+v, want %v", r, ErrExist)
	}
	if r := do(Request{Grant: &GrantRequest{ID: 8, TTL: MaxTTL + 1}}); !errors.Is(r.Err, ErrTTLTooLarge) {
		t.Fatalf("grant above MaxTTL = %+v, want %v", r, ErrTTLTooLarge)
	}
	if r := do(Request{Grant: &GrantRequest{ID: 8, TTL: MaxTTL}}); r.Err != nil || r.TTL != MaxTTL {
		t.Fatalf("grant at MaxTTL = %+v", r)
	}
	want := []int64{7, 8, server}
	slices.Sort(want)
	if r := do(Request{Leases: &LeasesRequest{}}); !slices.Equal(r.IDs, want) {
		t.Fatalf("leases = %v, want %v", r.IDs, want)
	}
	if r := do(Request{KeepAlive: &KeepAliveRequest{ID: 7}}); r.TTL != DefaultMinTTL {
		t.Fatalf("keep-alive of 7 = %+v", r)
	}
	if r := do(Request{TimeToLive: &TimeToLiveRequest{ID: 7}}); r.TTL != DefaultMinTTL || r.GrantedTTL != DefaultMinTTL {
		t.Fatalf("time-to-live of 7 = %+v", r)
	}
	if r := do(Request{Revoke: &RevokeRequest{ID: 7}}); r.Err != nil {
		t.Fatalf("revoke 7 = %+v", r)
	}
	// A revoked lease is gone.
	if r := do(Request{Revoke: &RevokeRequest{ID: 7}}); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("second revoke = %+v, want %v", r, ErrNotFound)
	}
	if r := do(Request{TimeToLive: &TimeToLiveRequest{ID: 7}}); r.TTL != -1 {
		t.Fatalf("time-to-live of a revoked lease = %+v, want TTL -1", r)
	}
	if r := do(Request{KeepAlive: &KeepAliveRequest{ID: 7}}); r.Err != nil || r.TTL != 0 {
		t.Fatalf("keep-alive of a revoked lease = %+v, want TTL 0", r)
	}
	if _, ok := s.Live(7); ok {
		t.Fatal("lease 7 still live after its revocation")
	}
	if r := do(Request{}); !errors.Is(r.Err, ErrInvalidRequest) {
		t.Fatalf("empty request = %+v", r)
	}
	// A configured minimum.
	s2, r2 := Step(State{MinTTL: 5}, Request{Grant: &GrantRequest{ID: 1, TTL: 3}})
	if r2.TTL != 5 {
		t.Fatalf("grant TTL 3 with MinTTL 5 = %+v", r2)
	}
	if _, ok := s2.Live(1); !ok {
		t.Fatal("granted lease not live")
	}
}

// SPEC §2.9: Step is pure: the state it was given is unchanged.
func TestStepIsPure(t *testing.T) {
	s, _ := Step(State{}, Request{Grant: &GrantRequest{ID: 1, TTL: 5}})
	s2, _ := Step(s, Request{Revoke: &RevokeRequest{ID: 1}})
	if _, ok := s.Live(1); !ok {
		t.Fatal("revoke changed the state it was given")
	}
	if _, ok := s2.Live(1); ok {
		t.Fatal("revoke did not end the lease")
	}
}
