package listwatch_test

import (
	"compress/gzip"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
	harness "github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

var recordCorpus = flag.Bool("record-corpus", false, "TestPagedRelistAfterExpiredWatchLoops: write client-go's run to traces/corpus")

// loopSeed is the adversary's seed (and the workload's, 6 writes) that
// shows the loop of kubernetes#133810 in both informers: of seeds 1..200,
// 21 and 163 show it (with 10 writes: 21, 43 and 163).
const loopSeed = 21

// stuckRelists counts the lists of run made with a limit at one same
// resourceVersion N after a watch from N was answered 410: the loop.
func stuckRelists(run *k8s.Run) int {
	expired := map[string]bool{}
	n := 0
	for _, e := range run.Entries {
		switch {
		case e.WatchEvent != nil && e.WatchEvent.Event.Type == k8s.Error:
			expired[run.Watches[e.WatchEvent.Watch].Options.ResourceVersion] = true
		case e.List != nil:
			o := run.Lists[*e.List].Options
			if o.Limit > 0 && o.Continue == "" && expired[o.ResourceVersion] {
				n++
			}
		}
	}
	return n
}

// FINDINGS.md informer-1, kubernetes#133810 (open): after a watch answered
// 410, client-go's Reflector relists at its last synced resourceVersion N
// ("at least as fresh", reflector.go) — but paged, which makes the list
// Exact (SPEC §4, the semantics table): the server answers exactly N,
// which it still has, and the next watch from N is answered 410 again.
// Client-go pages its relists when its first list at "0" came back in
// pages (paginatedResult; here the adversary's short page) or with
// WatchListPageSize set. Each SPEC-legal step repeats forever: the
// informer never gets past N (§5.2 InformerConverges). watchspec's
// informer, which mirrors client-go, does the same. A compaction past N —
// the API server compacts etcd every 5 minutes — ends it: the Exact list
// is answered 410 and the Reflector relists consistently.
func TestPagedRelistAfterExpiredWatchLoops(t *testing.T) {
	klog.SetLogger(logr.Discard())
	for _, s := range subjects {
		t.Run(s.name, func(t *testing.T) {
			var out harness.Outcome
			var rep listwatch.Report
			synctest.Test(t, func(t *testing.T) {
				var adv *listwatch.ListWatch
				out = harness.RunWorkload(t, s.subject, harness.Config{}, harness.Workload{Seed: loopSeed, Writes: 6}, noCompaction(loopSeed, &adv))
				rep = adv.Report()
			})
			if got := out.Properties(); !slices.Equal(got, []spec.Property{spec.InformerConverges}) {
				t.Fatalf("seed %d: the run broke %v; want exactly InformerConverges (the relist loop)\n%s", loopSeed, got, rep)
			}
			run := out.Rec.Runs()[0]
			if n := stuckRelists(run); n < 10 {
				t.Fatalf("seed %d: %d paged relists at a resourceVersion whose watch was answered 410; want the loop (≥ 10)\n%s", loopSeed, n, rep)
			}
			t.Logf("seed %d: %d paged relists at the expired resourceVersion, %v\n%s", loopSeed, stuckRelists(run), out.Properties(), rep)
			if *recordCorpus && s.name == "client-go" {
				tr := out.Rec.TraceOf(run, "client-go", "0.37.2 over the informer adversary, seed 21")
				path := filepath.Join("..", "..", "traces", "corpus", "kubernetes-133810-paged-relist-after-410-loops.ndjson.gz")
				f, err := os.Create(path)
				if err != nil {
					t.Fatal(err)
				}
				zw := gzip.NewWriter(f)
				if err := traces.Write(zw, tr); err != nil {
					t.Fatal(err)
				}
				if err := zw.Close(); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s", path)
			}
			// The same run with a compaction once the writes are done.
			synctest.Test(t, func(t *testing.T) {
				var adv *listwatch.ListWatch
				out = harness.RunWorkload(t, s.subject, harness.Config{}, harness.Workload{Seed: loopSeed, Writes: 6, CompactAtEnd: true}, noCompaction(loopSeed, &adv))
				rep = adv.Report()
			})
			if got := out.Properties(); len(got) > 0 {
				t.Fatalf("seed %d with a compaction at the end: the run broke %v; want it to converge\n%s", loopSeed, got, rep)
			}
		})
	}
}

// noCompaction is the adversary of seed without Options.Compact: nothing
// compacts the store unless the workload does.
func noCompaction(seed int64, adv **listwatch.ListWatch) func(h *harness.Harness) informer.ListerWatcher {
	return func(h *harness.Harness) informer.ListerWatcher {
		*adv = listwatch.New(seed, h.Store(), harness.GVR, "", listwatch.Options{})
		return *adv
	}
}
