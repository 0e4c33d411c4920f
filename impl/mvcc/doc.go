// Package mvcc is watchspec's reference MVCC key-value store: etcd's
// revisioned key space (docs/SPEC.md §2) on a write-ahead log and a bbolt
// data file, with an in-memory key index, group commit, checkpoints and
// crash-safe multi-batch compaction.
//
// # Data layout
//
// A data directory holds the data file, mvcc.db (bbolt), and the log,
// wal-<seq>.log. A group commit is one frame of the log, made durable by one
// fdatasync; its records stay in memory until a checkpoint writes them into
// the data file, in parts, and removes the log segments that held them.
// Writers wait for a checkpoint once twice Options.CheckpointBytes are held
// (see [Options.CheckpointBytes]), so memory stays bounded. The data
// file's bucket "key" maps a record key — the write revision and the
// position of the write within it, 8+4 bytes big-endian, so that byte order
// is revision order — to a record: the key, a tombstone flag, the create
// revision, the version, the value, and the revision of the key's previous
// live version (so that a watch replaying history can attach PrevKV without
// the index). Bucket "meta" holds the store's state (format, store ID, the
// revision the data file holds, the scheduled compaction) and the last
// compaction finished. Every record, the state and every log frame carry a
// CRC-32C. The file leases holds the lease table (IDs and TTLs), rewritten
// by every grant and revoke; a put's record carries its lease (see
// [Store.LeaseGrant], [Store.LeaseRevoke]). docs/IMPLEMENTATION.md, "On
// disk", gives the exact layout.
//
// The key index (a B-tree of keys, each with the revisions of its records)
// lives in memory and is rebuilt on Open. Reads take the record revisions
// from the index and the records from memory or from one read transaction
// of the data file shared by every reader; watches read history by revision
// ([Store.Events]).
//
// # Guarantees
//
// See [Store]: every acknowledged write is durable before its method
// returns; concurrent writers share fsyncs, one per group commit; reads are
// linearizable and never queue behind each other; a crash at any moment,
// including in the middle of a checkpoint or a compaction, reopens with the
// revision, the compact revision and every version at or above the compact
// revision. Open checks the whole directory before it serves it and refuses
// a damaged one ([DamageError]), one that is not a store ([ErrNotStore]) or
// is in use ([ErrLocked]); [Check] verifies a stopped one and [Recover]
// rebuilds a damaged one from what verifies. A full disk raises the NOSPACE
// alarm ([Store.Alarms]) instead of stopping the store. The semantics of
// every request are docs/SPEC.md §2's, and the error texts are etcd's.
package mvcc
