// Package kv is the specification of etcd's MVCC key-value store (docs/SPEC.md
// §2) as a pure state machine: [Step] takes a [State] and a [Request] and
// returns the next State and the [Response] a correct store gives —
// revisions, key lifecycles, ranges at past revisions, transactions and
// compaction, with etcd's errors — and, as [LeaseRevokeRequest], what the
// server itself does to the store when a lease is revoked or expires
// (§2.9: every key attached to it deleted at one revision).
//
// Start from the zero State (a fresh store at revision 1), or from [Start] /
// [StartCompacted] for a store that was not fresh. States are persistent
// values: stepping shares structure, so a checker may keep many alive (see
// [State] for the cost of each operation). [History] is the committed
// history as watches see it — the events of every write revision and the
// compactions —, which package watch validates streams against.
//
// The package also decides the properties that need only the store:
// [CheckWriteRevision] (§2.6) and [CheckSerializable] (§2.8). §2.7
// Linearizable needs an order of a whole history; package linearizability
// finds it with Step. It depends on nothing outside the standard library
// and model/spec.
package kv
