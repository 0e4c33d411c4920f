package kv

import (
	"fmt"

	"github.com/watchspec/watchspec/model/spec"
)

// CheckSerializable decides docs/SPEC.md §2.8 SerializableRead for one
// serializable range (etcd's WithSerializable: served by whichever member
// the client reached, without a quorum). Such a read is not linearized: it
// may be stale. Its response must be the store's state at its header
// revision R — the keys of req at req.Revision when that is set, else at R
// — and R must not exceed committed, the highest revision that could have
// been committed when the read returned.
//
// s is a state whose history holds R (the final state of a linearization;
// compaction is ignored, a member's own compaction is not known). Errors
// are not judged here: a lagging member may answer ErrFutureRev for any
// revision, and ErrCompacted depends on the compactions the caller knows.
func CheckSerializable(s State, req RangeRequest, resp Response, committed int64) []spec.Violation {
	if resp.Err != nil {
		return nil
	}
	fail := func(revs []int64, format string, args ...any) []spec.Violation {
		return []spec.Violation{{Property: spec.SerializableRead, Revisions: revs, Keys: []string{req.Key}, Message: fmt.Sprintf(format, args...)}}
	}
	r := resp.Revision
	switch {
	case resp.Range == nil:
		return fail([]int64{r}, "serializable range of %q answered without a range result", req.Key)
	case r > committed:
		return fail([]int64{r, committed}, "serializable range of %q answered header revision %d, but at most revision %d was committed when it returned", req.Key, r, committed)
	case r < 1:
		return fail([]int64{r}, "serializable range of %q answered header revision %d, below any store's", req.Key, r)
	case req.Revision > r:
		return fail([]int64{req.Revision, r}, "serializable range of %q at revision %d succeeded on a member at revision %d, which answers ErrFutureRev", req.Key, req.Revision, r)
	}
	at := r
	if req.Revision > 0 {
		at = req.Revision
	}
	var want RangeResponse
	if req.Key == "" {
		return fail([]int64{r}, "serializable range with an empty key succeeded (ErrEmptyKey)")
	}
	want = rangeAt(s.root, req, at)
	if !sameRange(&want, resp.Range) {
		return fail([]int64{at, r}, "serializable range of %q answered %s at header revision %d, but the store held %s at revision %d",
			req.Key, describeRangeResponse(*resp.Range), r, describeRangeResponse(want), at)
	}
	return nil
}

func describeRangeResponse(r RangeResponse) string {
	s := "["
	for i, k := range r.KVs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%q=%q@%d", k.Key, k.Value, k.ModRevision)
	}
	s += "]"
	if r.Count != int64(len(r.KVs)) {
		s += fmt.Sprintf(" count=%d", r.Count)
	}
	if r.More {
		s += " more"
	}
	return s
}
