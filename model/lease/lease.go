// Package lease specifies etcd's leases (docs/SPEC.md §2.9–§2.11, §3.14,
// §3.15): what the lease operations answer, how a put attaches a key to a
// lease, and what a client may observe when a lease is revoked or expires.
//
// The package is pure and stdlib only. Time enters only as the call and
// return times a recorder wrote, in nanoseconds; a lease's TTL is in seconds,
// as on etcd's wire.
//
// Two entry points:
//
//   - [Step] is the time-free state machine of the lease operations: grant,
//     revoke, keep-alive, time-to-live and leases, with etcd's errors.
//   - [Check] decides the lease properties over a recorded [History]: the
//     lease operations, the puts that attached keys, and the deletions no
//     client made (found in what watches delivered).
//
// Start with [ExampleCheck].
package lease

import (
	"errors"
	"slices"
)

// MaxTTL is the largest TTL etcd grants, in seconds (lease.MaxLeaseTTL at
// v3.7.3); a larger one fails with [ErrTTLTooLarge].
const MaxTTL = 9_000_000_000

// DefaultMinTTL is etcd's smallest TTL with its default flags, in seconds:
// ⌈(3·election-ticks/2)·heartbeat⌉ = ⌈15·100 ms⌉ = 2 s (etcdserver.NewServer
// at v3.7.3). A grant asking for less is granted this TTL.
const DefaultMinTTL = 2

// The errors of the lease operations. Their texts are etcd's (rpctypes at
// v3.7.3), so that a recorded error compares equal to the model's.
var (
	// ErrNotFound answers a revoke of a lease that does not exist, and a put
	// that names one (etcd's ErrGRPCLeaseNotFound).
	ErrNotFound = errors.New("etcdserver: requested lease not found")
	// ErrExist answers a grant of an ID that is already a lease.
	ErrExist = errors.New("etcdserver: lease already exists")
	// ErrTTLTooLarge answers a grant with a TTL above [MaxTTL].
	ErrTTLTooLarge = errors.New("etcdserver: too large lease TTL")
	// ErrInvalidRequest answers a Request that does not set exactly one
	// operation (the model's own; etcd's wire cannot express it).
	ErrInvalidRequest = errors.New("model: lease request must set exactly one operation")
)

// Request is one lease operation; exactly one field is set.
type Request struct {
	Grant      *GrantRequest
	Revoke     *RevokeRequest
	KeepAlive  *KeepAliveRequest
	TimeToLive *TimeToLiveRequest
	Leases     *LeasesRequest
}

// GrantRequest asks for a lease of TTL seconds. ID 0 lets the server choose
// the ID (a positive one); any other ID is the client's choice.
type GrantRequest struct{ ID, TTL int64 }

// RevokeRequest ends lease ID and deletes every key attached to it.
type RevokeRequest struct{ ID int64 }

// KeepAliveRequest renews lease ID: its TTL counts again from now.
type KeepAliveRequest struct{ ID int64 }

// TimeToLiveRequest asks how long lease ID has left, and with Keys its keys.
type TimeToLiveRequest struct {
	ID   int64
	Keys bool
}

// LeasesRequest lists the live leases.
type LeasesRequest struct{}

// Response is the answer to a lease [Request]. When Err is set nothing else
// is. The fields used depend on the request:
//
//   - grant: ID (the lease's, chosen by the server when asked for 0) and TTL
//     (the granted TTL: at least the one asked for, raised to the server's
//     minimum);
//   - keep-alive: ID and TTL (the granted TTL; 0 when the lease does not
//     exist, as etcd answers rather than failing);
//   - time-to-live: ID, TTL (seconds left; −1 when the lease does not
//     exist), GrantedTTL, and Keys (sorted) when asked;
//   - leases: IDs, sorted.
type Response struct {
	// Revision is the header revision, when recorded (0 otherwise).
	Revision   int64
	Err        error
	ID         int64
	TTL        int64
	GrantedTTL int64
	Keys       []string
	IDs        []int64
}

// State is the set of live leases: ID → granted TTL (seconds). The zero
// value has none. A State is a value: [Step] returns a new one.
type State struct {
	leases map[int64]int64
	// MinTTL is the server's minimum TTL (0 means [DefaultMinTTL]).
	MinTTL int64
	// next is the ID the model chooses for the next grant with ID 0.
	next int64
}

// Live reports whether id is a live lease and its granted TTL.
func (s State) Live(id int64) (ttl int64, ok bool) {
	ttl, ok = s.leases[id]
	return ttl, ok
}

// IDs returns the live leases, sorted.
func (s State) IDs() []int64 {
	ids := make([]int64, 0, len(s.leases))
	for id := range s.leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s State) with(id, ttl int64, live bool) State {
	m := make(map[int64]int64, len(s.leases)+1)
	for k, v := range s.leases {
		m[k] = v
	}
	if live {
		m[id] = ttl
	} else {
		delete(m, id)
	}
	s.leases = m
	return s
}

// Step applies req to s and returns the new state and the answer. It is
// pure and time-free: a keep-alive answers the granted TTL, a time-to-live
// the granted TTL as the time left (the real answer is between 1 and it).
// Expiry is not a request: a server expires a lease by revoking it itself
// (use a RevokeRequest). Keys are the kv store's, so Step answers a
// time-to-live with no keys; [Check] joins leases to keys.
//
// The rules (docs/SPEC.md §2.9): a grant with ID 0 gets a positive ID of the
// server's choice; a grant of a live ID fails with ErrExist; a TTL above
// MaxTTL fails with ErrTTLTooLarge; a TTL below the minimum is raised to it.
// A revoke of a lease that is not live fails with ErrNotFound. A keep-alive
// of one answers TTL 0, a time-to-live TTL −1: a revoked or expired lease is
// gone.
func Step(s State, req Request) (State, Response) {
	n := 0
	for _, set := range []bool{req.Grant != nil, req.Revoke != nil, req.KeepAlive != nil, req.TimeToLive != nil, req.Leases != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return s, Response{Err: ErrInvalidRequest}
	}
	switch {
	case req.Grant != nil:
		g := *req.Grant
		if g.TTL > MaxTTL {
			return s, Response{Err: ErrTTLTooLarge}
		}
		id := g.ID
		if id == 0 {
			for s.next++; s.leases[s.next] != 0; s.next++ {
			}
			id = s.next
		}
		if _, ok := s.leases[id]; ok {
			return s, Response{Err: ErrExist}
		}
		ttl, min := g.TTL, s.MinTTL
		if min == 0 {
			min = DefaultMinTTL
		}
		if ttl < min {
			ttl = min
		}
		return s.with(id, ttl, true), Response{ID: id, TTL: ttl}
	case req.Revoke != nil:
		if _, ok := s.leases[req.Revoke.ID]; !ok {
			return s, Response{Err: ErrNotFound}
		}
		return s.with(req.Revoke.ID, 0, false), Response{}
	case req.KeepAlive != nil:
		ttl := s.leases[req.KeepAlive.ID]
		return s, Response{ID: req.KeepAlive.ID, TTL: ttl}
	case req.TimeToLive != nil:
		ttl, ok := s.leases[req.TimeToLive.ID]
		if !ok {
			return s, Response{ID: req.TimeToLive.ID, TTL: -1}
		}
		return s, Response{ID: req.TimeToLive.ID, TTL: ttl, GrantedTTL: ttl}
	default:
		return s, Response{IDs: s.IDs()}
	}
}
