package informer_test

import (
	"flag"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/model/spec"
)

var adversarySearch = flag.Int("listwatch.search", 0, "TestFindAdversarySeeds: search seeds 1..N for those that catch each buggy informer")

// buggyInformers are informers with a bug that a quiet API server never
// shows, and the adversary's seed that catches each (found by
// TestFindAdversarySeeds).
var buggyInformers = []struct {
	name   string
	mutant informer.Mutant
	cfg    informertest.Config
	seed   int64         // the first seed of 1..30 that catches it
	want   spec.Property // the rule the catching run names
}{
	// SPEC §4.5 Expired, §5.2 InformerConverges: a watch answered 410 is
	// opened again at the same resourceVersion instead of relisting; the
	// adversary's window no longer holds it, so every such watch is
	// answered 410 and the informer never catches up.
	{"no relist on 410", informer.MutantSkipRelistOn410, informertest.Config{}, 1, spec.InformerConverges},
	// SPEC §4.1 (a list at "0" may be served from any snapshot), §5.1
	// InformerSubsequence; kubernetes#67998: every relist asks for "0",
	// the adversary serves it from a snapshot older than what the
	// informer has seen, and its handlers go back in time.
	{"relists at \"0\"", informer.MutantRelistAtZero, informertest.Config{}, 2, spec.InformerSubsequence},
	// SPEC §4.4 InitialEventsEnd, §5.1: a WatchList's changes before its
	// end bookmark are ignored; the adversary's WatchList opens with an
	// older state and catches it up before the bookmark, and the informer
	// keeps the older state of an object (its next update names an old
	// object the handler was never told of, or the cache never converges).
	{"WatchList ignoring changes before its end bookmark", informer.MutantWatchListIgnoresCatchUp, informertest.Config{WatchList: true}, 1, spec.InformerSubsequence},
}

// runBuggy runs the workload of seed with informer m, over the adversary
// of seed (adv) or over the store's own list/watch, and returns the rules
// broken and the adversary's report.
func runBuggy(t *testing.T, m informer.Mutant, cfg informertest.Config, seed int64, adv bool) ([]spec.Property, listwatch.Report) {
	var props []spec.Property
	var rep listwatch.Report
	synctest.Test(t, func(t *testing.T) {
		var a *listwatch.ListWatch
		var source func(h *informertest.Harness) informer.ListerWatcher
		if adv {
			source = func(h *informertest.Harness) informer.ListerWatcher {
				a = listwatch.New(seed, h.Store(), informertest.GVR, "", listwatch.Options{})
				return a
			}
		}
		out := informertest.RunWorkload(t, mutantSubject(m), cfg, informertest.Workload{Seed: seed}, source)
		props = out.Properties()
		if a != nil {
			rep = a.Report()
		}
	})
	return props, rep
}

// SPEC §4, §5: each buggy informer passes the workload of its seed over
// the store's own list/watch — a quiet server never shows its bug — and
// is caught by the adversary with that seed, which names the rule broken;
// the correct informer passes the same workload under the same adversary.
func TestBuggyInformersAreCaught(t *testing.T) {
	for _, b := range buggyInformers {
		t.Run(b.name, func(t *testing.T) {
			if props, _ := runBuggy(t, b.mutant, b.cfg, b.seed, false); len(props) > 0 {
				t.Fatalf("over the store's own list/watch (seed %d) the run broke %v; want it to pass (the bug hides behind a quiet server)", b.seed, props)
			}
			props, rep := runBuggy(t, b.mutant, b.cfg, b.seed, true)
			if !slices.Contains(props, b.want) {
				t.Fatalf("the adversary with seed %d named %v; want %s\n%s", b.seed, props, b.want, rep)
			}
			t.Logf("caught by seed %d: %v\n%s", b.seed, props, rep)
			if props, rep := runBuggy(t, informer.MutantNone, b.cfg, b.seed, true); len(props) > 0 {
				t.Fatalf("the correct informer under the adversary with seed %d broke %v: a legal adversary must not raise a false alarm\n%s", b.seed, props, rep)
			}
		})
	}
}

// TestFindAdversarySeeds searches seeds 1..N (-listwatch.search=N) for
// those that catch each buggy informer, and checks that the store's own
// list/watch never does: how buggyInformers' seeds were found.
func TestFindAdversarySeeds(t *testing.T) {
	if *adversarySearch == 0 {
		t.Skip("-listwatch.search=N searches seeds 1..N")
	}
	for _, b := range buggyInformers {
		var caught, plain []int64
		found := map[spec.Property]int{}
		for seed := int64(1); seed <= int64(*adversarySearch); seed++ {
			if props, _ := runBuggy(t, b.mutant, b.cfg, seed, false); len(props) > 0 {
				plain = append(plain, seed)
			}
			props, _ := runBuggy(t, b.mutant, b.cfg, seed, true)
			if len(props) > 0 {
				caught = append(caught, seed)
			}
			for _, p := range props {
				found[p]++
			}
		}
		t.Logf("%s: caught by %d of %d seeds %v; rules named %v; over the store's own list/watch caught by %d %v", b.name, len(caught), *adversarySearch, caught, found, len(plain), plain)
	}
}
