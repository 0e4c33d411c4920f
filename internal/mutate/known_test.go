package mutate

import (
	"path/filepath"
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

// knownDefects is empty: every defect the campaign found (W1–W6 in
// model/watch, model/kv and linearizability; K1–K3 in model/k8s; issue 19)
// is fixed, each with its regression test next to the rule it fixed. A new
// finding whose fix is someone else's goes here, with its repro, until
// that fix merges.
var knownDefects = []knownDefect{}

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
	if len(knownDefects) == 0 {
		t.Skip("no known defect: the allow-list is empty")
	}
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
