package k8s

import (
	"fmt"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

// Status is an API error status.
type Status struct {
	Code    int
	Reason  string
	Message string
}

// The statuses the rules name.
const (
	StatusGone       = 410 // reason Expired: "too old resource version"
	StatusBadRequest = 400
	// StatusInvalid (422, reason Invalid) is how the apiserver's REST layer
	// rejects list and watch options that ValidateListOptions refuses
	// (endpoints/handlers/get.go); the storage layer answers 400.
	StatusInvalid = 422
	StatusTimeout = 504 // "Too large resource version": the server is behind
)

// rejected reports whether s refuses a request as invalid: 400 Bad Request
// or 422 Invalid.
func rejected(s *Status) bool {
	return s != nil && (s.Code == StatusBadRequest || s.Code == StatusInvalid)
}

// ListCall is one list request and what it returned.
type ListCall struct {
	// Prefix is the key prefix listed (a resource, maybe a namespace).
	Prefix  string
	Options ListOptions
	// Before is the highest revision known to be committed before the call
	// was sent, and After the highest committed when it returned: the bounds
	// within which a consistent read must fall.
	Before, After int64
	// CompactRevision is the store's compaction revision when the list was
	// answered: −1 when it was never compacted, 0 when unknown (then the
	// history's latest compaction is used, which is more lenient for a 410
	// and stricter for data).
	CompactRevision int64
	Result          ListResult
	// First is the result of the first page, for a continuation.
	First *ListResult
}

// ListResult is a list response: the list's resourceVersion and items, and
// the continue token, or an error status.
type ListResult struct {
	ResourceVersion int64
	Items           []Object
	Continue        string
	// ContinueAfter is the key the next page starts after (the decoded
	// continue token of the request, for a continuation).
	ContinueAfter string
	Status        *Status
}

// History is the committed history with the model state that answers "what
// was stored at revision R". Build it with [NewHistory].
type History struct {
	State kv.State
	// Compactions are the compaction revisions, in order.
	Compactions []int64
}

// NewHistory replays a committed history into a model state.
func NewHistory(h *kv.History) (History, error) {
	s := kv.Start(h.Base())
	for _, c := range h.Commits() {
		var req kv.Request
		// A commit replays as one transaction of its events.
		var ops []kv.Op
		for _, e := range c.Events {
			if e.Type == kv.Put {
				ops = append(ops, kv.Op{Put: &kv.PutRequest{Key: e.KV.Key, Value: e.KV.Value}})
			} else {
				ops = append(ops, kv.Op{Delete: &kv.DeleteRequest{Key: e.KV.Key}})
			}
		}
		req.Txn = &kv.TxnRequest{Success: ops}
		next, resp := kv.Step(s, req)
		if resp.Err != nil || next.Revision() != c.Revision {
			return History{}, fmt.Errorf("commit at revision %d does not replay as one transaction: %v", c.Revision, resp.Err)
		}
		s = next
	}
	return History{State: s, Compactions: h.Compactions()}, nil
}

// Objects returns the objects under prefix at revision rev, in key order.
func (h History) Objects(prefix string, rev int64) []Object {
	var out []Object
	for _, k := range h.State.Snapshot(prefix, kv.PrefixEnd(prefix), rev) {
		out = append(out, FromKV(k))
	}
	return out
}

// oldest returns the compaction revision in force at the end (the oldest
// revision still available), or 0.
func (h History) oldest() int64 {
	if len(h.Compactions) == 0 {
		return 0
	}
	return h.Compactions[len(h.Compactions)-1]
}

func (h History) head() int64 { return h.State.Revision() }

// CheckList decides docs/SPEC.md §4.1 ListResourceVersion, §4.2
// ListSnapshot and §4.5 Expired for one list.
func CheckList(h History, c ListCall) []spec.Violation {
	var out []spec.Violation
	fail := func(p spec.Property, revs []int64, format string, args ...any) {
		out = append(out, spec.Violation{Property: p, Revisions: revs, Keys: []string{c.Prefix}, Message: fmt.Sprintf(format, args...)})
	}
	sem, rv, err := ListSemantic(c.Options)
	r := c.Result
	if err != nil {
		if !rejected(r.Status) {
			fail(spec.ListResourceVersion, nil, "the list options are invalid (%v) but the server did not reject them (400 or 422)", err)
		}
		return out
	}
	asked := rv
	if sem == Continuation && c.First != nil {
		asked = c.First.ResourceVersion
	}
	oldest := h.oldest()
	if c.CompactRevision != 0 {
		oldest = max(c.CompactRevision, 0)
	}
	compacted := asked > 0 && asked < oldest
	if r.Status != nil {
		// 410 Gone only when the revision the list must read is compacted.
		mayExpire := sem == Exact || sem == Continuation || (sem == NotOlderThan && c.Options.Limit > 0)
		if r.Status.Code == StatusGone && !(mayExpire && compacted) {
			fail(spec.Expired, []int64{asked, oldest}, "410 Gone for a %s list at revision %d, which needs no compacted history (oldest available %d)", sem, asked, oldest)
		}
		return out
	}
	// An Exact or Continuation list below the compaction may still be
	// served: "unavailable" is the server's to judge, and a watch cache
	// that keeps snapshots (the apiserver's cacher, ListFromCacheSnapshot,
	// KEP-4988) still has the revision etcd compacted. It must then serve
	// exactly that revision's state, which the checks below demand
	// (docs/FINDINGS.md cacher-1).
	got := r.ResourceVersion
	switch {
	case got > c.After && c.After > 0:
		fail(spec.ListResourceVersion, []int64{got, c.After}, "list at revision %d, beyond the revision %d committed when it returned", got, c.After)
	case sem == MostRecent && got < c.Before:
		fail(spec.ListResourceVersion, []int64{got, c.Before}, "a consistent list (resourceVersion unset) returned revision %d, older than revision %d committed before it was sent", got, c.Before)
	case sem == NotOlderThan && got < rv:
		fail(spec.ListResourceVersion, []int64{got, rv}, "list at resourceVersion %d (NotOlderThan) returned revision %d", rv, got)
	case sem == Exact && got != rv:
		fail(spec.ListResourceVersion, []int64{got, rv}, "list at resourceVersion %d (Exact) returned revision %d", rv, got)
	case sem == Continuation && c.First != nil && got != c.First.ResourceVersion:
		fail(spec.ListResourceVersion, []int64{got, c.First.ResourceVersion}, "a continuation returned revision %d, not the first page's %d", got, c.First.ResourceVersion)
	}
	// The items: the objects at the list's revision, after the continue key, in key order.
	want := h.Objects(c.Prefix, got)
	after := r.ContinueAfter
	if sem == Continuation {
		after = c.Options.Continue
	}
	i := sort.Search(len(want), func(i int) bool { return want[i].Key > after })
	if after == "" {
		i = 0
	}
	want = want[i:]
	if r.Continue != "" || c.Options.Limit > 0 {
		if len(r.Items) > len(want) {
			fail(spec.ListSnapshot, []int64{got}, "the page holds %d items, but only %d objects follow its start at revision %d", len(r.Items), len(want), got)
			return out
		}
		if r.Continue == "" && len(r.Items) < len(want) {
			fail(spec.ListSnapshot, []int64{got}, "the last page ends after %d of the %d objects at revision %d", len(r.Items), len(want), got)
			return out
		}
		want = want[:len(r.Items)]
	}
	if diff := diffObjects(want, r.Items); diff != "" {
		fail(spec.ListSnapshot, []int64{got}, "the items are not the stored objects at revision %d: %s", got, diff)
	}
	return out
}

// diffObjects describes the first difference between two key-sorted lists.
func diffObjects(want, got []Object) string {
	for i := 0; i < len(want) || i < len(got); i++ {
		switch {
		case i >= len(got):
			return fmt.Sprintf("%q (resourceVersion %d) is missing", want[i].Key, want[i].ResourceVersion)
		case i >= len(want):
			return fmt.Sprintf("%q (resourceVersion %d) is extra", got[i].Key, got[i].ResourceVersion)
		case want[i] != got[i]:
			return fmt.Sprintf("%q: got resourceVersion %d %q, stored resourceVersion %d %q",
				got[i].Key, got[i].ResourceVersion, got[i].Value, want[i].ResourceVersion, want[i].Value)
		}
	}
	return ""
}
