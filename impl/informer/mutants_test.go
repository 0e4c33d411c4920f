package informer_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/model/spec"
)

// mutantSubject is impl/informer with mutant m switched on (export_test.go).
func mutantSubject(m informer.Mutant) informertest.Subject {
	return informertest.Reference{Setup: func(s *informer.SharedInformer, processing *informertest.Gate) {
		informer.SetTestHooks(s, m, func() { processing.Wait(nil) })
	}}
}

// TestMutantsAreRejected: each deliberately broken informer, driven through
// the scenario that exposes its bug, is rejected by k8s.CheckInformer
// naming exactly the rule it breaks; the correct informer passes the same
// scenario. SPEC §5.
func TestMutantsAreRejected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutant informer.Mutant
		cfg    informertest.Config
		// scenario drives the harness; the harness then quiesces.
		scenario func(h *informertest.Harness)
		want     []spec.Property
	}{
		{
			// SPEC §5.3 RelistDeletes; regression for kubernetes#115620: an
			// object deleted while the informer was partitioned; the relist
			// does not list it, and the mutant queues no tombstone.
			name: "no tombstones on relist", mutant: informer.MutantNoTombstones,
			scenario: func(h *informertest.Harness) {
				h.Put("a", "x")
				h.Put("a", "y")
				h.Start(1)
				h.Advance(2 * time.Second) // a watch that ends within a second is a failure: relist
				h.Partition(func() {
					h.Delete("a", "x")
					h.Put("a", "y") // compacting this revision leaves the watch's start behind
				})
				h.Advance(2 * time.Second) // the backoff, then the relist
			},
			want: []spec.Property{spec.RelistDeletes},
		},
		{
			// SPEC §5.6 SyncedRVMonotonic; regression for kubernetes#136583:
			// a WatchList breaks after its first synthetic ADDED, whose
			// resourceVersion the mutant has already adopted.
			name: "resourceVersion from a synthetic ADDED", mutant: informer.MutantRVFromSyntheticAdded,
			cfg: informertest.Config{WatchList: true},
			scenario: func(h *informertest.Harness) {
				h.Put("b", "x") // revision 2
				h.Put("a", "x") // revision 3: first in key order, resourceVersion 3
				h.Put("c", "x") // revision 4: the WatchList's state
				h.LW.Stall.Close()
				h.Start(1)
				h.Settle()
				h.LW.Pass(1) // the ADDED of a/x, and no more
				h.Settle()
				h.LW.Drop()
				h.LW.Stall.Open()
				h.Settle()
			},
			want: []spec.Property{spec.SyncedRVMonotonic},
		},
		{
			// SPEC §5.1 InformerSubsequence: two updates of one object queue
			// while processing is paused; the mutant hands them over newest
			// first, so the handler goes back in time (a later update puts
			// the cache right again, so the rule broken is exactly §5.1).
			name: "deltas reordered per key", mutant: informer.MutantReorderDeltas,
			scenario: func(h *informertest.Harness) {
				h.Put("a", "x")
				h.Start(1)
				h.Settle()
				h.Processing.Close()
				h.Put("a", "x")
				h.Put("a", "x")
				h.Settle()
				h.Processing.Open()
				h.Settle()
				h.Put("a", "x")
				h.Settle()
			},
			want: []spec.Property{spec.InformerSubsequence},
		},
		{
			// SPEC §5.2 InformerConverges: the watch is answered 410 after a
			// partition; the mutant watches again from the same compacted
			// resourceVersion instead of relisting, forever, and never sees
			// the update made meanwhile.
			name: "no relist on 410", mutant: informer.MutantSkipRelistOn410,
			scenario: func(h *informertest.Harness) {
				h.Put("a", "x")
				h.Start(1)
				h.Advance(2 * time.Second) // a watch that ends within a second is a failure: relist
				h.Partition(func() {
					h.Put("a", "x")
					h.Put("a", "y") // compacting this revision leaves the watch's start behind
				})
				h.Advance(2 * time.Second)
			},
			want: []spec.Property{spec.InformerConverges},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []informer.Mutant{informer.MutantNone, tc.mutant} {
				synctest.Test(t, func(t *testing.T) {
					h := informertest.NewHarness(t, mutantSubject(m), tc.cfg, watchhub.Options{ProgressInterval: -1})
					defer h.Close()
					tc.scenario(h)
					h.Quiesce()
					var got []spec.Property
					var all []spec.Violation
					for _, vs := range h.Violations() {
						all = append(all, vs...)
					}
					got = informertest.Properties(all)
					want := tc.want
					if m == informer.MutantNone {
						want = nil
					}
					if !slices.Equal(got, want) {
						t.Errorf("mutant %d: want exactly %v, got %v:\n%v\n%s", m, want, got, all, h.Rec.Dump(h.Rec.Runs()[0], "mutant"))
					}
				})
			}
		})
	}
}

// TestRandomScenariosFindMutants: the random scenarios of
// TestInformerContract are not vacuous — run against each mutant, they
// find it, and name the rule the mutant breaks among what they report.
func TestRandomScenariosFindMutants(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutant informer.Mutant
		want   spec.Property
	}{
		{"no tombstones on relist", informer.MutantNoTombstones, spec.RelistDeletes},
		{"resourceVersion from a synthetic ADDED", informer.MutantRVFromSyntheticAdded, spec.SyncedRVMonotonic},
		{"deltas reordered per key", informer.MutantReorderDeltas, spec.InformerSubsequence},
		{"no relist on 410", informer.MutantSkipRelistOn410, spec.InformerConverges},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found := map[spec.Property]int{}
			rapid.Check(t, func(t *rapid.T) {
				for _, vs := range informertest.Explore(t, mutantSubject(tc.mutant), informertest.Options{}) {
					for _, p := range informertest.Properties(vs) {
						found[p]++
					}
				}
			})
			t.Logf("rules reported over the scenarios: %v", found)
			if found[tc.want] == 0 {
				t.Errorf("the random scenarios never reported %s for this mutant (reported: %v)", tc.want, found)
			}
		})
	}
}
