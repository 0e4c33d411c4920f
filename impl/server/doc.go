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
//   - grpc.health.v1.Health: SERVING until the server stops.
//   - Everything else (Lease, Auth, membership changes, the other
//     Maintenance RPCs) is codes.Unimplemented.
//
// # Differences from etcd
//
//   - Leases are not supported: a put with a lease fails with
//     ErrGRPCLeaseNotFound, as in etcd for a lease that does not exist.
//   - Authentication, TLS and cluster membership changes are not supported.
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
