package informertest

import (
	"slices"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
)

// KnownBugs is implemented by a [Subject] built on an informer with a
// known, documented bug (docs/FINDINGS.md) that the scenarios hit now and
// then, on a loaded machine: Known returns the finding's name when v, a
// violation of run, is that bug's shape, and "" otherwise. The harness
// logs such a violation instead of failing the run for it; every other
// violation fails as before, and the recorded trace still fails
// `watchspec check` — the rule is not relaxed, the test of that informer
// only stops failing on a bug already reported.
type KnownBugs interface {
	Known(run k8s.Run, v spec.Violation) string
}

// known splits a run's violations into those subject knows as a reported
// bug (with the finding's name) and the rest.
func known(subject Subject, run k8s.Run, vs []spec.Violation) (rest []spec.Violation, excused []string) {
	kb, ok := subject.(KnownBugs)
	if !ok {
		return vs, nil
	}
	for _, v := range vs {
		if name := kb.Known(run, v); name != "" {
			excused = append(excused, name+": "+v.String())
			continue
		}
		rest = append(rest, v)
	}
	return rest, excused
}

// ClientGoSyncTrackerRace reports whether v, a violation of run, is
// docs/FINDINGS.md informer-2: client-go's per-handler HasSynced
// (synctrack.SingleFileTracker, v0.37.2) turned true while initial-list
// adds of that handler were still to come, because Finished takes its
// count to 0 and only then reads whether the informer synced — if the rest
// of the initial list is handed to the handler and the informer syncs in
// between, Finished sees both and marks the handler synced. The shape:
// §5.5 HasSyncedDelivered, on a handler that had received at least one
// initial-list add before it reported HasSynced (the add whose Finished
// raced), for a key delivered as an initial-list add after it.
func ClientGoSyncTrackerRace(run k8s.Run, v spec.Violation) bool {
	if v.Property != spec.HasSyncedDelivered {
		return false
	}
	synced := map[int]int{} // handler → entry of its first HasSynced
	for i, e := range run.Entries {
		if e.HasSynced != nil && *e.HasSynced >= 0 {
			if _, ok := synced[*e.HasSynced]; !ok {
				synced[*e.HasSynced] = i
			}
		}
	}
	for h, at := range synced {
		before, lateKey := false, false
		for i, e := range run.Entries {
			n := e.Notification
			if n == nil || n.Handler != h || !n.InInitialList {
				continue
			}
			if i < at {
				before = true
			} else if slices.Contains(v.Keys, n.Key()) {
				lateKey = true
			}
		}
		if before && lateKey {
			return true
		}
	}
	return false
}
