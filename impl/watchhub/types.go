package watchhub

import (
	"errors"
	"time"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// Request asks for a watch on one stream.
type Request struct {
	// Key and RangeEnd select the keys with etcd's conventions: an empty
	// RangeEnd watches the single key Key, "\x00" every key ≥ Key, anything
	// else the half-open interval [Key, RangeEnd), which must not be empty.
	// An empty Key means "\x00" (as in etcd).
	Key, RangeEnd string
	// StartRevision is the first revision to deliver: 0 means the revision
	// after the created response's header revision; a revision above the
	// current one waits for it; a negative one is rejected.
	StartRevision int64
	// NoPut and NoDelete drop PUT and DELETE events.
	NoPut, NoDelete bool
	// PrevKV asks for each event's previous key-value (omitted for
	// creations, and when the previous revision is compacted).
	PrevKV bool
	// ProgressNotify asks for periodic progress notifications (every
	// Options.ProgressInterval while the watch has nothing else to say).
	ProgressNotify bool
	// WatchID chooses the watch's ID on the stream; 0 lets the stream
	// choose the lowest free one. An ID in use on the stream is rejected.
	WatchID int64
}

// Response is one message on a stream: the answer to a creation or a
// cancel, a batch of events of one watch, a compaction cancel, or a progress
// notification.
//
// The Events slice and the key-values it points to may be shared with other
// responses and with the store: treat them as read-only. [Response.Shared]
// tells which batch of shared events they belong to, so that a server can
// encode each event for the wire once, however many watches deliver it.
type Response struct {
	// WatchID is the watch the response is for, or [InvalidWatchID] for a
	// rejected creation and for a progress notification that answers
	// [Stream.RequestProgress] and concerns every watch of the stream.
	WatchID int64
	// Revision is the header revision. The header revisions of one stream
	// never decrease (docs/SPEC.md §3.12), except that a compaction cancel
	// carries 0, as in etcd.
	Revision int64
	// Events are the watch's events of one or more whole revisions (a
	// revision is never split, docs/SPEC.md §3.4), in revision and operation
	// order.
	Events []mvcc.Event
	// Created marks the answer to a creation; with Canceled, a rejection.
	Created bool
	// Canceled ends the watch: nothing more comes for WatchID.
	Canceled bool
	at       int32 // the position of Events[0] in src
	// CompactRevision, when not 0, cancels a watch that needs history below
	// it that compaction removed (docs/SPEC.md §3.11).
	CompactRevision int64
	CancelReason    string
	src             *Batch   // the batch Events is a run of, or nil
	w               *watcher // the watch, for counting its queued responses (Stream.RecvMore), or nil
}

// Shared returns the batch of events that r.Events is a run of, and where:
// r.Events is b.Events(at+len(r.Events))[at:]. Every response that delivers
// an event of b refers to the same b, across watches and streams, so a
// value derived from b's events — their wire encoding — can be computed once
// and kept with b ([Batch.Memo]). Shared returns nil when r has no events,
// or when its events were selected for its watch alone (a watch that
// filters or that covers only some keys of a revision) and are its own.
func (r *Response) Shared() (b *Batch, at int) {
	if r.src == nil || len(r.Events) == 0 {
		return nil, 0
	}
	return r.src, int(r.at)
}

// IsProgressNotify reports whether r is a progress notification: no events,
// not a creation or a cancel, a header revision set (clientv3's definition).
func (r Response) IsProgressNotify() bool {
	return len(r.Events) == 0 && !r.Canceled && !r.Created && r.CompactRevision == 0 && r.Revision != 0
}

// InvalidWatchID is the WatchID of a rejected creation and of a progress
// notification for the whole stream (etcd's clientv3.InvalidWatchID).
const InvalidWatchID = -1

// History is what the hub reads from the store: the history of events by
// revision. [mvcc.Store] implements it.
type History interface {
	// CompactRevision returns the compact revision in force, -1 if none.
	CompactRevision() int64
	// Events returns the events of revisions from..to, whole revisions only,
	// stopping after the revision that brings their number to maxEvents;
	// last is the last revision covered. See [mvcc.Store.Events].
	Events(from, to int64, maxEvents int, withPrev bool) (evs []mvcc.Event, last int64, err error)
}

// Options configure a [Hub]. The zero Options are etcd's defaults, with a
// bound on bytes that etcd does not have.
type Options struct {
	// StreamCapacity bounds the data responses (events, progress
	// notifications, compaction cancels) a stream holds for its reader.
	// A response that does not fit is not queued — the watch falls behind
	// and is caught up later, many revisions in one response — except that
	// a stream with nothing queued always takes one. Default 128 (etcd's
	// chanBufLen).
	StreamCapacity int
	// StreamBytes bounds the memory those responses hold: the events copied
	// for the stream, and every batch of shared events it refers to, counted
	// once for each run of consecutive responses that refer to it (see
	// docs/IMPLEMENTATION.md). A response that does not fit is not queued,
	// or is cut at a revision boundary; a stream with nothing queued always
	// takes one response, however large. Default 4 MiB.
	StreamBytes int
	// MaxControlResponses bounds the created and canceled responses a stream
	// holds beyond StreamCapacity; Watch and Cancel wait when it is reached
	// (etcd's ctrlStreamBufLen). Default 16.
	MaxControlResponses int
	// MaxRevisionsPerResponse bounds the revisions of one catch-up response
	// (etcd's watchBatchMaxRevs). Default 1000.
	MaxRevisionsPerResponse int
	// MaxEventsPerRead bounds the events of one window of history read from
	// the store for catch-up (whole revisions: it may read one revision
	// more; a window is also bounded to about StreamBytes), and the events
	// of the most recent commits the hub keeps in memory to catch up watches
	// that fall behind without reading the store. Default 4096.
	MaxEventsPerRead int
	// MaxWatchersPerPass bounds the watches one catch-up pass serves
	// (etcd's maxWatchersPerSync). Default 512.
	MaxWatchersPerPass int
	// ProgressInterval is the period of progress notifications for watches
	// that asked for them. Default 10 minutes (etcd's); negative disables.
	ProgressInterval time.Duration
	// Clock supplies the progress ticks; default the real clock.
	Clock Clock
	// Manual turns the background goroutines off: nothing is caught up
	// until the caller runs [Hub.Flush], and no periodic progress is sent
	// but by [Hub.Tick]. For deterministic tests and simulations.
	Manual bool
}

func (o *Options) setDefaults() {
	if o.StreamCapacity <= 0 {
		o.StreamCapacity = 128
	}
	if o.StreamBytes <= 0 {
		o.StreamBytes = 4 << 20
	}
	if o.MaxControlResponses <= 0 {
		o.MaxControlResponses = 16
	}
	if o.MaxRevisionsPerResponse <= 0 {
		o.MaxRevisionsPerResponse = 1000
	}
	if o.MaxEventsPerRead <= 0 {
		o.MaxEventsPerRead = 4096
	}
	if o.MaxWatchersPerPass <= 0 {
		o.MaxWatchersPerPass = 512
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = 10 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = RealClock{}
	}
}

// Clock makes tickers; tests substitute a fake.
type Clock interface {
	// NewTicker returns a channel that delivers a tick every d, and a
	// function that stops it.
	NewTicker(d time.Duration) (ticks <-chan time.Time, stop func())
}

// RealClock is the Clock of the time package.
type RealClock struct{}

// NewTicker implements [Clock].
func (RealClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// The errors of Watch and Cancel. Watch reports a rejected request twice: as
// its error, and as a created-and-canceled response on the stream whose
// CancelReason is etcd's text for the same rejection.
var (
	// ErrNegativeStartRevision rejects a negative start revision. Its text is
	// the CancelReason etcd sends for it (etcd PR #20693).
	ErrNegativeStartRevision = errors.New("etcdserver: mvcc: required revision has been compacted")
	// ErrEmptyRange rejects a range end at or below the key.
	ErrEmptyRange = errors.New("mvcc: watcher range is empty")
	// ErrDuplicateWatchID rejects a WatchID in use on the stream.
	ErrDuplicateWatchID = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
	// ErrInvalidWatchID rejects a negative WatchID.
	ErrInvalidWatchID = errors.New("watchhub: watch ID must not be negative")
	// ErrWatchNotFound answers Cancel of an ID not in use (no response is
	// sent for it, as in etcd).
	ErrWatchNotFound = errors.New("mvcc: watcher does not exist")
	// ErrClosed is returned by a stream that was closed, or whose hub was.
	ErrClosed = errors.New("watchhub: stream closed")
)
