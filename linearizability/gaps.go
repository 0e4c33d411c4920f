package linearizability

import (
	"math"
	"slices"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// The gap-filling stage: the revision-order stage (order.go) for a trace
// whose server lease deletions no watch showed (see serverLeaseOps). Such
// a deletion has no known revision, and neither has a client write of
// unknown outcome that no watch pinned; when either created a revision
// that a read then saw, the plain revision order, which takes them as not
// applied, fails. fillGaps places the operations of known revision as the
// revision order does and replays them; where the next operation needs a
// revision that none of them created (a gap), it tries the unplaced writes
// that real time allows there, most likely first, and keeps the first one
// that creates the gap and under which the operations that read at that
// revision are answered as recorded. A revocation a client saw
// acknowledged that no gap took is applied by its return (it must then
// delete nothing). A wrong choice only costs the fast path: porcupine,
// which sees none of the choices, decides when the stage fails.

// revisionOrderFilling is the revision-order stage for a trace with server
// lease deletions that no watch showed (ends): the plain revision order
// first (they may all have deleted nothing), then fillGaps.
func revisionOrderFilling(ops []*op, ends map[*traces.Op]leaseEnd, start States, a allow) (kv.State, bool) {
	if s, ok := revisionOrder(ops, start, a); ok || len(ends) == 0 || a.gaps || len(start) == 0 {
		return s, ok
	}
	s, ok := fillGaps(ops, ends, start, a)
	if !ok {
		for _, p := range ops {
			p.guess = 0
		}
	}
	return s, ok
}

// fillGaps is the gap-filling stage; on success, op.guess holds the
// revision each unplaced write created (0: not applied, or applied
// deleting nothing).
func fillGaps(ops []*op, ends map[*traces.Op]leaseEnd, start States, a allow) (kv.State, bool) {
	var rest, cands []*op
	info := map[*op]leaseEnd{}
	for _, p := range ops {
		p.guess = 0
		switch e, ok := ends[p.t]; {
		case ok:
			cands, info[p] = append(cands, p), e
		case p.out.Response == nil && p.out.Pinned == 0:
			cands, info[p] = append(cands, p), leaseEnd{expected: p.call}
		default:
			rest = append(rest, p)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return info[cands[i]].expected < info[cands[j]].expected })
	alive := leasesSeenAlive(rest)
	// deletedAt reports whether a deletion of c's lease at g contradicts
	// a read: one that, at a revision at or above g, showed a version put
	// with the lease below g.
	deletedAt := func(c *op, g int64) bool {
		r := c.t.Request.LeaseRevoke
		if r == nil {
			return true
		}
		for _, s := range alive[r.Lease] {
			if s[0] < g && g <= s[1] {
				return false
			}
		}
		return true
	}
	placed := place(rest, newRevisionIndex(rest, start[0].Revision()))
	if !order(placed) {
		return kv.State{}, false
	}
	used := map[*op]bool{}
	states := start
	point := int64(math.MinInt64)
	// apply steps a candidate at the current point, if real time allows.
	apply := func(c *op, out Output) (States, bool) {
		if max(point, c.call) > c.ret {
			return nil, false
		}
		next := a.step(states, c.t.Request, out)
		return next, len(next) > 0
	}
	for i, q := range placed {
		need := q.bucket
		if createdHere(q) {
			need--
		}
		// Acknowledged revocations whose return real time passes now take
		// effect before q.
		for _, c := range cands {
			if !used[c] && c.out.Response != nil && c.ret < q.call {
				next, ok := apply(c, c.out)
				if !ok {
					return kv.State{}, false
				}
				if rev := next[0].Revision(); rev > states[0].Revision() {
					c.guess = rev
				}
				states, used[c], point = next, true, max(point, c.call)
			}
		}
		for len(states) == 1 && states[0].Revision() < need {
			g := states[0].Revision() + 1
			filled := false
			for _, c := range byHint(cands, info, g) {
				e := info[c]
				if used[c] || c.call > q.ret || e.attached >= g || c.out.NotAt[g] || !deletedAt(c, g) {
					continue
				}
				out := Output{Pinned: g}
				if c.out.Response != nil {
					r := *c.out.Response
					r.Revision = g
					out = Output{Response: &r}
				}
				next, ok := apply(c, out)
				if !ok || !readsAgree(placed[i:], g, next, a) {
					continue
				}
				states, used[c], c.guess, point, filled = next, true, g, max(point, c.call), true
				break
			}
			if !filled {
				return kv.State{}, false
			}
		}
		point = max(point, q.call)
		if point > q.ret {
			return kv.State{}, false
		}
		if states = a.step(states, q.t.Request, q.out); len(states) == 0 {
			return kv.State{}, false
		}
	}
	for _, c := range cands {
		if !used[c] && c.out.Response != nil {
			next, ok := apply(c, c.out)
			if !ok || next[0].Revision() != states[0].Revision() {
				return kv.State{}, false
			}
			states, point = next, max(point, c.call)
		}
	}
	if len(states) != 1 {
		return kv.State{}, false
	}
	return states[0], true
}

// leasesSeenAlive returns, for each lease, the (ModRevision, revision
// read) of every version put with it that a successful range showed.
func leasesSeenAlive(ops []*op) map[int64][][2]int64 {
	out := map[int64][][2]int64{}
	for _, p := range ops {
		req, r := p.t.Request.Range, p.out.Response
		if req == nil || r == nil || r.Err != nil || r.Range == nil {
			continue
		}
		rev := req.Revision
		if rev <= 0 {
			rev = r.Revision
		}
		for _, k := range r.Range.KVs {
			if k.Lease != 0 {
				out[k.Lease] = append(out[k.Lease], [2]int64{k.ModRevision, rev})
			}
		}
	}
	return out
}

// byHint returns cands with those whose hint is g first: an acknowledged
// revoke answered with the header g created g, if anything did.
func byHint(cands []*op, info map[*op]leaseEnd, g int64) []*op {
	i := slices.IndexFunc(cands, func(c *op) bool { return info[c].hint == g })
	if i < 0 {
		return cands
	}
	return append([]*op{cands[i]}, slices.Delete(slices.Clone(cands), i, i+1)...)
}

// readsAgree reports whether the operations at the head of ordered are
// answered as recorded from states, as far as they go without another gap
// (an operation that needs a revision the states have not reached), up to
// lookahead of them; g is the gap just filled.
func readsAgree(ordered []*op, g int64, states States, a allow) bool {
	for n, p := range ordered {
		need := p.bucket
		if createdHere(p) {
			need--
		}
		if n == lookahead || len(states) != 1 || states[0].Revision() < need {
			return true
		}
		if states = a.step(states, p.t.Request, p.out); len(states) == 0 {
			return false
		}
	}
	return true
}

// lookahead bounds how many operations readsAgree replays.
const lookahead = 256
