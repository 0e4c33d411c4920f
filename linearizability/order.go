package linearizability

import (
	"math"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
)

// revisionOrder tries to linearize in the order the revisions dictate — the
// placement, ordering and replay stages of the package documentation. It
// returns the final state when that order is a linearization.
func revisionOrder(ops []*op, start States, a allow) (kv.State, bool) {
	if len(start) == 0 {
		return kv.State{}, false
	}
	placed := place(ops, newRevisionIndex(ops, start[0].Revision()))
	if !order(placed) {
		return kv.State{}, false
	}
	return replay(placed, start, a)
}

// revisionIndex answers, for a time t, the highest revision an operation
// that returned before t saw ([revisionIndex.lower]) and the lowest
// revision an operation called after t saw ([revisionIndex.upper]): the
// revisions known to exist, to place operations that carry none.
type revisionIndex struct {
	start            int64
	byReturn         []*op   // successful operations by return time
	maxRevReturnedBy []int64 // max revision among byReturn[0..i]
	byCall           []*op   // successful operations by call time
	minRevCalledFrom []int64 // min revision among byCall[i..]
}

func newRevisionIndex(ops []*op, start int64) *revisionIndex {
	x := &revisionIndex{start: start}
	for _, p := range ops {
		if p.out.Response != nil && p.out.Response.Err == nil && !p.out.AnyRevision {
			x.byReturn = append(x.byReturn, p)
		}
	}
	sort.Slice(x.byReturn, func(i, j int) bool { return x.byReturn[i].ret < x.byReturn[j].ret })
	x.maxRevReturnedBy = make([]int64, len(x.byReturn))
	for i, p := range x.byReturn {
		x.maxRevReturnedBy[i] = p.out.Response.Revision
		if i > 0 {
			x.maxRevReturnedBy[i] = max(x.maxRevReturnedBy[i], x.maxRevReturnedBy[i-1])
		}
	}
	x.byCall = append([]*op(nil), x.byReturn...)
	sort.Slice(x.byCall, func(i, j int) bool { return x.byCall[i].call < x.byCall[j].call })
	x.minRevCalledFrom = make([]int64, len(x.byCall)+1)
	x.minRevCalledFrom[len(x.byCall)] = math.MaxInt64
	for i := len(x.byCall) - 1; i >= 0; i-- {
		x.minRevCalledFrom[i] = min(x.minRevCalledFrom[i+1], x.byCall[i].out.Response.Revision)
	}
	return x
}

// lower returns the highest revision returned before time t (the start
// revision when none).
func (x *revisionIndex) lower(t int64) int64 {
	i := sort.Search(len(x.byReturn), func(i int) bool { return x.byReturn[i].ret >= t })
	if i == 0 {
		return x.start
	}
	return x.maxRevReturnedBy[i-1]
}

// upper returns the lowest revision of an operation called after time t
// (math.MaxInt64 when none).
func (x *revisionIndex) upper(t int64) int64 {
	i := sort.Search(len(x.byCall), func(i int) bool { return x.byCall[i].call > t })
	return x.minRevCalledFrom[i]
}

// createdHere reports whether p's outcome created the revision it is placed
// at.
func createdHere(p *op) bool {
	if p.out.Pinned > 0 {
		return true
	}
	rev, ok := createdRevision(p.out.Response)
	return ok && rev == p.bucket
}

// isCompaction reports whether p is a successful compaction.
func isCompaction(p *op) bool {
	return p.t.Request.Compact != nil && p.out.Response != nil && p.out.Response.Err == nil
}

