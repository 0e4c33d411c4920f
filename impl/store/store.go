// Package store is watchspec's reference etcd-style store: the durable MVCC
// key-value store of package mvcc and the watch hub of package watchhub,
// wired together behind one API. It is what an etcd v3 gRPC server or an
// informer sits on.
//
//	s, err := store.Open(dir, store.Options{})
//	rev, err := s.Put(ctx, store.PutRequest{Key: "a", Value: "1"})
//	w, err := s.Watch(ctx, store.WatchRequest{Key: "a", StartRevision: 1})
//	resp, err := w.Recv(ctx)
//
// Every method's contract is the one of the package that implements it;
// docs/SPEC.md states the semantics (§2 for the key-value requests, §3 for
// watches) and docs/IMPLEMENTATION.md how they are met. Leases (LeaseGrant,
// LeaseRevoke, LeaseKeepAlive, LeaseTimeToLive, Leases) are kept durably by
// package mvcc and expire on the Store's clock (LeaseOptions).
package store

import (
	"context"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// The types of the API, defined in mvcc and watchhub.
type (
	KeyValue        = mvcc.KeyValue
	Event           = mvcc.Event
	EventType       = mvcc.EventType
	RangeRequest    = mvcc.RangeRequest
	RangeResponse   = mvcc.RangeResponse
	PutRequest      = mvcc.PutRequest
	PutResponse     = mvcc.PutResponse
	DeleteRequest   = mvcc.DeleteRequest
	DeleteResponse  = mvcc.DeleteResponse
	TxnRequest      = mvcc.TxnRequest
	TxnResponse     = mvcc.TxnResponse
	Op              = mvcc.Op
	OpResponse      = mvcc.OpResponse
	Compare         = mvcc.Compare
	CompactResponse = mvcc.CompactResponse
	Alarm           = mvcc.Alarm
	Stats           = mvcc.Stats
	Recovery        = mvcc.Recovery
	Report          = mvcc.Report
	RecoverReport   = mvcc.RecoverReport
	Damage          = mvcc.Damage
	DamageError     = mvcc.DamageError
	WatchRequest    = watchhub.Request
	WatchResponse   = watchhub.Response
	WatchStream     = watchhub.Stream
)

// The event types.
const (
	Put    = mvcc.Put
	Delete = mvcc.Delete
)

// AlarmNoSpace is etcd's NOSPACE alarm (see [Store.Alarms]).
const AlarmNoSpace = mvcc.AlarmNoSpace

// The errors, defined in mvcc and watchhub.
var (
	ErrCompacted    = mvcc.ErrCompacted
	ErrFutureRev    = mvcc.ErrFutureRev
	ErrEmptyKey     = mvcc.ErrEmptyKey
	ErrDuplicateKey = mvcc.ErrDuplicateKey
	ErrKeyNotFound  = mvcc.ErrKeyNotFound
	ErrClosed       = mvcc.ErrClosed
	ErrNoSpace      = mvcc.ErrNoSpace
	ErrCorrupt      = mvcc.ErrCorrupt
	ErrLocked       = mvcc.ErrLocked
	ErrNotStore     = mvcc.ErrNotStore
)

// Options configure a Store: the key-value store's and the watch hub's. The
// OnCommit and OnCommits options of KV are the store's own and are ignored.
type Options struct {
	KV    mvcc.Options
	Watch watchhub.Options
	Lease LeaseOptions
}

// Store is a durable etcd-style key-value store with watches. All methods
// are safe for concurrent use.
type Store struct {
	kv  *mvcc.Store
	hub *watchhub.Hub
	le  lessor // the leases' clock (lease.go)
}

// Open opens the store in directory dir (see [mvcc.Open]: a new or empty
// directory starts a new store; a damaged one is refused with a
// *DamageError) and starts its watch hub.
func Open(dir string, opts Options) (*Store, error) {
	s := &Store{}
	ready := make(chan struct{})
	kvOpts := opts.KV
	kvOpts.OnCommit = nil
	kvOpts.OnCommits = func(cs []mvcc.Commit) {
		<-ready // no commit can precede Open's return; this orders the hub's creation before its use
		s.hub.NotifyAll(cs)
	}
	kv, err := mvcc.Open(dir, kvOpts)
	if err != nil {
		return nil, err
	}
	s.kv = kv
	s.hub = watchhub.New(kv, kv.Revision(), opts.Watch)
	close(ready)
	s.startLessor(opts.Lease)
	return s, nil
}

// Range reads keys at a revision (docs/SPEC.md §2.3); see [mvcc.Store.Range].
func (s *Store) Range(ctx context.Context, r RangeRequest) (RangeResponse, error) {
	return s.kv.Range(ctx, r)
}

// Put writes a key (§2.1, §2.2); see [mvcc.Store.Put].
func (s *Store) Put(ctx context.Context, r PutRequest) (PutResponse, error) {
	return s.kv.Put(ctx, r)
}

// Delete removes the live keys of a range; see [mvcc.Store.Delete].
func (s *Store) Delete(ctx context.Context, r DeleteRequest) (DeleteResponse, error) {
	return s.kv.Delete(ctx, r)
}

// Txn runs a transaction (§2.5); see [mvcc.Store.Txn].
func (s *Store) Txn(ctx context.Context, r TxnRequest) (TxnResponse, error) {
	return s.kv.Txn(ctx, r)
}

// Compact discards the history below rev (§2.4); watches that still need it
// are cancelled with CompactRevision (§3.11). See [mvcc.Store.Compact].
func (s *Store) Compact(ctx context.Context, rev int64) (CompactResponse, error) {
	return s.kv.Compact(ctx, rev)
}

// Revision returns the current revision.
func (s *Store) Revision() int64 { return s.kv.Revision() }

// CompactRevision returns the compact revision, -1 if never compacted.
func (s *Store) CompactRevision() int64 { return s.kv.CompactRevision() }

// NewWatchStream returns an empty watch stream, closed when ctx is done (if
// ctx is not nil) or by its Close. See [watchhub.Stream].
func (s *Store) NewWatchStream(ctx context.Context) *WatchStream { return s.hub.NewStream(ctx) }

// Watch returns a new stream, closed when ctx is done, carrying one watch
// created with req. If the request is rejected, the stream carries the
// rejection and Watch returns its error with the stream.
func (s *Store) Watch(ctx context.Context, req WatchRequest) (*WatchStream, error) {
	ws := s.hub.NewStream(ctx)
	_, err := ws.Watch(ctx, req)
	return ws, err
}

// Hub returns the watch hub, for its statistics and, with
// watchhub.Options.Manual, for driving it.
func (s *Store) Hub() *watchhub.Hub { return s.hub }

// Close closes every watch stream (queued responses stay readable), then
// the key-value store (which checkpoints its log into its data file).
func (s *Store) Close() error {
	s.stopLessor()
	s.hub.Close()
	return s.kv.Close()
}

// Kill closes every watch stream, then stops the key-value store as a crash
// would (see [mvcc.Store.Kill]): for tests of recovery.
func (s *Store) Kill() error {
	s.stopLessor()
	s.hub.Close()
	return s.kv.Kill()
}

// Checkpoint brings the data file up to date with the log (see
// [mvcc.Store.Checkpoint]).
func (s *Store) Checkpoint() error { return s.kv.Checkpoint() }

// Alarms returns the alarms raised: [AlarmNoSpace] after a write ran out of
// disk space (see [mvcc.Store.Alarms]). An etcd server answers
// Maintenance.Alarm and the errors of Maintenance.Status from it.
func (s *Store) Alarms() []Alarm { return s.kv.Alarms() }

// RaiseAlarm raises an alarm by hand (etcd's Alarm ACTIVATE).
func (s *Store) RaiseAlarm(a Alarm) error { return s.kv.RaiseAlarm(a) }

// DisarmAlarm clears an alarm (etcd's Alarm DEACTIVATE) and reports whether
// it was raised; writes resume (see [mvcc.Store.DisarmAlarm]).
func (s *Store) DisarmAlarm(a Alarm) bool { return s.kv.DisarmAlarm(a) }

// Stats returns the key-value store's figures: sizes of the data file and
// the log, counts of commits and fsyncs (see [mvcc.Stats]).
func (s *Store) Stats() Stats { return s.kv.Stats() }

// Recovery says what Open replayed or discarded (see [mvcc.Recovery]).
func (s *Store) Recovery() Recovery { return s.kv.Recovery() }

// Check verifies a stopped data directory without changing it (see
// [mvcc.Check]).
func Check(dir string) (*Report, error) { return mvcc.Check(dir) }

// Recover rebuilds a damaged data directory from what still verifies (see
// [mvcc.Recover]).
func Recover(dir string) (*RecoverReport, error) { return mvcc.Recover(dir) }
