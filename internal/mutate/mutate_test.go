package mutate

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// TestMutantsAreReproducible: an operator's mutant is a function of the
// subject and the seed, so a failure printed with its seed can be remade;
// it differs from the subject's trace; and the subject's trace, shared by
// every draw, is left as it was (mutants are copies).
func TestMutantsAreReproducible(t *testing.T) {
	ss := slices.Clone(subjects(t))
	// The smallest traces first: each operator is tried where it is cheapest.
	size := func(s *Subject) int { return len(s.Trace.Ops) + s.Base.WatchResponses }
	slices.SortStableFunc(ss, func(a, b *Subject) int { return size(a) - size(b) })
	before := map[*Subject][]byte{}
	for _, s := range ss {
		if size(s) < 2000 { // all but the two largest recordings, which are costly to write under -race
			before[s] = written(t, s.Trace)
		}
	}
	for _, op := range Operators() {
		t.Run(op.Name, func(t *testing.T) {
			for i, s := range ss {
				seed := Seed(99, op.Name, i)
				a, ok := op.Apply(s, seed)
				if !ok {
					continue
				}
				b, _ := op.Apply(s, seed)
				if a.What != b.What || !slices.Equal(a.Tags, b.Tags) || expectString(a.Expect) != expectString(b.Expect) {
					t.Fatalf("seed %d on %s made two mutants: %q and %q", seed, s.Name, a.What, b.What)
				}
				if !reflect.DeepEqual(a.Trace, b.Trace) {
					t.Fatalf("seed %d on %s made two different traces (%s)", seed, s.Name, a.What)
				}
				if a.Err == nil && op.Name != "re-encode" && reflect.DeepEqual(a.Trace, s.Trace) {
					t.Fatalf("seed %d on %s: the mutant (%s) is the trace itself", seed, s.Name, a.What)
				}
				return
			}
			if op.Name != "watch-event-filtered-type" {
				t.Errorf("%s applies to no corpus trace", op.Name)
			}
		})
	}
	for s, b := range before {
		if !bytes.Equal(b, written(t, s.Trace)) {
			t.Errorf("%s changed: an operator wrote into the subject's trace instead of its copy", s.Name)
		}
	}
}

// TestEverySemanticPropertyHasAnOperator keeps the campaign complete: every
// property of SPEC §2.6–§2.7, §3, §4 and §5 is what some semantic operator
// breaks.
func TestEverySemanticPropertyHasAnOperator(t *testing.T) {
	covered := map[spec.Property]bool{}
	for _, op := range Operators() {
		named := op.Kind == Semantic || op.Kind == Strict
		if !named && len(op.Properties) > 0 {
			t.Errorf("%s is %s but lists properties", op.Name, op.Kind)
		}
		if op.Kind == Semantic {
			for _, p := range op.Properties {
				covered[p] = true
			}
		}
		if named && len(op.Properties) == 0 {
			t.Errorf("%s operator %s lists no property", op.Kind, op.Name)
		}
	}
	for _, e := range spec.Catalog() {
		if s := e.Section; strings.HasPrefix(s, "2.") && s != "2.6" && s != "2.7" && s != "2.8" {
			continue // §2.1–§2.5 are rules of the model, checked through §2.7
		}
		if !covered[e.Property] {
			t.Errorf("no semantic operator breaks %s (§%s)", e.Property, e.Section)
		}
	}
}

// TestEveryExpectationHasAStrictOperator: every expectation of the strict
// profile (docs/SPEC.md §9.3) is what some strict operator breaks, so that
// the campaign holds the checker to the strict rules as well as to the
// default ones.
func TestEveryExpectationHasAStrictOperator(t *testing.T) {
	strict, err := linearizability.LookupProfile("strict")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range strict.Expectations {
		found := false
		for _, op := range Operators() {
			if op.Kind == Strict && len(op.Properties) > 0 && slices.Contains(e.Strengthens, op.Properties[0]) {
				found = true
			}
		}
		if !found {
			t.Errorf("no strict operator breaks the expectation %s (%s)", e.Name, e.Rule)
		}
	}
}

// TestMutationDocListsEveryOperator keeps docs/MUTATION.md's table of
// operators in step with the code: every operator has its row, with its
// kind, and no row names an operator that is gone.
func TestMutationDocListsEveryOperator(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "MUTATION.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) >= 2 && strings.HasPrefix(cells[0], "| `") {
			rows[strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")] = cells[1]
		}
	}
	for _, op := range Operators() {
		kind, ok := rows[op.Name]
		switch {
		case !ok:
			t.Errorf("docs/MUTATION.md has no row for %s", op.Name)
		case kind != op.Kind.String():
			t.Errorf("docs/MUTATION.md gives %s the kind %s, the code %s", op.Name, kind, op.Kind)
		}
		delete(rows, op.Name)
	}
	for name := range rows {
		t.Errorf("docs/MUTATION.md lists %s, which is no operator", name)
	}
}

// TestJudge: the verdicts of the campaign, on hand-made results.
func TestJudge(t *testing.T) {
	ss := subjects(t)
	var clean *Subject
	for _, s := range ss {
		if s.Name == "etcd-3.7.3-1member.ndjson.gz" {
			clean = s
		}
	}
	if clean == nil || len(clean.Properties()) != 0 {
		t.Fatal("etcd-3.7.3-1member.ndjson.gz is missing from the corpus or fails")
	}
	semantic := &Operator{Name: "t", Kind: Semantic}
	equivalence := &Operator{Name: "t", Kind: Equivalence}
	unchanged := &Mutant{Op: semantic, Subject: clean, Trace: clean.Trace, Expect: one(spec.Reliable)}
	if r := Judge(unchanged); r.Outcome != Missed {
		t.Errorf("an unchanged trace as a semantic mutant: %s, want %s", r.Outcome, Missed)
	}
	unchanged.Op = equivalence
	if r := Judge(unchanged); r.Outcome != Kept {
		t.Errorf("an unchanged trace as an equivalence mutant: %s, want %s", r.Outcome, Kept)
	}
}

func written(t *testing.T, tr *traces.Trace) []byte {
	var b bytes.Buffer
	if err := traces.Write(&b, tr); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
