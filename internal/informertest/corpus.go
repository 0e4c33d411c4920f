package informertest

import (
	"time"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// CorpusScenario is the run recorded for the corpus's valid informer traces
// (docs/CORPUS.md): three objects in two namespaces, two handlers, changes
// while watching, a handler added late, a bookmark, then a partition during
// which an object is deleted and the store compacted — the informer's watch
// is answered 410, it relists, and the deletion arrives as a tombstone
// (kubernetes#115620) — and more changes.
func CorpusScenario(h *Harness) {
	h.Put("a", "x")
	h.Put("a", "y")
	h.Put("b", "x")
	h.Start(2)
	h.Settle()
	h.Put("a", "x")
	h.Delete("b", "x")
	h.Settle()
	h.AddHandler()
	h.Settle()
	h.Advance(2 * time.Second) // the watch lives a while: its end is not a failure
	h.StoreLW.RequestBookmarks()
	h.Settle()
	h.Partition(func() {
		h.Delete("a", "y")
		h.Put("b", "y")
		h.Put("a", "x")
	})
	h.Advance(2 * time.Second) // the backoff, then the relist
	h.Put("b", "y")
	h.Settle()
	h.Quiesce()
}

// CorpusTrace checks the harness's single run with k8s.CheckInformer (no
// allowances) and returns its trace; the violations, if any, come back
// instead.
func CorpusTrace(h *Harness, system, version string) (*traces.Trace, []spec.Violation) {
	runs := h.Rec.Runs()
	hist, err := h.Rec.History()
	if err != nil {
		h.t.Fatalf("history: %v", err)
	}
	if len(runs) != 1 {
		h.t.Fatalf("the corpus scenario has %d runs", len(runs))
	}
	if vs := k8s.CheckInformer(hist, *runs[0]); len(vs) > 0 {
		return nil, vs
	}
	return h.Rec.Trace(system, version), nil
}
