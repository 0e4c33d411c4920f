package lease

import (
	"errors"
	"fmt"
	"slices"

	"github.com/watchspec/watchspec/model/spec"
)

// Op is one recorded lease operation. Response is nil when the outcome is
// unknown (the client gave up).
type Op struct {
	// Where locates the operation for messages (such as "line 12").
	Where        string
	Call, Return int64
	Request      Request
	Response     *Response
}

// Attach is a successful put that named a lease: at Revision, Key was put
// with Lease. Call and Return are the put's times.
type Attach struct {
	Where        string
	Key          string
	Lease        int64
	Revision     int64
	Call, Return int64
}

// Deletion is the deletion of a key that no recorded client made: the
// server's own, which only a lease's revocation or expiry may explain.
type Deletion struct {
	// Where locates the first observation (a watch response, with its line).
	Where    string
	Key      string
	Revision int64
	// Lease is the lease the deleted version was put with (its
	// KeyValue.Lease), 0 for none.
	Lease int64
	// Observed is the earliest time a client had seen the deletion: the
	// time of the first watch response that delivered it, or the return of
	// the first read that missed the key.
	Observed int64
}

// History is what [Check] judges: the recorded lease operations, the puts
// that attached keys to leases, the puts refused because their lease was not
// found, and the deletions no client made. A server restart needs no record:
// etcd keeps its leases and counts their TTLs again from recovery, which
// only makes expiry later, so a server that forgets its leases shows up as a
// §2.11 LeaseExpiry violation — its keys deleted early, or the lease seen
// gone early.
type History struct {
	Ops      []Op
	Attaches []Attach
	// Refused are the puts (or transactions) naming a lease that the
	// server refused with [ErrNotFound]; their Revision is 0.
	Refused   []Attach
	Deletions []Deletion
}

