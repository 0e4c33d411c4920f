package informer_test

import (
	"flag"
	"testing"
	"testing/synctest"

	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/traces"
)

var recordCorpus = flag.Bool("record-corpus", false, "write the recorded informer trace to traces/corpus (review the diff)")

// TestCorpusRun records the corpus scenario (internal/informertest) with
// the reference informer, listing and watching (the client-go trace uses a
// WatchList), and demands that it passes the
// informer contract with no allowance (SPEC §5). With -record-corpus it
// writes traces/corpus/informer-watchspec-reference.ndjson, which TestCorpus
// (package traces) checks again through `watchspec check`'s code path.
func TestCorpusRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := informertest.NewHarness(t, informertest.Reference{}, informertest.Config{}, watchhub.Options{ProgressInterval: -1})
		defer h.Close()
		informertest.CorpusScenario(h)
		tr, vs := informertest.CorpusTrace(h, "watchspec-reference informer (impl/informer)", "")
		if len(vs) > 0 {
			t.Fatalf("the recorded run breaks the informer contract: %v\n%s", vs, h.Rec.Dump(h.Rec.Runs()[0], "corpus"))
		}
		if *recordCorpus {
			if err := traces.WriteFile("../../traces/corpus/informer-watchspec-reference.ndjson", tr); err != nil {
				t.Fatal(err)
			}
		}
	})
}