// place is the placement stage: it gives every operation the revision it
// belongs to (bucket) and its place among that revision's operations (key),
// and returns the operations to order — those of unknown outcome that no
// watch pinned are taken as not applied.
func place(ops []*op, x *revisionIndex) []*op {
	creator := map[int64]*op{}
	var placed []*op
	for _, p := range ops {
		p.key = p.call
		switch {
		case p.out.Pinned > 0:
			p.bucket = p.out.Pinned
		case p.out.Response == nil:
			continue // unknown and unseen: taken as not applied
		case p.out.AnyRevision:
			// A revocation that no gap was given to: taken as deleting
			// nothing, as early as real time allows.
			p.bucket = x.lower(p.call)
		case p.out.Response.Err == nil:
			p.bucket = p.out.Response.Revision
		default:
			p.bucket = -1 // placed below, once the creators are known
		}
		if p.bucket > 0 && createdHere(p) {
			creator[p.bucket] = p
		}
		placed = append(placed, p)
	}
	for _, p := range placed {
		if p.bucket == -1 {
			placeFailed(p, x, creator)
		}
	}
	placeCompactions(placed)
	return placed
}

// placeFailed places an operation that failed. One that fails because a
// revision does not exist yet, or whatever the state, goes as early as real
// time allows. One that fails because compaction already happened goes as
// late as real time allows — after every operation called before it
// returned, in the last revision whose creator was called before it
// returned.
func placeFailed(p *op, x *revisionIndex, creator map[int64]*op) {
	if !kv.SameError(p.out.Response.Err, kv.ErrCompacted) {
		p.bucket = x.lower(p.call)
		return
	}
	u := x.upper(p.ret)
	switch c, ok := creator[u]; {
	case u == math.MaxInt64:
		p.bucket, p.key = x.lower(math.MaxInt64), math.MaxInt64
	case ok && c.call >= p.ret:
		p.bucket, p.key = u-1, math.MaxInt64
	default:
		p.bucket, p.key = u, p.ret
	}
}

// placeCompactions places each compaction within its revision. A compaction
// changes no revision, only which reads succeed: it goes as late as real
// time allows — at its return, so that a read of older history called
// before it returned may still precede it — but before any operation of
// that revision that failed on compacted history and returned after the
// compaction was called.
func placeCompactions(placed []*op) {
	failedCompacted := map[int64][]*op{}
	for _, p := range placed {
		if r := p.out.Response; r != nil && kv.SameError(r.Err, kv.ErrCompacted) {
			failedCompacted[p.bucket] = append(failedCompacted[p.bucket], p)
		}
	}
	for _, p := range placed {
		if !isCompaction(p) {
			continue
		}
		p.key = p.ret
		for _, f := range failedCompacted[p.bucket] {
			if f.key >= p.call {
				p.key = min(p.key, f.key)
			}
		}
	}
}

// order is the ordering stage: within a revision, the write that created it
// first, then the rest by their key (the call time; for a read that failed
// on compacted history, its return; for a compaction, as placed), a
// compaction before what has the same key. It reports whether the order
// respects real time: linearization points p_i = max(p_{i-1}, call_i) must
// not pass return_i.
func order(placed []*op) bool {
	sort.SliceStable(placed, func(i, j int) bool {
		a, b := placed[i], placed[j]
		if a.bucket != b.bucket {
			return a.bucket < b.bucket
		}
		if ca, cb := createdHere(a), createdHere(b); ca != cb {
			return ca
		}
		if a.key != b.key {
			return a.key < b.key
		}
		return isCompaction(a) && !isCompaction(b)
	})
	point := int64(math.MinInt64)
	for _, p := range placed {
		point = max(point, p.call)
		if point > p.ret {
			return false
		}
	}
	return true
}

// replay is the replay stage: it steps the model through the order and
// reports whether every operation is answered as recorded, with the final
// state. Several start states (an unknown base compaction) may survive only
// until the replay tells them apart.
func replay(ordered []*op, start States, a allow) (kv.State, bool) {
	states := start
	for _, p := range ordered {
		if states = a.step(states, p.t.Request, p.out); len(states) == 0 {
			return kv.State{}, false
		}
	}
	if len(states) != 1 {
		return kv.State{}, false
	}
	return states[0], true
}
