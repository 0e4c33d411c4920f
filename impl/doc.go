// Package impl holds watchspec's reference implementation, which stands on
// its own and never imports watchspec's model, so that checking it against
// the model means something (docs/SPEC.md, docs/IMPLEMENTATION.md):
//
//   - [github.com/watchspec/watchspec/impl/mvcc]: the durable MVCC
//     key-value store on bbolt — key index, group commit, crash-safe
//     multi-batch compaction, the lease table (docs/SPEC.md §2);
//   - [github.com/watchspec/watchspec/impl/watchhub]: the watch hub —
//     streams, synced / victim / unsynced watches, catch-up from history,
//     compaction cancels, progress notifications (§3);
//   - [github.com/watchspec/watchspec/impl/store]: the two wired together,
//     with the leases' clock (expiry, keep-alives) — the API an etcd v3
//     server or an informer sits on;
//   - [github.com/watchspec/watchspec/impl/server]: the etcd v3 gRPC server
//     (KV, Watch, Lease, Maintenance) that clientv3 and etcdctl use
//     (`watchspec serve`);
//   - [github.com/watchspec/watchspec/impl/informer]: the Kubernetes side —
//     list/watch served from the store, and a Reflector → DeltaFIFO →
//     Indexer → SharedInformer client (§4, §5).
//
// To start, run the server (`go run ./cmd/watchspec serve`) or embed it with
// server.Start, and point any etcd client at it.
package impl
