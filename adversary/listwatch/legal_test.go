package listwatch_test

import (
	"flag"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/conform/informertest"
	harness "github.com/watchspec/watchspec/internal/informertest"
)

var (
	seedsFlag = flag.Int("listwatch.seeds", 20, "how many seeds TestLegalUnderAdversary runs per informer")
	firstFlag = flag.Int64("listwatch.first", 1, "the first seed TestLegalUnderAdversary runs")
)

// subjects are the informers the legality test runs: watchspec's own and
// client-go's (with resync on for some seeds).
var subjects = []struct {
	name    string
	subject harness.Subject
}{
	{"reference", harness.Reference{}},
	{"client-go", informertest.ClientGo{}},
}

// runSeed runs the workload of seed under the adversary of seed and
// fails t if a recorded run breaks a rule.
func runSeed(t *testing.T, subject harness.Subject, seed int64) listwatch.Report {
	var rep listwatch.Report
	synctest.Test(t, func(t *testing.T) {
		var out harness.Outcome
		out, rep = harness.RunUnderAdversary(t, subject, seed)
		if msg := harness.Explain(out, rep, seed); msg != "" {
			t.Errorf("the informer over a legal adversary broke the contract, or the adversary was not legal: %s", msg)
		}
	})
	return rep
}

// SPEC §4.1, §4.3, §4.4, §4.5, §5: every choice of the adversary is legal
// — watchspec's informer and client-go's (resync on for every third seed),
// each run through the same writes, compactions, late handlers and
// restarts over the adversary, pass every check watchspec check runs on an
// informer trace (k8s.CheckInformer: the informer contract, and every list
// and watch held to §4) under every seed; and over all the seeds, the
// adversary made every kind of choice.
func TestLegalUnderAdversary(t *testing.T) {
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	n := *seedsFlag
	if testing.Short() {
		n = min(n, 3)
	}
	total := map[string]int64{}
	for _, s := range subjects {
		t.Run(s.name, func(t *testing.T) {
			made := map[string]int64{}
			start := time.Now()
			for seed := *firstFlag; seed < *firstFlag+int64(n); seed++ {
				rep := runSeed(t, s.subject, seed)
				for k, c := range rep.Counts {
					made[k] += c
					total[k] += c
				}
			}
			t.Logf("%d seeds (%d..%d) in %v; choices made: %v", n, *firstFlag, *firstFlag+int64(n)-1, time.Since(start).Round(time.Millisecond), made)
		})
	}
	if n < 8 {
		return // too few seeds to expect every kind
	}
	for _, k := range listwatch.Kinds() {
		// Neither informer watches at resourceVersion "0" (their first
		// watch follows a list or is a WatchList): TestStaleWatchState
		// makes that choice. The wire kinds are the HTTP handler's:
		// TestLegalOverHTTP makes them.
		if total[k.String()] == 0 && k != listwatch.StaleWatchState && !k.Wire() {
			t.Errorf("over %d seeds the adversary never made a choice of kind %s (%s)", n, k, k.Section())
		}
	}
}
