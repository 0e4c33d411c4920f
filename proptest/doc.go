// Package proptest holds watchspec's property tests: rapid state machines
// that drive the reference implementation (impl/) and the model (model/)
// side by side with faults — crashes, compaction, slow and cancelled
// watches — and hold client-go's SharedIndexInformer to the informer
// contract (docs/SPEC.md §5). It has no API; run it with
//
//	go test ./proptest
//
// and -rapid.checks=N for more cases. To check an informer of your own
// from your own tests, use conform/informertest; for a store,
// conform/conformtest.
package proptest
