package k8s

import (
	"fmt"
	"sort"
	"sync"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

// Status is an API error status.
type Status struct {
	Code    int
	Reason  string
	Message string
	// Continue is the continue token a 410 to a continuation hands out (the
	// status's metadata.continue), decoded as the key its page starts
	// after; "" when there is none. Listing with it gives the rest of the
	// list at the latest revision: the inconsistent continuation
	// (docs/SPEC.md §4.5; k8s.io/apiserver storage/etcd3
	// handleCompactedErrorForPaging).
	Continue string
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
	// First is the result of the first page, for a continuation. For the
	// inconsistent continuation (a list with the continue token a 410
	// handed out) it is that 410's result, whose Status carries the token.
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
	// full is State's history; compacted caches the histories of
	// withCompaction (a History is safe for concurrent use).
	full      *kv.History
	compacted *compactedHistories
}

type compactedHistories struct {
	mu sync.Mutex
	by map[int64]*kv.History
}

// commits returns the committed history, without compactions.
func (h History) commits() *kv.History {
	if h.full != nil {
		return h.full
	}
	return h.State.History()
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
	return History{State: s, Compactions: h.Compactions(), full: s.History(), compacted: &compactedHistories{by: map[int64]*kv.History{}}}, nil
}

// withCompaction returns the committed history with the single compaction
// rev (none when rev < 0), for a watch validator: it judges skipped
// history below rev as a silent skip over compacted history (§3.11).
// The state replays every commit without compactions, so that the
// objects at any revision stay known (a cache may serve revisions etcd
// compacted).
func (h History) withCompaction(rev int64) *kv.History {
	full := h.commits()
	if rev <= 0 {
		return full
	}
	if h.compacted != nil {
		h.compacted.mu.Lock()
		defer h.compacted.mu.Unlock()
		if d, ok := h.compacted.by[rev]; ok {
			return d
		}
	}
	d := &kv.History{}
	if err := d.SetBase(full.Base()); err != nil {
		return full
	}
	for _, c := range full.Commits() {
		if err := d.Append(c); err != nil {
			return full // cannot happen: full's commits are in order
		}
	}
	d.Skip(full.Head())
	if err := d.Compact(rev); err != nil {
		return full
	}
	if h.compacted != nil {
		h.compacted.by[rev] = d
	}
	return d
}

// Objects returns the objects under prefix at revision rev, in key order.
func (h History) Objects(prefix string, rev int64) []Object {
	var out []Object
	for _, k := range h.State.Snapshot(prefix, kv.PrefixEnd(prefix), rev) {
		out = append(out, FromKV(k))
	}
	return out
}

// compactionInForce returns the compaction revision in force when a
// request was answered, −1 when there was none. known is what the
// recording says (−1: never compacted, 0: unknown, else the revision);
// when it is unknown, the latest compaction of the history at or below
// after, the highest revision committed when the answer arrived — a
// compaction of a later revision was made after the answer — or, when
// after is unknown too (0), the history's latest.
func (h History) compactionInForce(known, after int64) int64 {
	switch {
	case known > 0:
		return known
	case known < 0:
		return -1
	}
	c := int64(-1)
	for _, r := range h.Compactions {
		if after > 0 && r > after {
			break
		}
		c = r
	}
	return c
}

func (h History) head() int64 { return h.State.Revision() }

// CheckList decides docs/SPEC.md §4.1 ListResourceVersion, §4.2
// ListSnapshot and §4.5 Expired for one list.
//
// A continuation whose First is a 410 is the inconsistent continuation:
// it reads the latest revision (a consistent read, §4.1) from the key the
// 410's token names.
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
	inconsistent := sem == Continuation && c.First != nil && c.First.Status != nil
	asked := rv
	if sem == Continuation && c.First != nil && !inconsistent {
		asked = c.First.ResourceVersion
	}
	oldest := max(h.compactionInForce(c.CompactRevision, c.After), 0)
	compacted := asked > 0 && asked < oldest
	if r.Status != nil {
		// 410 Gone only when the revision the list must read is compacted.
		mayExpire := sem == Exact || (sem == Continuation && !inconsistent) || (sem == NotOlderThan && c.Options.Limit > 0)
		if r.Status.Code == StatusGone && !(mayExpire && compacted) {
			what := fmt.Sprintf("a %s list at revision %d", sem, asked)
			if inconsistent {
				what = "an inconsistent continuation (it reads the latest revision)"
			}
			fail(spec.Expired, []int64{asked, oldest}, "410 Gone for %s, which needs no compacted history (oldest available %d)", what, oldest)
		}
		// The token a 410 hands out continues the list from where the
		// expired page would have started, at the latest revision.
		if tok := r.Status.Continue; tok != "" {
			switch {
			case r.Status.Code != StatusGone || sem != Continuation:
				fail(spec.Expired, nil, "a %d answer to a %s list hands out a continue token: only a 410 to a continuation may (the inconsistent continuation)", r.Status.Code, sem)
			case tok != c.Options.Continue:
				fail(spec.Expired, nil, "the continue token handed out with the 410 continues after %q, not after %q where the expired page would have started", tok, c.Options.Continue)
			}
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
	case inconsistent && got < c.Before:
		fail(spec.ListResourceVersion, []int64{got, c.Before}, "an inconsistent continuation (with the token of a 410) reads the latest revision, but returned revision %d, older than revision %d committed before it was sent", got, c.Before)
	case sem == Continuation && c.First != nil && !inconsistent && got != c.First.ResourceVersion:
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
	rest := want
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
		return out
	}
	if r.Continue != "" {
		continuesAfterPage(rest, r, fail)
	}
	return out
}

// continuesAfterPage checks that a page's continue token starts the next
// page right after the page's last item (for an empty page: after its
// start), so that no stored object is skipped and none is listed twice.
// want are the objects at the page's revision after its start.
func continuesAfterPage(want []Object, r ListResult, fail func(spec.Property, []int64, string, ...any)) {
	var last string
	if len(r.Items) > 0 {
		last = r.Items[len(r.Items)-1].Key
		if r.Continue < last {
			fail(spec.ListSnapshot, []int64{r.ResourceVersion}, "the continue token starts the next page after %q, before the page's last item %q: the next page repeats items", r.Continue, last)
			return
		}
	}
	for _, o := range want {
		if o.Key <= r.Continue && (len(r.Items) == 0 || o.Key > last) {
			fail(spec.ListSnapshot, []int64{r.ResourceVersion}, "the continue token starts the next page after %q, skipping %q, which the page did not list (revision %d)", r.Continue, o.Key, r.ResourceVersion)
			return
		}
	}
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
