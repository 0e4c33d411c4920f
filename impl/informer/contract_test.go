package informer_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/internal/informertest"
)

// reference is impl/informer with the "processing paused" fault wired in.
var reference = informertest.Reference{Setup: func(s *informer.SharedInformer, processing *informertest.Gate) {
	informer.SetTestHooks(s, informer.MutantNone, func() { processing.Wait(nil) })
}}

// SPEC §5 (every rule): random writes and faults; every recorded run of the
// informer passes k8s.CheckInformer.
func TestInformerContract(t *testing.T) {
	cov := &informertest.Coverage{}
	rapid.Check(t, func(t *rapid.T) { informertest.Check(t, reference, informertest.Options{Coverage: cov}) })
	t.Logf("coverage:\n%s", cov)
	if missing := cov.Missing(informertest.CovRelist, informertest.CovExpired, informertest.CovTombstone, informertest.CovLateHandler,
		informertest.CovResync, informertest.CovWatchList, informertest.CovBookmark, informertest.CovSameRV, informertest.CovRestart,
		informertest.CovContinuation, informertest.CovRelistWhilePaused, informertest.CovStalledHandler); len(missing) > 0 && !t.Failed() {
		t.Errorf("the scenarios never reached: %v", missing)
	}
}
