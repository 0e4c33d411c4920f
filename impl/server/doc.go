// Package server serves watchspec's reference store
// ([github.com/watchspec/watchspec/impl/store.Store]) on the
// etcd v3 gRPC API, with the service definitions of
// go.etcd.io/etcd/api/v3/etcdserverpb, so that the real clientv3 client and
// etcdctl work against it unmodified.
//
//	r, err := server.Start(dir, "127.0.0.1:2379", server.Options{})
//	defer r.Close()
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{r.Endpoint()}})
//
// # What it serves
//
//   - KV: Range, Put, DeleteRange, Txn, Compact, with etcd's validation,
//     in etcd's order, and etcd's gRPC errors (rpctypes): sort options and
//     min/max revision filters, nested transactions, comparisons over key
//     ranges, ignore_value and ignore_lease included. RangeStream is
//     codes.Unimplemented.
//   - Watch: create (client- or server-chosen IDs), cancel, progress
//     requests, prev_kv, filters, fragment, progress_notify; the responses
//     are shaped as etcd shapes them (see watchServer.Watch).
//   - Maintenance.Status and Cluster.MemberList, enough for clientv3 and
//     etcdctl; response headers carry Options.ClusterID, MemberID and
//     RaftTerm and the store's revision.
//   - Maintenance.Alarm with etcd's semantics: the store raises NOSPACE
//     when a write runs out of disk space; puts are refused with
//     ErrGRPCNoSpace until it is disarmed (etcdctl alarm disarm), which
//     needs no restart; Status lists the alarms in its errors (alarm.go).
//   - Lease: LeaseGrant (client- or server-chosen IDs, etcd's minimum and
//     maximum TTL), LeaseRevoke (every attached key deleted at one
//     revision), the LeaseKeepAlive stream, LeaseTimeToLive (with keys),
//     LeaseLeases, and puts and transactions with leases, with etcd's
//     answers and errors (lease.go). Leases expire on the store's clock and
//     survive a restart with their TTL reset (impl/store, LeaseOptions).
//   - grpc.health.v1.Health: SERVING until the server stops.
//   - Everything else (Auth, membership changes, the other Maintenance
//     RPCs, lease checkpoints) is codes.Unimplemented.
//
// # In operation
//
// One port serves gRPC and HTTP, as etcd's client port does: /health,
// /livez, /readyz and /version with etcd's answers, and Prometheus
// /metrics under etcd's metric names ([Server.HTTPHandler], [Metrics]);
// Options.MetricsURLs (etcd's --listen-metrics-urls) serves the metrics and
// health endpoints on more ports. With Options.TLS the port serves TLS
// only — client certificates required if the configuration says so. The
// server logs to Options.Logger (log/slog): serving and stopping, alarms,
// compactions, insecure listeners, refused TLS handshakes.
//
// # Differences from etcd
//
//   - LeaseLeases lists the leases by ID (etcd: by expiry).
//   - A lease's expiry is checked every 500 ms (etcd's lessor too), and a
//     restart resets every lease's remaining TTL to its full TTL (etcd's
//     Promote after a leader change or restart), but the lease table is a
//     file rewritten by each grant and revoke (docs/IMPLEMENTATION.md).
//   - Authentication and cluster membership changes are not supported.
//   - Alarms live in memory: a restart clears them (etcd keeps them in its
//     backend); a disk still full raises NOSPACE again at the next put.
//   - A transaction branch that puts a key a from-key delete ("\x00" range
//     end) covers is rejected with ErrGRPCDuplicateKey (etcd#22445: etcd up
//     to 3.7 accepts it), as docs/SPEC.md §2.5 states.
//   - Where the store's watch hub and etcd differ, the server follows the
//     hub: a progress request made while a watch is catching up is answered
//     once it has caught up (etcd drops it), a progress notification may
//     carry a watch's start revision minus one (etcd waits for the start
//     revision), and a stream with no watch answers a progress request
//     (etcd sends nothing).
//   - The hub rejects a negative watch_id (etcd accepts one), and forgets a
//     watch cancelled for compaction at once (etcd keeps its ID in use until
//     the client cancels it).
//   - Two sibling nested transactions, the first putting a key the second
//     deletes, are rejected (the store checks the flattened branch); etcd
//     accepts them.
//
// TestSameAsEtcd checks each of these differences on both sides (all but
// the progress request during a catch-up, which is a race in etcd), and
// that there is no other in its script. docs/SERVER.md has the details.
//
// # Limits
//
// A write (put, delete, transaction that may write, compaction) larger
// than Options.MaxRequestBytes, measured as etcd measures it, fails with
// ErrGRPCRequestTooLarge; any request larger than that plus
// GRPCOverheadBytes is refused by gRPC (codes.ResourceExhausted). A
// transaction with more than Options.MaxTxnOps comparisons or operations
// in a branch fails with ErrGRPCTooManyOps.
//
// The citations in this package ("v3rpc/watch.go:270-285") are to etcd
// v3.7 (server/etcdserver/…, server/storage/mvcc/…).
package server
