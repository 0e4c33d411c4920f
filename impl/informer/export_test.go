package informer

// Test-only access to the informer's test hooks (hooks.go): the fault
// "processing paused" and the mutants that the contract's checker must
// reject.

// Mutant names a deliberately broken behaviour.
type Mutant = mutant

// The mutants.
const (
	MutantNone                    = mutantNone
	MutantNoTombstones            = mutantNoTombstones
	MutantRVFromSyntheticAdded    = mutantRVFromSyntheticAdded
	MutantReorderDeltas           = mutantReorderDeltas
	MutantSkipRelistOn410         = mutantSkipRelistOn410
	MutantRelistAtZero            = mutantRelistAtZero
	MutantWatchListIgnoresCatchUp = mutantWatchListIgnoresCatchUp
)

// SetTestHooks installs a mutant and a hook run before each pop of the
// queue; call it before Run.
func SetTestHooks(s *SharedInformer, m Mutant, beforePop func()) {
	s.hooks = &testHooks{mutant: m, beforePop: beforePop}
}
