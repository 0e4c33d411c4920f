package linearizability

import (
	"math"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// The bounds stage: what each operation's outcome and real-time interval
// allow.

// prepare turns the trace's operations into checker operations and sets
// aside its serializable reads, which are not linearized (§2.8). Reads whose
// outcome is unknown are dropped (they changed nothing and showed nothing).
// A write of unknown outcome whose unique value a watch delivered is pinned
// to that revision, others are constrained by what the watches saw
// ([resolveUnknown]), and the return of a pinned write is bounded by the
// first operation known to have seen its revision (it took effect before).
func prepare(t *traces.Trace, obs *observations, a allow) (ops, serializable []*op) {
	for i := range t.Ops {
		o := &t.Ops[i]
		p := &op{t: o, call: o.Call, ret: o.Return}
		switch {
		case o.Serializable:
			if o.Response != nil {
				p.out.Response = a.normalize(o.Response)
				serializable = append(serializable, p)
			}
			continue
		case o.Response != nil:
			p.out.Response = a.normalize(o.Response)
			// The server's lease revocation carries no revision (0):
			// any is accepted (serverLeaseOps).
			p.out.AnyRevision = o.Request.LeaseRevoke != nil && o.Response.Revision == 0
		case isRead(o.Request):
			continue
		case o.Request.LeaseRevoke != nil:
			// The server's deletion of a lease's keys, of unknown outcome:
			// its return is the bound serverLeaseOps gave it.
		default:
			p.ret = math.MaxInt64
			if t.Header.UniqueValues {
				for _, put := range puts(o.Request) {
					if revs := obs.puts[[2]string{put.Key, put.Value}]; len(revs) == 1 {
						p.out.Pinned = revs[0]
						break
					}
				}
			}
		}
		ops = append(ops, p)
	}
	resolveUnknown(ops, obs)
	boundPinnedReturns(ops)
	return ops, serializable
}

// boundPinnedReturns bounds the return of pinned writes: revision r existed
// once an operation that observed a revision ≥ r returned.
func boundPinnedReturns(ops []*op) {
	byRev := make([]*op, 0, len(ops))
	for _, p := range ops {
		if p.out.Response != nil && p.out.Response.Err == nil && !p.out.AnyRevision {
			byRev = append(byRev, p)
		}
	}
	sort.Slice(byRev, func(i, j int) bool { return byRev[i].out.Response.Revision < byRev[j].out.Response.Revision })
	suffixMin := make([]int64, len(byRev)+1)
	suffixMin[len(byRev)] = math.MaxInt64
	for i := len(byRev) - 1; i >= 0; i-- {
		suffixMin[i] = min(suffixMin[i+1], byRev[i].ret)
	}
	for _, p := range ops {
		if p.out.Pinned == 0 {
			continue
		}
		i := sort.Search(len(byRev), func(i int) bool { return byRev[i].out.Response.Revision >= p.out.Pinned })
		if bound := suffixMin[i]; bound != math.MaxInt64 {
			p.ret = max(bound, p.call)
		}
	}
}

// puts lists the puts a request makes (a transaction's in both branches).
func puts(r kv.Request) []kv.PutRequest {
	ps, _ := writesOf(r)
	return ps
}

func isRead(r kv.Request) bool {
	if r.Range != nil {
		return true
	}
	if r.Txn == nil {
		return false
	}
	for _, o := range append(append([]kv.Op(nil), r.Txn.Success...), r.Txn.Failure...) {
		if o.Range == nil {
			return false
		}
	}
	return true
}

// startState returns the state the store was in when recording began: at
// the header's base revision, compacted as its base_compact_revision says
// (docs/SPEC.md §2.4). When that was not recorded, the compaction in force
// is taken as high as the trace allows — the lowest revision a read below
// the base succeeded at, or below the lowest compaction at or below the
// base that succeeded —, which lets every read and compaction below the
// base fail on it and no success contradict it: exactly as lenient as
// "unknown" requires, since a higher compaction only turns successes into
// failures.
func startState(t *traces.Trace, ops []*op) (States, error) {
	base := max(t.Header.BaseRevision, 1)
	if c := t.Header.BaseCompactRevision; c != nil {
		return States{kv.StartCompacted(base, *c)}, nil
	}
	return States{kv.StartCompacted(base, baseCompactionBound(base, ops))}, nil
}

// baseCompactionBound returns the highest compaction that may have been in
// force when recording began, for a trace that did not record it: −1 for a
// fresh store.
func baseCompactionBound(base int64, ops []*op) int64 {
	if base <= 1 {
		return -1
	}
	c := base
	for _, p := range ops {
		r := p.out.Response
		if r == nil || r.Err != nil {
			continue
		}
		req := p.t.Request
		switch {
		case req.Range != nil && req.Range.Revision > 0:
			c = min(c, req.Range.Revision)
		case req.Compact != nil:
			c = min(c, req.Compact.Revision-1)
		case req.Txn != nil && r.Txn != nil:
			branch := req.Txn.Failure
			if r.Txn.Succeeded {
				branch = req.Txn.Success
			}
			for _, o := range branch {
				if o.Range != nil && o.Range.Revision > 0 {
					c = min(c, o.Range.Revision)
				}
			}
		}
	}
	return c
}
