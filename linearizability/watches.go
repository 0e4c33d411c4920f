package linearizability

import (
	"fmt"
	"math"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// watchOptions is what the profile and the options say about the watches.
type watchOptions struct {
	expect       watch.Expectations
	singleServer bool
}

// validateWatches checks every watch stream against the committed history
// of final. Compactions are made known to the validators at their call time
// (the most lenient choice, see docs/SPEC.md §3), the one in force when the
// recording began from the start, and responses are fed in the order they
// were received. Under IgnoresCompaction no client's compaction is made
// known (none took effect); under UntrackedVersions the validators see every Version as
// 0, in the history and in the responses.
func (res *Result) validateWatches(t *traces.Trace, final kv.State, start States, ops []*op, a allow, wo watchOptions) {
	h := res.watchHistory(t, final, start, a)
	type item struct {
		time    int64
		compact int64
		w       int
		r       int
	}
	var timeline []item
	if !a.ignoreCompaction {
		for _, c := range appliedCompactions(t, final) {
			timeline = append(timeline, item{time: c.call, compact: c.rev, w: -1})
		}
	}
	configs := watchConfigs(t, ops, wo)
	validators := make([]*watch.Validator, len(t.Watches))
	for i, w := range t.Watches {
		validators[i] = watch.NewValidatorWith(h, w.Request, configs[i])
		for j, r := range w.Responses {
			timeline = append(timeline, item{time: r.Time, w: i, r: j})
		}
	}
	sort.SliceStable(timeline, func(i, j int) bool {
		if timeline[i].time != timeline[j].time {
			return timeline[i].time < timeline[j].time
		}
		return timeline[i].w < 0 && timeline[j].w >= 0 // compactions first
	})
	for _, it := range timeline {
		if it.w < 0 {
			if it.compact > h.CompactRevision() {
				if err := h.Compact(it.compact); err != nil {
					panic(fmt.Sprintf("linearizability: a compaction above the last one was refused: %v", err))
				}
			}
			continue
		}
		w := t.Watches[it.w]
		r := w.Responses[it.r]
		resp := r.Response
		if a.untrackedVersions && len(resp.Events) > 0 {
			evs := make([]kv.Event, len(resp.Events))
			for i, e := range resp.Events {
				evs[i] = zeroEvent(e)
			}
			resp.Events = evs
		}
		for _, v := range validators[it.w].Observe(resp) {
			res.Violations = append(res.Violations, Violation{Violation: v,
				Where: fmt.Sprintf("watch %d of client %d (line %d), response at line %d", w.ID, w.Client, w.Line, r.Line)})
		}
	}
	for _, v := range validators {
		for p, n := range v.Checks() {
			res.Checks[p] += n
		}
	}
}

// watchHistory returns the history the validators grow: final's commits
// (Versions zeroed under UntrackedVersions), from the start's base revision
// and with the compaction in force then — exactly, or at most as high as
// the start state's when the trace did not record it.
func (res *Result) watchHistory(t *traces.Trace, final kv.State, start States, a allow) *kv.History {
	full := res.History
	h := &kv.History{}
	mustNot := func(err error) {
		if err != nil {
			panic(fmt.Sprintf("linearizability: building the watch history: %v", err))
		}
	}
	mustNot(h.SetBase(full.Base()))
	// The compaction in force at the start is the store's own, whatever the
	// profile says of the clients' compactions.
	c := start[0].CompactRevision()
	for _, s := range start[1:] {
		c = max(c, s.CompactRevision())
	}
	mustNot(h.SetBaseCompaction(c, t.Header.BaseCompactRevision != nil))
	for _, c := range full.Commits() {
		if a.untrackedVersions {
			z := kv.Commit{Revision: c.Revision, Events: make([]kv.Event, len(c.Events))}
			for i, e := range c.Events {
				z.Events[i] = zeroEvent(e)
			}
			c = z
		}
		mustNot(h.Append(c))
	}
	h.Skip(final.Revision())
	return h
}

// compaction is a compaction that took effect, known from its call on.
type compaction struct{ call, rev int64 }

// appliedCompactions returns the compactions that took effect: those that
// succeeded, and those of unknown outcome that the evidence says did —
// the final state is compacted at least that far, a watch was cancelled for
// exactly that revision, or a watch that asked for PrevKV received, after
// the compaction's call, an event without it whose previous state only that
// compaction removed (and no read below it succeeded after that event was
// received, which it would have forbidden).
func appliedCompactions(t *traces.Trace, final kv.State) []compaction {
	cancelledAt := map[int64]bool{}
	for _, w := range t.Watches {
		for _, r := range w.Responses {
			if r.Response.Canceled && r.Response.CompactRevision > 0 {
				cancelledAt[r.Response.CompactRevision] = true
			}
		}
	}
	var out []compaction
	for i := range t.Ops {
		o := &t.Ops[i]
		if o.Request.Compact == nil {
			continue
		}
		rev := o.Request.Compact.Revision
		switch {
		case o.Response != nil && o.Response.Err == nil:
		case o.Response != nil:
			continue
		case rev <= final.CompactRevision(), cancelledAt[rev], missingPrevKVShows(t, final, rev, o.Call):
		default:
			continue
		}
		out = append(out, compaction{call: o.Call, rev: rev})
	}
	return out
}

// missingPrevKVShows reports whether a compaction at rev, called at call,
// is the only explanation of an event delivered without the PrevKV its
// watch asked for: received after call, the key existed at its revision
// minus one, which is below rev — and no read below rev succeeded after
// the event arrived.
func missingPrevKVShows(t *traces.Trace, final kv.State, rev, call int64) bool {
	shown := int64(math.MaxInt64)
	for _, w := range t.Watches {
		if !w.Request.PrevKV {
			continue
		}
		for _, r := range w.Responses {
			if r.Time < call {
				continue
			}
			for _, e := range r.Response.Events {
				at := e.KV.ModRevision
				if e.PrevKV != nil || at-1 >= rev {
					continue
				}
				if _, existed := final.Get(e.KV.Key, at-1); existed {
					shown = min(shown, r.Time)
				}
			}
		}
	}
	if shown == math.MaxInt64 {
		return false
	}
	for _, o := range t.Ops {
		if r := o.Response; r != nil && r.Err == nil && o.Call > shown && readsBelow(o.Request, rev) {
			return false
		}
	}
	return true
}

// readsBelow reports whether a request reads some revision below rev.
func readsBelow(r kv.Request, rev int64) bool {
	if r.Range != nil {
		return r.Range.Revision > 0 && r.Range.Revision < rev
	}
	if r.Txn != nil {
		for _, o := range append(append([]kv.Op(nil), r.Txn.Success...), r.Txn.Failure...) {
			if o.Range != nil && o.Range.Revision > 0 && o.Range.Revision < rev {
				return true
			}
		}
	}
	return false
}

// watchConfigs returns what each watch's validator is told: the profile's
// expectations, which progress notifications bind it (docs/SPEC.md §3.6),
// and — for a trace recorded against one server — the revision its server
// had certainly applied before it was requested (§1).
func watchConfigs(t *traces.Trace, ops []*op, wo watchOptions) []watch.Config {
	out := make([]watch.Config, len(t.Watches))
	var committed *answeredIndex
	if wo.singleServer {
		committed = newAnsweredIndex(ops)
	}
	for i, w := range t.Watches {
		out[i] = watch.Config{Expect: wo.expect, Progress: ProgressBinding(t, w)}
		if committed != nil {
			out[i].CommittedBefore = committed.before(w.Time)
		}
	}
	return out
}

// answeredIndex answers the highest revision any client was answered
// before a time.
type answeredIndex struct {
	returns []int64
	revs    []int64 // highest revision answered at or before returns[i]
}

func newAnsweredIndex(ops []*op) *answeredIndex {
	var ps []*op
	for _, p := range ops {
		if r := p.out.Response; r != nil && r.Err == nil && r.Revision > 0 {
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].ret < ps[j].ret })
	x := &answeredIndex{}
	best := int64(0)
	for _, p := range ps {
		best = max(best, p.out.Response.Revision)
		x.returns, x.revs = append(x.returns, p.ret), append(x.revs, best)
	}
	return x
}

