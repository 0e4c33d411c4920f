package traces

import (
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

// Format is the value of the header's "format" field.
const Format = "watchspec-trace"

// Version is the version of the format this package writes. [Read] reads
// it and every earlier version (1).
const Version = 2

// Header is the first line of a trace.
type Header struct {
	Format string `json:"format"`
	// Version is the format version: [Read] sets the file's; [Write] writes
	// this version when set, and otherwise the latest version that can say
	// what the trace holds.
	Version int `json:"version"`
	// System and SystemVersion name what produced the trace, such as "etcd"
	// and "3.7.3", or "watchspec-reference".
	System        string `json:"system"`
	SystemVersion string `json:"system_version,omitempty"`
	// Start is when recording began, RFC 3339; all times in the trace are
	// nanoseconds since then, from a monotonic clock.
	Start string `json:"start"`
	// Tool says what recorded the trace, and Seed its random seed, if any.
	Tool string `json:"tool,omitempty"`
	Seed int64  `json:"seed,omitempty"`
	// Profile names the allowances the trace is checked under ("" means none:
	// full conformance).
	Profile string `json:"profile,omitempty"`
	// UniqueValues promises that every put writes a value never written
	// before, which lets a checker identify a write by its value.
	UniqueValues bool `json:"unique_values,omitempty"`
	// BaseRevision is the store's revision when recording began, when the
	// store was not fresh (0 or 1: a fresh store). The trace's keys must
	// all have been absent then, and nothing but the recorded clients may
	// write during the run.
	BaseRevision int64 `json:"base_revision,omitempty"`
	// BaseCompactRevision is the compaction in force when recording began
	// (version 2): −1 when the store had never been compacted, N ≥ 0 when it
	// had been compacted at N (N ≤ max(BaseRevision, 1)), and nil when it
	// was not recorded. Unknown is not "never": a checker must then let a
	// read or watch below BaseRevision meet any compaction at or below
	// BaseRevision (be answered "compacted", or cancelled with any such
	// compact revision), and must not fail a store for it.
	BaseCompactRevision *int64 `json:"base_compact_revision,omitempty"`
}

// Trace is a whole recorded run.
type Trace struct {
	// Name is where the trace came from (a file name), for messages.
	Name   string
	Header Header
	Ops    []Op
	// LeaseOps are the clients' lease operations (version 2, "lease"
	// records), in file order.
	LeaseOps    []LeaseOp
	Watches     []*Watch
	Annotations []Annotation
	// ProgressRequests are the clients' Watcher.RequestProgress calls
	// (version 2), in file order.
	ProgressRequests []ProgressRequest
	// K8s is the informer run the trace's Kubernetes records describe,
	// or nil.
	K8s *k8s.Run
	// K8sInfo is what those records say beyond the run: where each is in
	// the file, when it happened, and the recorder's watch ids. Read sets
	// it whenever K8s is set. [Write] needs it to write version 2 (a trace
	// with a run and no K8sInfo is written as version 1, untimed).
	K8sInfo *K8sInfo
}

// Op is one client operation. Response is nil when the outcome is unknown
// (the client gave up: a timeout, a lost connection), and then Error says
// why; such an operation may have taken effect at any time after Call.
type Op struct {
	// Line is the line of the trace it was read from (0 when not read).
	Line   int
	Client int
	// Call and Return are nanoseconds since the trace's start. Return is the
	// time the client saw the response, or gave up (for an unknown outcome).
	Call, Return int64
	Request      kv.Request
	// Serializable marks a range request served without a quorum, by
	// whichever member answered (clientv3.WithSerializable(); version 2).
	// Only a Range request may set it. Such a read may be stale: it need
	// not see what completed before its call (docs/SPEC.md says how a
	// checker judges it).
	Serializable bool
	Response     *kv.Response
	Error        string
}

// Unknown reports whether the operation's outcome is unknown.
func (o Op) Unknown() bool { return o.Response == nil }

// Watch is one watch a client created, with every response it received.
type Watch struct {
	Line int
	// Client and ID identify the watch within the trace.
	Client, ID int
	// Stream identifies the gRPC watch stream the watch was sent on, among
	// the client's streams (version 2): watches of one client with the same
	// Stream share one stream (clientv3 puts every watch of one Watcher
	// whose context carries the same metadata on one stream), and so share
	// its progress notifications ([ProgressRequest]). nil when not
	// recorded: the watch may share a stream with any watch of its client.
	Stream *int
	// Time is when the client asked for the watch.
	Time      int64
	Request   watch.Request
	Responses []WatchResponse
}

// WatchResponse is one response a watch received, at Time.
type WatchResponse struct {
	Line     int
	Time     int64
	Response watch.Response
	// RevisionUnknown says the header revision was not recorded; then
	// Response.Revision is 0. Read sets it for a version 1 response whose
	// revision is 0 (version 1 could not tell). A recorded 0 (etcd's header
	// on a compaction cancel, or on clientv3's error response) is not
	// unknown. A checker must neither bound nor trust an unknown revision:
	// the events already delivered still bound every later header from
	// below. A response whose revision is unknown is never a progress
	// notification.
	RevisionUnknown bool
	// Error is the client-side error that ended the watch (version 2), when
	// it is not a compaction (recorded by Response.CompactRevision):
	// clientv3's WatchResponse.Err(), such as "etcdserver: no leader" or
	// "context canceled". The response carries no events, and nothing
	// follows it on its watch.
	Error string
}

// ProgressRequest is a client's call of Watcher.RequestProgress on one of
// its watch streams (version 2). etcd answers it with one progress
// notification (watch id −1) for the whole stream, which clientv3 hands to
// every watch of the stream — including a watch created after the server
// computed it. A checker must therefore accept such a notification on any
// watch of the client whose Stream is this one or unknown.
type ProgressRequest struct {
	Line   int
	Client int
	// Stream is the stream, as in [Watch.Stream].
	Stream int
	// Time is when the client sent the request.
	Time int64
}

// Annotation marks something that happened to the system under test during
// the run, for reports and the linearizability visualisation.
type Annotation struct {
	Line int
	// Time and End are nanoseconds since the start; End may equal Time.
	Time, End int64
	// Tag is a short kind, such as "restart" or "fault".
	Tag  string
	Text string
}

// K8sInfo is what a trace's Kubernetes records say beyond the k8s.Run they
// form: the line of each record, when it happened, and the ids the recorder
// gave its watches. Its slices run parallel to the run's: Lists[i] is about
// Run.Lists[i], Watches[i] about Run.Watches[i] (which Run.Entries name by
// that index i), Entries[i] about Run.Entries[i].
//
// A recorder that builds a trace to [Write] fills the times and ids and
// leaves the lines 0.
type K8sInfo struct {
	// Untimed says the times were not recorded: Read sets it for a version
	// 1 trace, whose recorders wrote 0. A checker must then not order a
	// Kubernetes record against an operation by time.
	Untimed bool
	Lists   []K8sListInfo
	Watches []K8sWatchInfo
	Entries []K8sEntryInfo
	// Cache is the informer_cache record: zero when there is none. (Write
	// writes one when the run has a Prefix or a Cache, or this is not zero.)
	Cache K8sEntryInfo
}

// K8sListInfo is where and when one list was made.
type K8sListInfo struct {
	Line int
	// Call is when the list was sent, Return when its answer arrived.
	Call, Return int64
}

// K8sWatchInfo is the id of one Kubernetes watch, and where and when it was
// made and ended.
type K8sWatchInfo struct {
	Line int
	// ID is the watch's id in the file: chosen by the recorder and unique in
	// the trace (version 2); its number from 0 in file order (version 1).
	ID int
	// Time is when the watch was sent.
	Time int64
	// EndLine and End are the line and time of its k8s_watch_end record.
	// Write writes the record, at End, when the run's WatchCall has After
	// set (in version 2 a k8s_watch_end always has one).
	EndLine int
	End     int64
}

// K8sEntryInfo is where and when one entry of the informer's log happened.
// A list's entry happens at its Return.
type K8sEntryInfo struct {
	Line int
	Time int64
}
