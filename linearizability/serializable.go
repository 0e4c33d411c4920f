package linearizability

import (
	"fmt"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

// checkSerializable decides §2.8 SerializableRead for the trace's
// serializable reads, which the linearization left out: each answers the
// state of final's history at its header revision, and that revision was
// committed by its return — at most the highest revision a write called
// before the read returned created. An error answer is judged as a lagging
// member could give it: ErrFutureRev always may be; ErrCompacted needs a
// compaction above the revision read that may have taken effect by the
// read's return (one in force at the start, or one called before it
// returned whose outcome is not known to be a failure).
func (res *Result) checkSerializable(reads, ops []*op, start States, final kv.State) {
	if len(reads) == 0 {
		return
	}
	committed := newCommittedIndex(ops, final, start[0].Revision())
	for _, p := range reads {
		req, resp := p.t.Request.Range, p.out.Response
		if req == nil {
			continue
		}
		res.Checks[spec.SerializableRead]++
		var vs []spec.Violation
		switch {
		case kv.SameError(resp.Err, kv.ErrCompacted):
			if !mayBeCompacted(req.Revision, p.ret, ops, start) {
				vs = []spec.Violation{{Property: spec.SerializableRead, Revisions: []int64{req.Revision}, Keys: []string{req.Key},
					Message: fmt.Sprintf("serializable range of %q at revision %d answered ErrCompacted, but no compaction above revision %d can have taken effect by its return", req.Key, req.Revision, req.Revision)}}
			}
		case resp.Err != nil:
		default:
			vs = kv.CheckSerializable(final, *req, *resp, committed.by(p.ret))
		}
		for _, v := range vs {
			res.Violations = append(res.Violations, Violation{Violation: v, Where: where(p.t)})
		}
	}
}

// committedIndex answers the highest revision that can have been committed
// by a time: the start's, or one a write of the linearization that was
// called before then created.
type committedIndex struct {
	calls []int64 // call times of the creating writes, ascending
	revs  []int64 // the highest revision created by a write called at or before calls[i]
	start int64
}

func newCommittedIndex(ops []*op, final kv.State, start int64) *committedIndex {
	type created struct{ call, rev int64 }
	var cs []created
	for _, p := range ops {
		switch {
		case p.guess > 0:
			cs = append(cs, created{p.call, p.guess})
		case p.out.Pinned > 0:
			cs = append(cs, created{p.call, p.out.Pinned})
		case p.out.Response == nil || p.out.AnyRevision:
			// Unknown and unpinned: it may have created any revision the
			// history holds that no other write explains; bound it by the
			// head, from its call.
			cs = append(cs, created{p.call, final.Revision()})
		default:
			if rev, ok := createdRevision(p.out.Response); ok {
				cs = append(cs, created{p.call, rev})
			}
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].call < cs[j].call })
	x := &committedIndex{start: start}
	best := start
	for _, c := range cs {
		best = max(best, c.rev)
		x.calls, x.revs = append(x.calls, c.call), append(x.revs, best)
	}
	return x
}

func (x *committedIndex) by(t int64) int64 {
	i := sort.Search(len(x.calls), func(i int) bool { return x.calls[i] >= t })
	if i == 0 {
		return x.start
	}
	return x.revs[i-1]
}

// mayBeCompacted reports whether a compaction above rev may have taken
// effect by time t.
func mayBeCompacted(rev, t int64, ops []*op, start States) bool {
	if rev <= 0 {
		return false // a read of the current revision is never compacted
	}
	for _, s := range start {
		if s.CompactRevision() > rev {
			return true
		}
	}
	for _, p := range ops {
		c := p.t.Request.Compact
		if c == nil || c.Revision <= rev || p.call >= t {
			continue
		}
		if r := p.out.Response; r == nil || r.Err == nil {
			return true
		}
	}
	return false
}
