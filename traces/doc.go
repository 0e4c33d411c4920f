// Package traces defines watchspec's recorded-trace format, reads and
// writes it, and holds the corpus of recorded traces in corpus/.
//
// A trace is newline-delimited JSON: a header line, then one record per
// line — client operations with their call and return times, watch
// creations, every watch response, progress requests, annotations (server
// restarts, injected faults), and the lists, watches and log of a
// Kubernetes informer. docs/TRACE_FORMAT.md documents every field, and
// trace.schema.json is its JSON Schema.
//
// To start: [ReadFile] reads a trace (plain or gzip-compressed); a recorder
// writes one record by record with [NewWriter], or whole with [Write].
//
// # Versions
//
// [Write] and [NewWriter] write version 2 ([Version]) unless the header
// asks for version 1; [Read] reads versions 1 and 2, and a version 1 trace
// keeps its version when written back. Version 2 adds what a checker needs to judge other people's
// systems: the compaction in force when recording began
// ([Header.BaseCompactRevision]), serializable reads ([Op.Serializable]),
// shared watch streams ([Watch.Stream], [ProgressRequest]), watch responses
// whose header revision was not recorded ([WatchResponse.RevisionUnknown])
// and watches ended by an error ([WatchResponse.Error]), and timed
// Kubernetes records with stable watch ids ([K8sInfo]).
//
// # Unknown is not zero
//
// Whatever a recorder did not record reads as unknown, never as a
// plausible value: a nil [Header.BaseCompactRevision], a nil [Watch.Stream],
// [WatchResponse.RevisionUnknown], an [Op] without a Response, a
// k8s.ListCall or k8s.WatchCall CompactRevision of 0, and
// [K8sInfo.Untimed]. Each field's comment says how a checker must treat it.
//
// # Bytes
//
// Keys, values and continue keys are bytes. In JSON a byte string is a
// string when it is valid UTF-8 (so keys stay readable) and
// {"base64": "..."} otherwise, so any bytes round-trip.
//
// # Errors
//
// [Read] never panics on malformed input: it fails with "file:line: what is
// wrong", and names a damaged gzip stream as such. A trace with invalid
// UTF-8, a negative revision or a negative time is malformed.
package traces
