// Package impl holds watchspec's reference implementation, which stands on
// its own and never imports watchspec's model, so that checking it against
// the model means something (docs/SPEC.md, docs/IMPLEMENTATION.md):
//
//   - [github.com/watchspec/watchspec/impl/mvcc]: the durable MVCC
//     key-value store on bbolt — key index, group commit, crash-safe
//     multi-batch compaction (docs/SPEC.md §2);
//   - [github.com/watchspec/watchspec/impl/watchhub]: the watch hub —
//     streams, synced / victim / unsynced watches, catch-up from history,
//     compaction cancels, progress notifications (§3);
//   - [github.com/watchspec/watchspec/impl/store]: the two wired together,
//     the API an etcd v3 server or an informer sits on.
//
// The etcd v3 gRPC server and the informer arrive with later issues.
package impl
