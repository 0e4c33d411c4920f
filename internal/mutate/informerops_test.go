package mutate

import (
	"testing"

	"github.com/watchspec/watchspec/model/spec"
)

// TestLateHandlerGapSecondOnDelete: a late handler's dropped OnAdd of a key
// it had been told was deleted (the key was re-created) leaves its next
// notification of the key a second OnDelete, which §5.1 InformerSubsequence
// names (one fault, one name: §5.4 does not compare a handler already
// blamed). The operator expected §5.4 and the long draw reported "other
// name" (make mutate, seed 20261202, n=20: seeds 8818024161337981752 and
// 8818031857919379229 on the apiserver-HTTP recording). Each mutant must be
// caught; the first two show the case, the rest of the draw the others.
func TestLateHandlerGapSecondOnDelete(t *testing.T) {
	s := subjectNamed(t, "apiserver-http-0.37.2-over-etcd-3.7.3.ndjson.gz")
	op := operatorNamed(t, "informer-late-handler-gap")
	for _, seed := range []int64{8818024161337981752, 8818031857919379229} {
		m, ok := op.Apply(s, seed)
		if !ok {
			t.Fatalf("seed %d: the operator no longer applies to %s", seed, s.Name)
		}
		if got := expectString(m.Expect); got != expectString(one(spec.InformerSubsequence)) {
			t.Errorf("seed %d (%s): expects %s, want §5.1 InformerSubsequence: the handler's next notification of the key is a second OnDelete", seed, m.What, got)
		}
		if r := Judge(m); r.Outcome != Caught {
			t.Errorf("seed %d: %v", seed, r)
		}
	}
	// The other shapes of the gap, drawn as the campaign draws them: every
	// mutant whose next notification of the key is an OnDelete expects §5.1
	// exactly when the handler had been told the key was deleted.
	seen := map[string]int{}
	for i := range 40 {
		m, ok := op.Apply(s, Seed(7, op.Name, i))
		if !ok {
			continue
		}
		r := Judge(m)
		seen[expectString(m.Expect)]++
		if r.Outcome != Caught {
			t.Errorf("seed %d: %v", m.Seed, r)
		}
	}
	t.Logf("40 draws: mutants per expectation %v", seen)
	if len(seen) < 2 {
		t.Errorf("40 draws made mutants of one expectation only (%v): the test no longer shows both names", seen)
	}
}

// subjectNamed returns the corpus subject of that file name.
func subjectNamed(t *testing.T, name string) *Subject {
	t.Helper()
	for _, s := range subjects(t) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("%s is missing from the corpus (traces/corpus), or is over -mutate.maxsize", name)
	return nil
}

// operatorNamed returns the operator of that name.
func operatorNamed(t *testing.T, name string) *Operator {
	t.Helper()
	for _, op := range Operators() {
		if op.Name == name {
			return op
		}
	}
	t.Fatalf("no operator is named %s", name)
	return nil
}
