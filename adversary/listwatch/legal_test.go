package listwatch_test

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/conform/informertest"
	"github.com/watchspec/watchspec/impl/informer"
	harness "github.com/watchspec/watchspec/internal/informertest"
)

var (
	seedsFlag = flag.Int("listwatch.seeds", 12, "how many seeds TestLegalUnderAdversary runs per informer")
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

// configFor draws the informer's configuration from the seed: WatchList or
// list-and-watch, resync, page size.
func configFor(seed int64) harness.Config {
	cfg := harness.Config{WatchList: seed%2 == 0}
	if seed%3 == 0 {
		cfg.ResyncPeriod = 10 * time.Second
	}
	if seed%5 == 1 {
		cfg.PageSize = 2
	}
	return cfg
}

// adversarial is the source RunWorkload reads through: the adversary over
// the harness's store, compacting through its recorder.
func adversarial(seed int64, adv **listwatch.ListWatch) func(h *harness.Harness) informer.ListerWatcher {
	return func(h *harness.Harness) informer.ListerWatcher {
		*adv = listwatch.New(seed, h.Store(), harness.GVR, "", listwatch.Options{Compact: h.Rec.Compact})
		return *adv
	}
}

// runSeed runs the workload of seed under the adversary of seed and
// fails t if a recorded run breaks a rule.
func runSeed(t *testing.T, subject harness.Subject, seed int64) listwatch.Report {
	var adv *listwatch.ListWatch
	var rep listwatch.Report
	synctest.Test(t, func(t *testing.T) {
		cfg := configFor(seed)
		out := harness.RunWorkload(t, subject, cfg, harness.Workload{Seed: seed, Compact: true, CompactAtEnd: true, LateHandlers: true, Restart: true},
			adversarial(seed, &adv))
		rep = adv.Report()
		for i, vs := range out.Violations {
			if len(vs) == 0 {
				continue
			}
			var b strings.Builder
			for _, v := range vs {
				fmt.Fprintf(&b, "  %s\n", v)
			}
			t.Errorf("seed %d (config %+v), run %d of %d: the informer over a legal adversary broke the contract, or the adversary was not legal:\n%s%s\n%s",
				seed, cfg, i+1, len(out.Violations), b.String(), out.Rec.Dump(out.Rec.Runs()[i], fmt.Sprintf("listwatch-seed-%d", seed)), rep)
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
		// makes that choice.
		if total[k.String()] == 0 && k != listwatch.StaleWatchState {
			t.Errorf("over %d seeds the adversary never made a choice of kind %s (%s)", n, k, k.Section())
		}
	}
}