// Check decides the lease properties over h and returns the broken ones:
//
//   - §2.10 LeaseAttach: a put with a lease succeeded although the lease
//     was never granted before the put returned, or was revoked (a revoke of
//     it succeeded and returned) before the put was called.
//   - §2.11 LeaseExpiry: a deletion that no revoke explains (no revoke of
//     its lease was called before it was observed, whatever it answered:
//     clientv3 retries a revoke, so "not found" may follow its own success) was observed at a time t
//     with t < c + TTL, where c is the call time of a grant or keep-alive of
//     the lease called before t and acknowledged with TTL > 0: the server had
//     renewed the lease at or after c, so it could not expire before c + TTL.
//     Likewise, an operation that found the lease gone — a keep-alive
//     answered TTL 0, a time-to-live answered TTL −1, a revoke or a put
//     refused with [ErrNotFound] — and returned at t < c + TTL, where the
//     acknowledged grant or keep-alive called at c returned before the
//     operation was called, and no revoke of the lease (this one included)
//     was called before t.
//     (A list of the leases is not judged: etcd answers it from the local
//     member, which may not have applied a grant yet.)
//   - §3.14 LeaseDeletes: a deletion no client made removed a version put
//     without a lease.
//   - §3.15 LeaseAtomic: the deletions of one lease's keys happened at more
//     than one revision.
//
// The cost is O(n log n) in the size of h, plus O(d·k) for d deletions and k
// acknowledged grants and keep-alives of their leases.
func Check(h History) []spec.Violation {
	var out []spec.Violation
	// What the history says of each lease: its acknowledged grants and
	// keep-alives, and its revokes that succeeded or may have.
	type ack struct{ call, ret, ttl int64 }
	revokedAt := map[int64][]Op{} // lease → successful (or unknown) revokes
	acks := map[int64][]ack{}
	revokeCalls := map[int64][]int64{} // lease → the calls of every revoke of it
	for _, o := range h.Ops {
		r := o.Response
		switch {
		case o.Request.Grant != nil:
			if r != nil && r.Err == nil {
				acks[r.ID] = append(acks[r.ID], ack{o.Call, o.Return, r.TTL})
			}
		case o.Request.KeepAlive != nil:
			if r != nil && r.Err == nil && r.TTL > 0 {
				acks[o.Request.KeepAlive.ID] = append(acks[o.Request.KeepAlive.ID], ack{o.Call, o.Return, r.TTL})
			}
		case o.Request.Revoke != nil:
			if r == nil || r.Err == nil {
				revokedAt[o.Request.Revoke.ID] = append(revokedAt[o.Request.Revoke.ID], o)
			}
			// clientv3 retries a revoke (retry.go: repeatable), so one
			// answered "not found" may have revoked the lease itself.
			revokeCalls[o.Request.Revoke.ID] = append(revokeCalls[o.Request.Revoke.ID], o.Call)
		}
	}

	// §2.10 LeaseAttach.
	for _, a := range h.Attaches {
		grantedBefore := hasGrantBefore(h.Ops, a.Lease, a.Return)
		if !grantedBefore {
			out = append(out, spec.Violation{Property: spec.LeaseAttach, Revisions: []int64{a.Revision}, Keys: []string{a.Key},
				Message: fmt.Sprintf("%s: put of %q with lease %d succeeded, but no grant of lease %d was called before the put returned; etcd answers %q", a.Where, a.Key, a.Lease, a.Lease, ErrNotFound)})
			continue
		}
		for _, rv := range revokedAt[a.Lease] {
			if rv.Response != nil && rv.Return < a.Call {
				out = append(out, spec.Violation{Property: spec.LeaseAttach, Revisions: []int64{a.Revision}, Keys: []string{a.Key},
					Message: fmt.Sprintf("%s: put of %q with lease %d succeeded, but the lease had been revoked (%s returned before the put was called); etcd answers %q", a.Where, a.Key, a.Lease, rv.Where, ErrNotFound)})
				break
			}
		}
	}

	// §3.14 LeaseDeletes and §3.15 LeaseAtomic.
	byLease := map[int64][]Deletion{}
	for _, d := range h.Deletions {
		if d.Lease == 0 {
			out = append(out, spec.Violation{Property: spec.LeaseDeletes, Revisions: []int64{d.Revision}, Keys: []string{d.Key},
				Message: fmt.Sprintf("%s: %q was deleted at revision %d by no recorded client, and the deleted version had no lease: only a lease's revocation or expiry deletes keys on the server's behalf", d.Where, d.Key, d.Revision)})
			continue
		}
		byLease[d.Lease] = append(byLease[d.Lease], d)
	}
	leases := make([]int64, 0, len(byLease))
	for l := range byLease {
		leases = append(leases, l)
	}
	slices.Sort(leases)
	for _, l := range leases {
		ds := byLease[l]
		revs := map[int64]bool{}
		var keys []string
		var rs []int64
		for _, d := range ds {
			if !revs[d.Revision] {
				revs[d.Revision] = true
				rs = append(rs, d.Revision)
			}
			keys = append(keys, d.Key)
		}
		if len(rs) > 1 {
			slices.Sort(rs)
			out = append(out, spec.Violation{Property: spec.LeaseAtomic, Revisions: rs, Keys: keys,
				Message: fmt.Sprintf("%s: the keys of lease %d were deleted at %d revisions %v; a revocation or expiry deletes all of a lease's keys at one revision", ds[0].Where, l, len(rs), rs)})
		}
		// §2.11 LeaseExpiry: judged at the first observation of any of
		// the lease's deletions.
		first := ds[0]
		for _, d := range ds[1:] {
			if d.Observed < first.Observed {
				first = d
			}
		}
		revoked := false
		for _, c := range revokeCalls[l] {
			if c <= first.Observed {
				revoked = true
			}
		}
		if revoked {
			continue
		}
		var worst *ack
		for i, a := range acks[l] {
			if a.call <= first.Observed && first.Observed < a.call+a.ttl*1e9 {
				if worst == nil || a.call+a.ttl*1e9 > worst.call+worst.ttl*1e9 {
					worst = &acks[l][i]
				}
			}
		}
		if worst != nil {
			early := worst.call + worst.ttl*1e9 - first.Observed
			out = append(out, spec.Violation{Property: spec.LeaseExpiry, Revisions: []int64{first.Revision}, Keys: []string{first.Key},
				Message: fmt.Sprintf("%s: %q, attached to lease %d (TTL %d s), was seen deleted by expiry %.3f s before the lease could expire: a grant or keep-alive called at %.3f s was acknowledged, so the lease lived at least until %.3f s",
					first.Where, first.Key, l, worst.ttl, float64(early)/1e9, float64(worst.call)/1e9, float64(worst.call+worst.ttl*1e9)/1e9)})
		}
	}

	// §2.11 LeaseExpiry: a lease seen gone early. Any revoke called before
	// the sighting returned explains it, whatever its answer (clientv3 may
	// retry a revoke that took effect, and get "not found").
	type sighting struct {
		where, what    string
		lease, call, t int64
	}
	var seen []sighting
	for _, o := range h.Ops {
		r := o.Response
		switch {
		case r == nil:
		case o.Request.KeepAlive != nil && r.Err == nil && r.TTL <= 0:
			seen = append(seen, sighting{o.Where, "a keep-alive answered TTL 0", o.Request.KeepAlive.ID, o.Call, o.Return})
		case o.Request.TimeToLive != nil && r.Err == nil && r.TTL == -1:
			seen = append(seen, sighting{o.Where, "a time-to-live answered TTL -1", o.Request.TimeToLive.ID, o.Call, o.Return})
		case o.Request.Revoke != nil && errors.Is(r.Err, ErrNotFound):
			seen = append(seen, sighting{o.Where, fmt.Sprintf("a revoke answered %q", ErrNotFound), o.Request.Revoke.ID, o.Call, o.Return})
		}
	}
	for _, a := range h.Refused {
		seen = append(seen, sighting{a.Where, fmt.Sprintf("a put of %q naming it was refused with %q", a.Key, ErrNotFound), a.Lease, a.Call, a.Return})
	}
	for _, g := range seen {
		revoked := false
		for _, c := range revokeCalls[g.lease] {
			if c < g.t {
				revoked = true
			}
		}
		if revoked {
			continue
		}
		var worst *ack
		for i, a := range acks[g.lease] {
			if a.ret <= g.call && g.t < a.call+a.ttl*1e9 && (worst == nil || a.call+a.ttl*1e9 > worst.call+worst.ttl*1e9) {
				worst = &acks[g.lease][i]
			}
		}
		if worst != nil {
			out = append(out, spec.Violation{Property: spec.LeaseExpiry,
				Message: fmt.Sprintf("%s: %s for lease %d (TTL %d s), %.3f s before the lease could expire: a grant or keep-alive called at %.3f s was acknowledged before it was called, so the lease lived at least until %.3f s, and no revoke of it was called",
					g.where, g.what, g.lease, worst.ttl, float64(worst.call+worst.ttl*1e9-g.t)/1e9, float64(worst.call)/1e9, float64(worst.call+worst.ttl*1e9)/1e9)})
		}
	}
	return out
}

// hasGrantBefore reports whether a grant of lease that succeeded, or whose
// outcome is unknown and which asked for that ID, was called before t.
func hasGrantBefore(ops []Op, lease, t int64) bool {
	for _, g := range ops {
		if g.Request.Grant == nil || g.Call >= t {
			continue
		}
		if g.Response == nil && g.Request.Grant.ID == lease || g.Response != nil && g.Response.Err == nil && g.Response.ID == lease {
			return true
		}
	}
	return false
}
