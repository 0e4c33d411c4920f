// Package proptest holds rapid state-machine tests that drive the reference
// implementation and the model side by side, with faults.
//
// The tests arrive with issue 3 ("Reference store"); until then this package
// is empty.
package proptest
