package linearizability

import (
	"fmt"
	"slices"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// checkWriteRevisions decides §2.6 WriteRevision from what watches saw: a
// successful put whose unique value a watch delivered must have been
// answered with the revision the watch delivered it at.
//
// One fault has one name. When the history is linearizable (h is its
// committed history), it holds every known put at its answered revision, so
// a watch that delivered the value elsewhere — a PUT event carrying the
// key's value of another revision — broke the watch's §3.3 Reliable, which
// the watch checks report; the put is not blamed. Without a linearization
// (h nil), the answered revision is judged against the watches alone, which
// names the culprit when a store answers a write with the wrong revision
// (kine's, docs/FINDINGS.md kine-1).
func (res *Result) checkWriteRevisions(t *traces.Trace, obs *observations, h *kv.History) {
	if !t.Header.UniqueValues {
		return
	}
	for i := range t.Ops {
		o := &t.Ops[i]
		if o.Response == nil || o.Response.Err != nil {
			continue
		}
		var ps []kv.PutRequest
		switch {
		case o.Request.Put != nil:
			ps = puts(o.Request)
		case o.Request.Txn != nil && o.Response.Txn != nil:
			branch := o.Request.Txn.Failure
			if o.Response.Txn.Succeeded {
				branch = o.Request.Txn.Success
			}
			ps = puts(kv.Request{Txn: &kv.TxnRequest{Success: branch}})
		}
		for _, p := range ps {
			revs := obs.puts[[2]string{p.Key, p.Value}]
			if len(revs) == 0 {
				continue
			}
			res.Checks[spec.WriteRevision]++
			if len(revs) == 1 && revs[0] == o.Response.Revision {
				continue
			}
			if h != nil && slices.Equal(h.FindPut(p.Key, p.Value), []int64{o.Response.Revision}) {
				continue // the history confirms the answer: the watch is wrong
			}
			res.Violations = append(res.Violations, Violation{
				Violation: spec.Violation{Property: spec.WriteRevision, Revisions: append([]int64{o.Response.Revision}, revs...), Keys: []string{p.Key},
					Message: fmt.Sprintf("put of %q answered revision %d, but watches delivered its value at revision(s) %v", p.Key, o.Response.Revision, revs)},
				Where: where(o),
			})
		}
	}
}
