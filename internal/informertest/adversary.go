package informertest

import (
	"fmt"
	"strings"
	"time"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
)

// AdversaryConfig draws an informer's configuration from seed: WatchList
// on even seeds, resync (10 s) on every third, lists paged by 2 on seeds
// 1, 6, 11, ….
func AdversaryConfig(seed int64) Config {
	cfg := Config{WatchList: seed%2 == 0}
	if seed%3 == 0 {
		cfg.ResyncPeriod = 10 * time.Second
	}
	if seed%5 == 1 {
		cfg.PageSize = 2
	}
	return cfg
}

// AdversaryWorkload is the workload of seed under the adversary: writes,
// compactions (and one once the writes are done, as the API server's
// compactor makes one every 5 minutes), late handlers and restarts.
func AdversaryWorkload(seed int64) Workload {
	return Workload{Seed: seed, Compact: true, CompactAtEnd: true, LateHandlers: true, Restart: true}
}

// RunUnderAdversary runs an informer of subject through the workload of
// seed over the informer adversary of seed (adversary/listwatch, which may
// compact through the recorder), checks every recorded run, and returns
// the outcome and what the adversary did. Call it inside a
// testing/synctest bubble.
func RunUnderAdversary(t TB, subject Subject, seed int64) (Outcome, listwatch.Report) {
	t.Helper()
	var adv *listwatch.ListWatch
	out := RunWorkload(t, subject, AdversaryConfig(seed), AdversaryWorkload(seed), func(h *Harness) informer.ListerWatcher {
		adv = listwatch.New(seed, h.Store(), GVR, "", listwatch.Options{Compact: h.Rec.Compact})
		return adv
	})
	return out, adv.Report()
}

// Explain describes the failed runs of out under the adversary of rep: the
// violations, where each run's trace was written, the adversary's choices
// and how to replay them; "" when every run passed.
func Explain(out Outcome, rep listwatch.Report, seed int64) string {
	if !out.Failed() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "under the informer adversary with seed %d (config %+v):\n", seed, AdversaryConfig(seed))
	for i, vs := range out.Violations {
		if len(vs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "run %d of %d broke the informer contract:\n", i+1, len(out.Violations))
		for _, v := range vs {
			fmt.Fprintf(&b, "  %s\n", v)
		}
		fmt.Fprintf(&b, "  %s\n", out.Rec.Dump(out.Rec.Runs()[i], fmt.Sprintf("adversary-seed-%d", seed)))
	}
	b.WriteString(rep.String())
	last := rep.Choices
	if len(last) > 20 {
		last = last[len(last)-20:]
	}
	for _, c := range last {
		fmt.Fprintf(&b, "  %s\n", c)
	}
	fmt.Fprintf(&b, "(replay: the same seed makes the same choices at the same points; every choice is legal, so the informer is at fault)\n")
	return b.String()
}
