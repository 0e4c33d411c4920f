package listwatch_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/watchhub"
	harness "github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/model/k8s"
)

// SPEC §4.1, §4.3, §4.4: the requests no informer of the legality test
// makes — a watch at resourceVersion "0" (with and without bookmarks),
// a WatchList at "0", a list at "0" with a limit — answered by the
// adversary while objects change, each recorded and held to k8s.CheckList
// and k8s.CheckWatch; over the seeds a watch at "0" opens with an older
// state (stale-watch-state) and passes.
func TestRawRequestsUnderAdversary(t *testing.T) {
	yes := true
	requests := []informer.WatchOptions{
		{ResourceVersion: "0"},
		{ResourceVersion: "0", AllowWatchBookmarks: true},
		{ResourceVersion: "0", ResourceVersionMatch: "NotOlderThan", SendInitialEvents: &yes, AllowWatchBookmarks: true},
	}
	stale := int64(0)
	for seed := int64(1); seed <= 20; seed++ {
		synctest.Test(t, func(t *testing.T) {
			h := harness.NewHarness(t, harness.Reference{}, harness.Config{}, watchhub.Options{ProgressInterval: -1})
			defer h.Close()
			adv := listwatch.New(seed, h.Store(), harness.GVR, "", listwatch.Options{Compact: h.Rec.Compact})
			h.UseSource(adv)
			ctx := context.Background()
			for _, name := range []string{"x", "y", "z"} {
				h.Put("a", name)
				h.Put("b", name)
			}
			for _, o := range requests {
				w, err := h.LW.Watch(ctx, o)
				if err != nil {
					t.Fatalf("seed %d: watch %+v: %v", seed, o, err)
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					for range w.ResultChan() {
					}
				}()
				h.Put("a", "x")
				h.Delete("b", "y")
				h.Put("b", "w")
				synctest.Wait()
				w.Stop()
				<-done
			}
			if _, err := h.LW.List(ctx, informer.ListOptions{ResourceVersion: "0", Limit: 2}); err != nil {
				t.Fatalf("seed %d: list: %v", seed, err)
			}
			synctest.Wait()
			hist, err := h.Rec.History()
			if err != nil {
				t.Fatal(err)
			}
			run := h.Rec.Runs()[0]
			for i, c := range run.Watches {
				for _, v := range k8s.CheckWatch(hist, c) {
					t.Errorf("seed %d, watch %d %+v: %s\n%s", seed, i, c.Options, v, adv.Report())
				}
			}
			for i, c := range run.Lists {
				for _, v := range k8s.CheckList(hist, c) {
					t.Errorf("seed %d, list %d %+v: %s\n%s", seed, i, c.Options, v, adv.Report())
				}
			}
			stale += adv.Report().Counts[listwatch.StaleWatchState.String()]
		})
	}
	if stale == 0 {
		t.Errorf("over 20 seeds no watch at \"0\" opened with an older state")
	}
	t.Logf("stale-watch-state made %d times", stale)
}
