package listwatch_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/conform/informertest"
	"github.com/watchspec/watchspec/impl/informer"
	harness "github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/traces"
)

// saveTraces writes every failed run of out to t's artifact directory
// (go test -artifacts keeps it) and says where.
func saveTraces(t *testing.T, out harness.Outcome, what string) {
	t.Helper()
	dir := t.ArtifactDir()
	for i, run := range out.Rec.Runs() {
		if i >= len(out.Violations) || len(out.Violations[i]) == 0 {
			continue
		}
		name := filepath.Join(dir, fmt.Sprintf("%s-run-%d.ndjson", what, i+1))
		f, err := os.Create(name)
		if err != nil {
			t.Errorf("saving the trace: %v", err)
			continue
		}
		err = traces.Write(f, out.Rec.TraceOf(run, "informertest-http", ""))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Errorf("saving the trace: %v", err)
			continue
		}
		t.Logf("run %d's trace: %s (watchspec check it)", i+1, name)
	}
}

// SPEC §4.1–§4.5, §5 (§5.2 InformerConverges: the cache ends equal to the
// store): the adversary is legal over HTTP too. Client-go's
// SharedIndexInformer v0.37.2, built on its dynamic client from a
// rest.Config pointed at listwatch.NewHandler (in-memory connections, so
// that fake time works), runs the adversarial workload of each seed:
// WatchList on even seeds and list and watch on odd ones, resync on every
// third, lists paged by 2 on seeds 1, 6, 11, …. What the handler's source
// answered is recorded below the HTTP layer, the informer's notifications
// above it, and every run must pass k8s.CheckInformer (every list and
// watch held to §4, the informer to §5). So the REST client, the watch
// stream decoder (with the wire choices: events cut across chunks, and
// joined in one), the status handling of ERROR 410 events and 410
// responses, WatchList's end bookmark through JSON are all under the
// adversary. A failing seed is printed and its trace saved with
// t.ArtifactDir.
func TestLegalOverHTTP(t *testing.T) {
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	n := *seedsFlag
	if testing.Short() {
		n = min(n, 3)
	}
	made := map[string]int64{}
	var watchList, listWatch, resync int
	start := time.Now()
	for seed := *firstFlag; seed < *firstFlag+int64(n); seed++ {
		cfg := harness.AdversaryConfig(seed)
		if cfg.WatchList {
			watchList++
		} else {
			listWatch++
		}
		if cfg.ResyncPeriod > 0 {
			resync++
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			var out harness.Outcome
			var rep listwatch.Report
			synctest.Test(t, func(t *testing.T) {
				// harness.RunUnderAdversary, with the adversary's wire
				// choices: its handler serves the recorded source.
				var adv *listwatch.ListWatch
				subject := informertest.ClientGo{OverHTTP: true, Handler: func(src informer.ListerWatcher) http.Handler { return adv.HandlerFor(src) }}
				out = harness.RunWorkload(t, subject, cfg, harness.AdversaryWorkload(seed), func(h *harness.Harness) informer.ListerWatcher {
					adv = listwatch.New(seed, h.Store(), harness.GVR, "", listwatch.Options{Compact: h.Rec.Compact})
					return adv
				})
				rep = adv.Report()
			})
			for k, c := range rep.Counts {
				made[k] += c
			}
			if msg := harness.Explain(out, rep, seed); msg != "" {
				saveTraces(t, out, fmt.Sprintf("http-seed-%d", seed))
				t.Errorf("seed %d: client-go over HTTP under a legal adversary broke the contract, or the adversary or its HTTP handler was not legal: %s", seed, msg)
			}
		})
	}
	t.Logf("%d seeds (%d..%d; %d WatchList, %d list and watch, %d with resync) in %v; choices made: %v",
		n, *firstFlag, *firstFlag+int64(n)-1, watchList, listWatch, resync, time.Since(start).Round(time.Millisecond), made)
	if n < 8 {
		return
	}
	// What the wire must carry was carried: 410s at once and midway,
	// closed watches, bookmarks, WatchLists caught up before their end
	// bookmark, stale lists at "0".
	for _, k := range []listwatch.Kind{listwatch.ExpireWatch, listwatch.ExpireOpen, listwatch.Close, listwatch.Bookmark,
		listwatch.WatchListCatchUp, listwatch.StaleList, listwatch.WireSplit, listwatch.WireJoin} {
		if made[k.String()] == 0 {
			t.Errorf("over %d seeds over HTTP the adversary never made a choice of kind %s (%s)", n, k, k.Section())
		}
	}
}
