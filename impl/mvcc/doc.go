// Package mvcc is watchspec's reference MVCC key-value store: etcd's
// revisioned key space (docs/SPEC.md §2) on a bbolt data file, with an
// in-memory key index, group commit and crash-safe multi-batch compaction.
//
// # Data layout
//
// The data file (dir/mvcc.db) has two buckets. "key" maps a record key — the
// write revision and the position of the write within it, 8+4 bytes
// big-endian, so that byte order is revision order — to a record: the key,
// a tombstone flag, the create revision, the version, the value, and the
// revision of the key's previous live version (so that a watch replaying
// history can attach PrevKV without the index). "meta" holds the latest
// revision, the latest acknowledged ("scheduled") compaction and the latest
// physically finished one.
//
// The key index (a B-tree of keys, each with the revisions of its records)
// lives in memory and is rebuilt from the records on Open. Reads take the
// record revisions from the index and the records from a read transaction of
// the data file; watches read history by revision straight from the records
// ([Store.Events]).
//
// # Guarantees
//
// See [Store]: every acknowledged write is durable before its method
// returns; concurrent writers share fsyncs; reads are linearizable; a crash
// at any moment, including in the middle of a compaction, reopens with the
// revision, the compact revision and every version at or above the compact
// revision. The semantics of every request are docs/SPEC.md §2's, and the
// error texts are etcd's.
package mvcc
