// Package proptest holds rapid state-machine tests that drive the reference
// implementation and the model side by side, with faults:
// TestStoreMatchesModel runs impl/store (key-value requests, watches,
// leases, compactions, restarts and crashes) against model/kv, model/watch
// and model/lease; the informer tests run client-go's informers against
// the informer model's contract.
package proptest
