// Package informer is watchspec's reference Kubernetes informer over the
// reference store (package store): the list/watch API the API server's
// storage layer serves, and client-go's informer machinery on top of it —
// Reflector → DeltaFIFO → Indexer → SharedInformer — with the contracts
// client-go states only in comments written down on each type.
//
//   - [StoreListWatch] serves list and watch of one resource over the store,
//     with the resourceVersion rules of the Kubernetes API (unset, "0", N,
//     Exact, limit and continue, 410 Expired, WatchList with its
//     k8s.io/initial-events-end bookmark): docs/SPEC.md §4.
//   - [Reflector] lists, watches, relists on 410 and backs off
//     (tools/cache/reflector.go).
//   - [DeltaFIFO] queues per-object deltas, tombstones on relist
//     (tools/cache/delta_fifo.go).
//   - [Indexer] is the thread-safe cache with custom indices
//     (tools/cache/thread_safe_store.go, index.go).
//   - [SharedInformer] shares one cache among many handlers, each with its
//     own unbounded buffer, late handlers and per-handler HasSynced
//     (tools/cache/shared_informer.go): docs/SPEC.md §5.
//   - [Client], [TypedClient] (such as [NewConfigMapClient]) and
//     [DynamicClient] are the thin client shapes that make sense over a
//     store: untyped, typed, and dynamic by GVR.
//
// Objects are stored as the API server stores them: under
// /registry/<group>/<resource>/<namespace>/<name> (the core group has no
// group segment); an object's resourceVersion is its key's ModRevision and
// its UID the CreateRevision. Values are opaque to the informer.
//
// The behaviour mirrors client-go v0.37 with the classic DeltaFIFO
// (client-go's default queue is now RealFIFO, which delivers the same
// contract); watchspec's model (model/k8s) checks recorded runs of this
// informer and of client-go's against docs/SPEC.md §5, and this package
// never imports the model.
package informer
