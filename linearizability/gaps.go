package linearizability

import (
	"maps"
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
// that creates the gap and under which the operations that follow, up to
// the next gap, are answered as recorded; when the replay fails later, it
// goes back to the latest gap and tries the next candidate there. A revocation a client saw
// acknowledged that no gap took is applied by its return (it must then
// delete nothing). A wrong choice only costs the fast path: porcupine,
// which sees none of the choices, decides when the stage fails.

// revisionOrderFilling is the revision-order stage for a trace with server
// lease deletions that no watch showed (ends): the plain revision order
// first (they may all have deleted nothing), then fillGaps.
func revisionOrderFilling(ops []*op, ends map[*traces.Op]leaseEnd, start States, a allow) (kv.State, bool) {
	if s, ok := revisionOrder(ops, start, a); ok || len(ends) == 0 || len(start) == 0 {
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
// deleting nothing). Each gap is a choice: when the replay fails later, it
// goes back to the latest choice and tries its next candidate (a search in
// depth, every replayed step counted against fillBudget).
func fillGaps(ops []*op, ends map[*traces.Op]leaseEnd, start States, a allow) (kv.State, bool) {
	f := &filler{a: a, info: map[*op]leaseEnd{}}
	var rest []*op
	for _, p := range ops {
		p.guess = 0
		switch e, ok := ends[p.t]; {
		case ok:
			f.cands, f.info[p] = append(f.cands, p), e
		case p.out.Response == nil && p.out.Pinned == 0:
			f.cands, f.info[p] = append(f.cands, p), leaseEnd{expected: p.call}
		default:
			rest = append(rest, p)
		}
	}
	sort.SliceStable(f.cands, func(i, j int) bool { return f.info[f.cands[i]].expected < f.info[f.cands[j]].expected })
	f.alive = leasesSeenAlive(rest)
	f.placed = place(rest, newRevisionIndex(rest, start[0].Revision()))
	if !order(f.placed) {
		return kv.State{}, false
	}
	f.budget = fillBudget * (len(f.placed) + 1)
	cur := fillState{states: start, point: math.MinInt64, used: map[*op]int64{}}
	var choices []choice
	for {
		if s, ok := f.advance(&cur, &choices); ok {
			for c, rev := range cur.used {
				c.guess = rev
			}
			return s, true
		}
		// Go back to the latest choice that has another candidate.
		for {
			if len(choices) == 0 || f.budget <= 0 {
				return kv.State{}, false
			}
			ch := &choices[len(choices)-1]
			cur = ch.before
			cur.used = maps.Clone(ch.before.used)
			if n, ok := f.fill(&cur, ch.g, ch.next); ok {
				ch.next = n + 1
				break
			}
			choices = choices[:len(choices)-1]
		}
	}
}

// fillBudget bounds fillGaps: the steps it replays, per placed operation.
const fillBudget = 64

// filler is what fillGaps works with.
type filler struct {
	a      allow
	placed []*op                // the operations of known revision, in order
	cands  []*op                // the writes without one, most likely first
	info   map[*op]leaseEnd     // of each candidate
	alive  map[int64][][2]int64 // leasesSeenAlive
	budget int                  // steps left
}

// fillState is where a replay stands: the next placed operation, the
// states, the linearization point, and the candidates applied (with the
// revision each created, 0 for none).
type fillState struct {
	i      int
	states States
	point  int64
	used   map[*op]int64
}

// choice is one gap filled: the state before it, the gap, and the next
// candidate (in byHint order) to try there.
type choice struct {
	before fillState
	g      int64
	next   int
}

// advance replays from cur to the end, filling gaps (and recording each
// choice), and reports the final state; false when the replay fails or the
// budget runs out.
func (f *filler) advance(cur *fillState, choices *[]choice) (kv.State, bool) {
	for ; cur.i < len(f.placed); cur.i++ {
		q := f.placed[cur.i]
		need := q.bucket
		if createdHere(q) {
			need--
		}
		// Acknowledged revocations whose return real time passes now take
		// effect before q.
		for _, c := range f.cands {
			if _, done := cur.used[c]; !done && c.out.Response != nil && c.ret < q.call {
				if !f.apply(cur, c, c.out) {
					return kv.State{}, false
				}
			}
		}
		for len(cur.states) == 1 && cur.states[0].Revision() < need {
			ch := choice{before: *cur, g: cur.states[0].Revision() + 1}
			ch.before.used = maps.Clone(cur.used)
			n, ok := f.fill(cur, ch.g, 0)
			if !ok && f.a.gaps {
				break // a store allowed RevisionGaps may have skipped it
			}
			if !ok {
				return kv.State{}, false
			}
			ch.next = n + 1
			*choices = append(*choices, ch)
		}
		cur.point = max(cur.point, q.call)
		if f.budget--; cur.point > q.ret || f.budget <= 0 {
			return kv.State{}, false
		}
		if cur.states = f.a.step(cur.states, q.t.Request, q.out); len(cur.states) == 0 {
			return kv.State{}, false
		}
	}
	// The acknowledged revocations left take effect now; what they delete
	// creates revisions no operation saw.
	for _, c := range f.cands {
		if _, done := cur.used[c]; !done && c.out.Response != nil {
			if !f.apply(cur, c, c.out) {
				return kv.State{}, false
			}
		}
	}
	if len(cur.states) != 1 {
		return kv.State{}, false
	}
	return cur.states[0], true
}

// apply steps candidate c with output out at cur, if real time allows,
// and records it used.
func (f *filler) apply(cur *fillState, c *op, out Output) bool {
	if max(cur.point, c.call) > c.ret {
		return false
	}
	f.budget--
	next := f.a.step(cur.states, c.t.Request, out)
	if len(next) == 0 {
		return false
	}
	var rev int64
	if r := next[0].Revision(); r > cur.states[0].Revision() {
		rev = r
	}
	cur.states, cur.used[c], cur.point = next, rev, max(cur.point, c.call)
	return true
}

// fill creates gap g at cur, before the placed operation cur.i, with the
// first candidate from the from-th (in byHint order) that real time allows
// there, whose deletion no read contradicts (a version of its lease that
// a read at or above g showed live was put below g), and under which the
// operations that follow are answered as recorded (readsAgree). It returns
// the candidate's index.
func (f *filler) fill(cur *fillState, g int64, from int) (int, bool) {
	q := f.placed[cur.i]
	for n, c := range byHint(f.cands, f.info, g) {
		if n < from {
			continue
		}
		if _, done := cur.used[c]; done || c.call > q.ret || f.info[c].attached >= g || c.out.NotAt[g] || !f.mayDeleteAt(c, g) {
			continue
		}
		out := Output{Pinned: g}
		if c.out.Response != nil {
			r := *c.out.Response
			r.Revision = g
			out = Output{Response: &r}
		}
		if max(cur.point, c.call) > c.ret {
			continue
		}
		f.budget--
		next := f.a.step(cur.states, c.t.Request, out)
		if len(next) == 0 || !readsAgree(f.placed[cur.i:], next, f.a, &f.budget) {
			continue
		}
		cur.states, cur.used[c], cur.point = next, g, max(cur.point, c.call)
		return n, true
	}
	return 0, false
}

// mayDeleteAt reports whether a deletion of c's lease at g agrees with the
// reads: none showed, at a revision at or above g, a version put with the
// lease below g (the deletion would have removed it).
func (f *filler) mayDeleteAt(c *op, g int64) bool {
	r := c.t.Request.LeaseRevoke
	if r == nil {
		return true
	}
	for _, s := range f.alive[r.Lease] {
		if s[0] < g && g <= s[1] {
			return false
		}
	}
	return true
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
// lookahead of them; each step is counted against budget.
func readsAgree(ordered []*op, states States, a allow, budget *int) bool {
	for n, p := range ordered {
		need := p.bucket
		if createdHere(p) {
			need--
		}
		if n == lookahead || len(states) != 1 || states[0].Revision() < need {
			return true
		}
		*budget--
		if states = a.step(states, p.t.Request, p.out); len(states) == 0 {
			return false
		}
	}
	return true
}

// lookahead bounds how many operations readsAgree replays.
const lookahead = 256
