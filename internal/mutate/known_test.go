package mutate

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// knownDefect is a defect of the checker the campaign found, reported to its
// owner (issue 19) and being fixed. The campaign does not fail on the
// mutants it explains; TestKnownDefectsStillReproduce fails as soon as its
// repro no longer shows it, so that the entry is deleted with the fix: the
// list must be empty once the fixes have merged.
type knownDefect struct {
	// ID names the entry of the findings (W…: model/watch, model/kv,
	// linearizability; K…: model/k8s).
	ID, Summary string
	// Match reports whether a campaign failure is this defect.
	Match func(Result) bool
	// Repro is a trace under testdata/known; checking it fails exactly the
	// properties Today while the defect lasts, and exactly Right once fixed
	// (or exactly Also, when the SPEC's text leaves the name open).
	Repro              string
	Today, Right, Also []spec.Property
}

// extra reports whether r is an expected verdict of its mutant plus exactly
// the properties more.
func extra(r Result, more ...spec.Property) bool {
	for _, set := range r.Mutant.Expect {
		if sameSet(append(slices.Clone(set), more...), r.New) {
			return true
		}
	}
	return false
}

// within reports whether r's new properties are some of ps.
func within(r Result, ps ...spec.Property) bool {
	if len(r.New) == 0 {
		return false
	}
	for _, p := range r.New {
		if !slices.Contains(ps, p) {
			return false
		}
	}
	return true
}

var knownDefects = []knownDefect{
	{
		ID: "W1", Summary: "WriteRevision is derived from a delivered event that Reliable rejects (one fault, two names)",
		Match: func(r Result) bool {
			op := r.Mutant.Op.Name
			return (op == "watch-value-of-other-revision" || op == "watch-corrupt-modrevision") && r.Outcome == OtherName && extra(r, spec.WriteRevision)
		},
		Repro: "watch-value-of-other-revision.ndjson", Today: []spec.Property{spec.Reliable, spec.WriteRevision}, Right: []spec.Property{spec.Reliable},
	},
	{
		ID: "W1", Summary: "WriteRevision is derived from a delivered event that Reliable rejects (one fault, two names)",
		Repro: "watch-corrupt-modrevision.ndjson", Today: []spec.Property{spec.Reliable, spec.WriteRevision}, Right: []spec.Property{spec.Reliable},
	},
	{
		ID: "W2", Summary: "false PrevKV when a compaction of unknown outcome applied but no cancel in the trace shows it",
		Match: func(r Result) bool {
			op := r.Mutant.Op.Name
			switch {
			case r.Mutant.Subject.maxCompact() < 0:
				return false
			case op == "truncate-stream" || op == "forget-outcomes":
				return r.Outcome == FalsePositive && sameSet(r.New, []spec.Property{spec.PrevKV})
			case op == "watch-false-compaction-cancel":
				// The cancel it replaced showed the compaction applied.
				return r.Outcome == OtherName && slices.Contains(r.Mutant.Tags, "drops-cancel") && extra(r, spec.PrevKV)
			}
			return false
		},
		Repro: "compaction-unknown-no-cancel-prevkv.ndjson", Today: []spec.Property{spec.PrevKV},
	},
	{
		ID: "W6", Summary: "a replayed event below one delivered before it in the same response is named Unique, not Ordered (names change with batching)",
		Match: func(r Result) bool {
			return r.Mutant.Op.Name == "merge-responses" && r.Outcome == FalsePositive && sameSet(r.New, []spec.Property{spec.Unique}) &&
				r.Mutant.Subject.base[spec.Ordered] > 0
		},
		Repro: "watch-replay-batched-unique.ndjson", Today: []spec.Property{spec.Ordered, spec.Unique}, Right: []spec.Property{spec.Ordered},
	},
	{
		ID: "W3", Summary: "a first progress notification beyond the head passes on a watch without a created response",
		Repro: "progress-beyond-head-no-created.ndjson", Right: []spec.Property{spec.Bookmarkable},
	},
	{
		ID: "W4", Summary: "a progress notification below a delivered event passes when the event's header is 0",
		Repro: "progress-below-event-header-zero.ndjson", Right: []spec.Property{spec.MonotonicRevision}, Also: []spec.Property{spec.Bookmarkable},
	},
	{
		ID: "W5", Summary: "in informer traces, a write of unknown outcome that a Kubernetes watch event or list showed is linearized as never applied",
		Match: func(r Result) bool {
			return r.Mutant.Op.Name == "forget-outcomes" && r.Outcome == FalsePositive && slices.Contains(r.Mutant.Tags, "informer") &&
				within(r, spec.Reliable, spec.InformerSubsequence, spec.InformerConverges, spec.ListSnapshot, spec.RelistDeletes)
		},
		Repro: "informer-unknown-write-seen-by-watch.ndjson", Today: []spec.Property{spec.Reliable, spec.InformerSubsequence, spec.InformerConverges},
	},
	{
		ID: "K1", Summary: "the old object of OnUpdate is never checked (§5.1)",
		Match: func(r Result) bool {
			op := r.Mutant.Op.Name
			return (op == "informer-fabricated-old" || op == "informer-stale-old") && r.Outcome == Missed
		},
		Repro: "informer-fabricated-old.ndjson", Right: []spec.Property{spec.InformerSubsequence},
	},
	{
		ID: "K2", Summary: "the Kubernetes watch path never names CompactedCancel: a silently skipped compacted history is Resumable",
		Match: func(r Result) bool {
			return r.Mutant.Op.Name == "k8s-watch-skip-compacted" && r.Outcome == OtherName && within(r, spec.Resumable, spec.StartRevision)
		},
		Repro: "k8s-watch-skips-compacted.ndjson", Today: []spec.Property{spec.Resumable}, Right: []spec.Property{spec.CompactedCancel},
	},
	{
		ID: "K3", Summary: "a watch that opens with a state and whose stream ends inside its initial ADDED events fails",
		Match: func(r Result) bool {
			return r.Mutant.Op.Name == "k8s-truncate-watch" && r.Outcome == FalsePositive && slices.Contains(r.Mutant.Tags, "inside-initial-state") &&
				within(r, spec.WatchStart, spec.Resumable, spec.StartRevision, spec.Reliable)
		},
		Repro: "k8s-watch-ends-inside-initial-state.ndjson", Today: []spec.Property{spec.Resumable},
	},
}

