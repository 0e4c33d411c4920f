// Package impl holds watchspec's reference implementation: a compact
// bbolt-backed MVCC store with a watch hub, an etcd v3 server over it, and an
// informer. It stands on its own and never imports watchspec's model, so
// that checking it against the model means something (docs/SPEC.md).
//
// The store arrives with issue 3 ("Reference store"); until then this
// package is empty.
package impl
