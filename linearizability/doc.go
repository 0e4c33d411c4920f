// Package linearizability checks recorded key-value histories against the
// model's Step with porcupine, and recorded watch streams against the
// committed history the linearization found (docs/SPEC.md §2 and §3).
//
// The checkers arrive with issue 4 ("History checking"); until then this
// package is empty.
package linearizability
