// Package mutate is watchspec's standing mutation campaign against its own
// checker (linearizability.Check, as `watchspec check` runs it): it takes the
// traces of the corpus, changes them in memory, checks the changed traces,
// and judges the verdicts.
//
// An [Operator] makes one kind of change. A semantic operator breaks one
// guarantee of docs/SPEC.md: it finds in the trace a place where its change
// is really a violation (an event that a later event or progress
// notification would show missing, a read whose caller had already seen a
// later revision, …) and derives from the SPEC's definitions the property
// — or the few properties, when the SPEC allows more than one name — the
// checker must report. An equivalence operator changes the trace in a way
// that must keep every verdict (renaming clients, keys and values, shifting
// times, batching watch responses differently, adding truthful progress
// notifications, re-encoding the file), and a weakening operator one that
// may only remove evidence (truncating a stream, forgetting an outcome):
// no property may fail that did not fail before. A strict operator breaks
// only an expectation of the strict profile (docs/SPEC.md §9.3): the
// checker must name it under that profile and report nothing new by default.
//
// Operators ask the checker for the decisions its rules take from a trace
// rather than copying them: which progress notifications bind a watch
// (linearizability.ProgressBinding, watch.ProgressBinding.Binds), the
// committed history of the linearization, the semantic of a list or watch
// (k8s.ListSemantic, k8s.WatchSemantic).
//
// [Run] draws mutants from every operator over a set of [Subject]s (the
// corpus, read with [LoadCorpus]) with a seeded random source and returns a
// [Report]: per operator, how many mutants it made, and how many the
// checker caught under an expected name, caught under another name, missed,
// or — for equivalence operators — failed (false positives) or lost a
// verdict. Every mutant has its own seed, printed with it, and [Operator.Apply]
// remakes it from that seed.
//
// To start: `go test ./internal/mutate` runs a short draw, and `make mutate`
// a long one over the whole corpus that prints the table
// (docs/MUTATION.md describes every operator and the last long draw).
package mutate