// known returns the known defect that explains a campaign failure, if any.
func known(r Result) (knownDefect, bool) {
	for _, d := range knownDefects {
		if d.Match != nil && d.Match(r) {
			return d, true
		}
	}
	return knownDefect{}, false
}

// TestKnownDefectsStillReproduce keeps the allow-list honest: each repro
// must still fail exactly as the defect makes it fail. When one is fixed the
// test says which entry to delete. (docs/SPEC.md; issue 19.)
func TestKnownDefectsStillReproduce(t *testing.T) {
	for _, d := range knownDefects {
		t.Run(d.ID+"/"+d.Repro, func(t *testing.T) {
			tr, err := traces.ReadFile(filepath.Join("testdata", "known", d.Repro))
			if err != nil {
				t.Fatal(err)
			}
			res, err := linearizability.Check(tr, linearizability.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := keys(counts(res))
			switch {
			case sameSet(got, d.Today):
				t.Logf("known defect %s (%s): still there, %s fails %v; the SPEC demands %v", d.ID, d.Summary, d.Repro, got, d.Right)
			case sameSet(got, d.Right) || (d.Also != nil && sameSet(got, d.Also)):
				t.Errorf("known defect %s is fixed (%s now fails exactly %v): delete its entries from knownDefects in known_test.go, and testdata/known/%s",
					d.ID, d.Repro, got, d.Repro)
			default:
				t.Errorf("known defect %s: %s fails %v, neither %v (the defect) nor %v (the SPEC): look at the checker's change", d.ID, d.Repro, got, d.Today, d.Right)
			}
		})
	}
}
