package mutate_test

import (
	"fmt"
	"log"

	"github.com/watchspec/watchspec/internal/mutate"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

// One operator, one corpus trace, one seed: the mutant breaks §3.2 Unique
// and the checker names it.
func Example() {
	t, err := traces.ReadFile("../../traces/corpus/watchspec-reference-compaction-in-flight.ndjson.gz")
	if err != nil {
		log.Fatal(err)
	}
	s, err := mutate.NewSubject("watchspec-reference-compaction-in-flight.ndjson.gz", t, linearizability.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, op := range mutate.Operators() {
		if op.Name != "watch-duplicate-event" {
			continue
		}
		m, ok := op.Apply(s, 1)
		if !ok {
			log.Fatal("nothing to change")
		}
		r := mutate.Judge(m)
		fmt.Println(op.Name, op.Kind, r.Outcome, r.New)
	}
	// Output: watch-duplicate-event semantic caught [Unique]
}