func (x *answeredIndex) before(t int64) int64 {
	i := sort.Search(len(x.returns), func(i int) bool { return x.returns[i] >= t })
	if i == 0 {
		return 0
	}
	return x.revs[i-1]
}

// ProgressBinding decides which progress notifications bind watch w of
// trace t (docs/SPEC.md §3.6) from what the trace says about streams — the
// decision [Check] gives each watch's validator ([watch.Config].Progress).
// A watch that may share its gRPC stream with another watch alive at the
// same time, on a stream the client may have asked for progress, binds
// none ([watch.BindNone]): clientv3 registers every watch of a stream again
// after the stream breaks, which no trace records, and an answer computed
// in between may reach it. A watch alone on its stream binds those after
// its registration ([watch.BindAfterRegistration]: an answer computed while
// a watch the client had already closed was still registered may reach it
// first). A watch whose stream was never asked binds every one
// ([watch.BindAll]): etcd's periodic notifications are per watch. A format
// 1 trace, which cannot record progress requests, is read as asked.
//
// Use it with [watch.ProgressBinding.Binds] to tell whether one
// notification of w is a claim about w.
func ProgressBinding(t *traces.Trace, w *traces.Watch) watch.ProgressBinding {
	sameStream := func(client int, stream *int) bool {
		return client == w.Client && (w.Stream == nil || stream == nil || *stream == *w.Stream)
	}
	end := watchEnd(w)
	requested := t.Header.Version == 1 // version 1 could not record progress requests
	for _, q := range t.ProgressRequests {
		s := q.Stream
		if sameStream(q.Client, &s) && q.Time <= end {
			requested = true
			break
		}
	}
	if !requested {
		return watch.BindAll
	}
	for _, o := range t.Watches {
		if o != w && sameStream(o.Client, o.Stream) && o.Time <= end && w.Time <= watchEnd(o) {
			return watch.BindNone
		}
	}
	return watch.BindAfterRegistration
}

// watchEnd returns the time of the response that ended w, or MaxInt64 when
// the trace shows no end (it may have lived on).
func watchEnd(w *traces.Watch) int64 {
	if n := len(w.Responses); n > 0 {
		last := w.Responses[n-1]
		if r := last.Response; r.Canceled || r.CompactRevision != 0 || last.Error != "" {
			return last.Time
		}
	}
	return math.MaxInt64
}
