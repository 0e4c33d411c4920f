// Package watchhub is watchspec's reference watch hub: it delivers the
// commits of an [mvcc.Store] to watches grouped in streams, with etcd's
// guarantees (docs/SPEC.md §3) and etcd's design for slow readers — synced,
// victim and unsynced watches (§3.13) — without a goroutine or a channel per
// watch.
//
// A [Hub] is fed by the store ([Hub.Notify], in revision order) and reads
// history back from it ([History]). A [Stream] is what one client reads: a
// bounded queue of [Response]s shared by its watches. A watch that falls
// behind gets etcd's shape of response: many revisions in one. Responses
// share the events they deliver ([Batch], [Response.Shared]), so that a
// server encodes each event once however many watches deliver it. See [Hub]
// for how a watch moves between the groups and docs/IMPLEMENTATION.md for
// the costs.
package watchhub
