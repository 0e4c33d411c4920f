// Package traces defines watchspec's recorded-trace format (version 1), reads
// and writes it, and holds the corpus of recorded traces in corpus/.
//
// A trace is newline-delimited JSON: a header line, then one record per
// line — client operations with their call and return times, watch
// creations, every watch response, and annotations (server restarts,
// injected faults). docs/TRACE_FORMAT.md documents every field, and
// trace.schema.json is its JSON Schema.
//
// Keys and values are bytes. In JSON a byte string is a string when it is
// valid UTF-8 (so keys stay readable) and {"base64": "..."} otherwise, so any
// bytes round-trip.
//
// [Read] never panics on malformed input: it fails with "file:line: what is
// wrong".
package traces

import (
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

// Format is the value of the header's "format" field.
const Format = "watchspec-trace"

// Version is the version of the format this package reads and writes.
const Version = 1

// Header is the first line of a trace.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
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
}

// Trace is a whole recorded run.
type Trace struct {
	// Name is where the trace came from (a file name), for messages.
	Name        string
	Header      Header
	Ops         []Op
	Watches     []*Watch
	Annotations []Annotation
	// K8s is the informer run the trace's Kubernetes records describe,
	// or nil.
	K8s *k8s.Run
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
