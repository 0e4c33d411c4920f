package informer

// mutant names a deliberately broken behaviour. Mutants exist only so that
// watchspec's tests can show that the informer contract's checker
// (model/k8s, docs/SPEC.md §5) rejects each bug naming the right rule;
// they can be switched on only from this package's tests (export_test.go).
type mutant int

const (
	mutantNone mutant = iota
	// mutantNoTombstones: a relist does not delete what it did not list
	// (the bug kubernetes#115620 fixed, generalised).
	mutantNoTombstones
	// mutantRVFromSyntheticAdded: the Reflector adopts the resourceVersion
	// of the synthetic ADDED events a WatchList opens with
	// (kubernetes#136583).
	mutantRVFromSyntheticAdded
	// mutantReorderDeltas: Pop hands a key's deltas newest first.
	mutantReorderDeltas
	// mutantSkipRelistOn410: a watch answered 410 Expired is opened again
	// at the same resourceVersion instead of relisting.
	mutantSkipRelistOn410
	// mutantRelistAtZero: every list asks for resourceVersion "0", as
	// client-go's Reflector did before kubernetes#83520: a relist may be
	// served from a snapshot older than what the informer has seen
	// (kubernetes#67998).
	mutantRelistAtZero
	// mutantWatchListIgnoresCatchUp: a WatchList's changes before its
	// k8s.io/initial-events-end bookmark are ignored, as if the initial
	// events were only ADDED (SPEC §4.4 allows changes there).
	mutantWatchListIgnoresCatchUp
)

// testHooks are test-only knobs: fault injection and mutants. A nil
// *testHooks is the production informer.
type testHooks struct {
	mutant mutant
	// beforePop, if set, runs before each Pop of the informer's queue,
	// outside the queue's lock: a test blocks it to let deltas pile up.
	beforePop func()
}

func (h *testHooks) is(m mutant) bool { return h != nil && h.mutant == m }
