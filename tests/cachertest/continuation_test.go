package cachertest

import (
	"context"
	"testing"
	"time"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/traces"
)

// continuationFile is the recorded inconsistent continuation of docs/CORPUS.md.
const continuationFile = "../../traces/corpus/apiserver-cacher-0.37.2-inconsistent-continuation.ndjson.gz"

// SPEC §4.5 Expired, the inconsistent continuation: the real apiserver
// storage (the cacher's CacheDelegator over etcd3, v0.37.2) answers a
// continuation of a compacted list 410 with a continue token
// (etcd3 handleCompactedErrorForPaging) once the watch cache has noticed the
// compaction (its compactor polls etcd every 15 s) and no longer serves the
// page from a snapshot; the token continues from the same key at the latest
// revision. The recording passes §4 (the first version of the checker read
// a list with that token as a continuation at the 410's revision, 0, and
// failed it under §4.1), and holds the shape: 410 with a token, then pages
// from it.
func TestCacherInconsistentContinuation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	must := func(_ int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		must(h.Create(ctx, "ns0", name))
	}
	if err := h.StartCacher(ctx); err != nil {
		t.Fatal(err)
	}
	list := func(o ListOptions) ListResult {
		t.Helper()
		res, err := h.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := list(ListOptions{ResourceVersion: "", Limit: 1})
	if first.Continue == "" {
		t.Fatalf("the first page of 4 objects with limit 1 has no continue token: %+v", first)
	}
	must(h.Update(ctx, "ns0", "b"))
	must(h.Delete(ctx, "ns0", "c"))
	must(h.Create(ctx, "ns0", "e"))
	head, err := h.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Compact(ctx, head); err != nil {
		t.Fatal(err)
	}
	// The watch cache serves a continuation of a compacted revision from
	// its snapshots until its compactor notices the compaction.
	for h.CacherCompactRevision() < head {
		select {
		case <-ctx.Done():
			t.Fatalf("the watch cache never noticed the compaction at %d", head)
		case <-time.After(200 * time.Millisecond):
		}
	}
	expired := list(ListOptions{Continue: first.Continue, Limit: 1})
	if expired.Status == nil || expired.Status.Code != k8s.StatusGone || expired.Inconsistent == "" {
		t.Fatalf("a continuation of compacted history: %+v, want 410 with a continue token", expired)
	}
	pages := 0
	for tok := expired.Inconsistent; tok != ""; pages++ {
		res := list(ListOptions{Continue: tok, Limit: 1})
		if res.Status != nil {
			t.Fatalf("page %d of the inconsistent continuation: %+v", pages+1, res.Status)
		}
		tok = res.Continue
	}
	tr, err := h.Trace(ctx, "k8s.io/apiserver v0.37.2 storage over etcd 3.7.3: the inconsistent continuation")
	if err != nil {
		t.Fatal(err)
	}
	if *recordCorpus {
		if err := traces.WriteFile(continuationFile, tr); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", continuationFile)
	}
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != linearizability.Linearizable || len(res.Violations) > 0 {
		t.Errorf("%s: %v", res.Verdict, res.Violations)
	}
	if n := inconsistentContinuations(tr.K8s); n != pages {
		t.Errorf("the run holds %d inconsistent continuations, want %d", n, pages)
	}
	t.Logf("410 with a token, then %d pages at the latest revision", pages)
}

// inconsistentContinuations counts the lists of run made with the token a
// 410 handed out, and the pages that follow them.
func inconsistentContinuations(run *k8s.Run) int {
	n := 0
	for _, l := range run.Lists {
		if l.First == nil {
			continue
		}
		if l.First.Status != nil && l.First.Status.Continue != "" {
			n++ // with the 410's token
			continue
		}
		for _, m := range run.Lists {
			if m.First != nil && m.First.Status != nil && m.Result.ResourceVersion == l.First.ResourceVersion && m.Result.Status == nil {
				n++ // a page after one
				break
			}
		}
	}
	return n
}
