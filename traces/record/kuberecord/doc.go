// Package kuberecord records a client-go informer that already exists — a
// real controller's SharedIndexInformer — as the Kubernetes records of a
// trace (docs/TRACE_FORMAT.md, "Kubernetes records"), which
// linearizability.Check and `watchspec check` judge against the informer
// contract of docs/SPEC.md §4 (list and watch) and §5.
//
// It lives next to package record, the recorder of clientv3 clients, for
// the same reason: it wraps what the caller already has instead of asking
// for a rewrite, as clientv3/namespace does. Package conform/kube drives a
// workload of its own against an apiserver; this package records yours.
//
// To start: make a [Recorder] with [New], wrap the informer's ListerWatcher
// with [Recorder.NewListerWatcher] before building the informer, register
// every handler through [Recorder.AddEventHandler] (or
// [Recorder.AddEventHandlerWithResyncPeriod], or wrap it with
// [Recorder.Handler] and register it yourself), run the informer with
// [Recorder.Run], and when the run is over call [Recorder.Quiesced] (once
// writes stopped and the informer had time to catch up) and
// [Recorder.Finish]; [Recorder.Trace] then joins the informer's records with
// the store's writes into a trace:
//
//	rec, err := kuberecord.New(kuberecord.Options{Prefix: prefix, Object: toModel, Revision: head})
//	inf := cache.NewSharedIndexInformer(rec.NewListerWatcher(lw), &v1.ConfigMap{}, resync, cache.Indexers{})
//	rec.AddEventHandler(inf, myHandler)
//	go rec.Run(ctx, inf)
//	… writes, then wait …
//	rec.Quiesced(); cancel(); rec.Finish(inf)
//	tr, err := rec.Trace(hdr, writes) // writes: every write of the store, as traces.Op
//
// # What it records
//
// Every list the informer's ListerWatcher makes (its options —
// resourceVersion, resourceVersionMatch, limit, continue — and its answer:
// the items with their resourceVersions and the list's resourceVersion, or
// the Status of a refusal such as 410 Expired), every watch (its options,
// each event as it is passed on, bookmarks and their
// k8s.io/initial-events-end annotation, ERROR events, and its end), every
// handler call (OnAdd with isInInitialList, OnUpdate with the old and new
// objects, OnDelete and its tombstones), each handler's and the informer's
// HasSynced the first time it is true, the informer's
// LastSyncResourceVersion when it changes, each periodic resync (client-go
// logs "Forcing resync" through the context's logger, which [Recorder.Run]
// forwards), and the informer's final cache. A list or watch that failed
// without an answer of the server (the caller's context ended, the
// connection broke before any answer) is not recorded: the informer retries.
//
// # What the checker relies on
//
// The informer's records say what it saw; the checker judges them against
// the store's history, which this package cannot see. The caller owes it:
//
//   - every write, as traces.Op (the closed world): the writes of the
//     objects under Options.Prefix and of everything else in the store
//     since the base revision, each with its revision — revisions are
//     store-wide, and a revision no write holds makes the history
//     unexplainable. Against watchspec's reference store,
//     internal/informertest's Recorder writes and records them (see this
//     package's test); against etcd under an apiserver, record every
//     writer's clientv3 with package record (cli.KV = rec.NewKV(cli.KV))
//     and take their operations. This package does not learn writes over
//     HTTP: package conform/kube does, for the writes it makes itself,
//     which is why `watchspec conform --kubeconfig` needs the namespace to
//     itself;
//   - the base revision: Header.BaseRevision (and BaseCompactRevision) is
//     the store before the first recorded write, and the prefix held
//     nothing then;
//   - unique values (Header.UniqueValues) when a write's outcome may be
//     unknown, so that the checker finds it by its value;
//   - objects in the model's terms: Options.Object maps what client-go
//     delivers to the model's key (prefix + namespace/name), value (the
//     written value), resourceVersion and UID, the revision that created
//     that life of the object. An object whose value or UID is not what
//     the store wrote at that resourceVersion is a state the store never
//     held, and the checker says so;
//   - bounds, if it can: Options.Revision returns the revision committed
//     now (the store's head). Without it every list and watch is bounded
//     only by the base revision and the head of the writes, so a stale
//     answer the store gave is not caught (fresh start §5.8, §4.1's most
//     recent read), but nothing correct fails;
//   - quiescence: InformerConverges (§5.2) compares the final cache and
//     each handler's view with the store only after [Recorder.Quiesced],
//     which the caller marks once writes stopped and the informer caught up.
package kuberecord
