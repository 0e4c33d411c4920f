// Package watch is the specification of etcd's watch: what a watch may
// deliver, given the committed history of the store.
//
// It offers two things, both pure:
//
//   - [Validator], an incremental checker: feed it the responses one client
//     received on one watch, in order, while the [kv.History] they refer to
//     grows; it reports every broken property of docs/SPEC.md §3 as a
//     [spec.Violation] naming the property, the revisions and the keys.
//   - [Canonical], the stream a perfect server sends, for tests of
//     implementations.
//
// # What the validator assumes
//
// A watch is not linearizable, and delivery may be late without bound: a
// server may park a slow watcher and catch it up later. So the validator never
// demands that anything has arrived by a given moment. It demands that what
// arrived is a gapless, ordered prefix of the matching history, that progress
// notifications tell the truth, and that the only way a stream may end early
// is a cancel (with CompactRevision when history the watch needs was
// compacted).
//
// The validator knows only the compactions recorded in its History when it
// is called. Compactions make it more lenient (a missing PrevKV or a
// compaction cancel is allowed once history is compacted), so a checker of a
// recorded trace should record each compaction no later than the time its
// request was sent; see docs/SPEC.md §3.11.
//
// It holds a stream to what etcd guarantees, as etcd 3.5 – 3.7 and clientv3
// keep it: a header may go back below an earlier one (never below an event
// delivered), a watch from revision 0 may start at or below its created
// header, and a progress notification binds only a watch that was
// registered when it was computed. What the validator knows of how the
// watch was made — what its server had applied when it was requested,
// which progress notifications bind it — and stronger expectations (the
// strict profile) are given in a [Config] ([NewValidatorWith]).
package watch

import "github.com/watchspec/watchspec/model/kv"

// Request is what a client asks for when it creates a watch.
type Request struct {
	// Key and RangeEnd select the keys, with etcd's range conventions (see
	// [kv.InRange]).
	Key, RangeEnd string
	// StartRevision is the first revision to deliver. 0 means the revision
	// after the one at which the watch was created; a revision above the
	// current one waits for it. A negative revision is rejected.
	StartRevision int64
	// NoPut and NoDelete drop PUT and DELETE events (etcd's NOPUT and NODELETE filters).
	NoPut, NoDelete bool
	// PrevKV asks for each event's previous key-value.
	PrevKV bool
	// ProgressNotify asks for periodic progress notifications.
	ProgressNotify bool
	// Fragment lets the server split a response of many events into
	// fragments on the wire (etcd's fragment flag). The client library
	// joins them, and responses are taken joined (§6), so nothing in the
	// model depends on it; a trace keeps it to say what was asked.
	Fragment bool
}

// Matches reports whether the watch delivers e: its key is in the range and
// its type is not filtered out.
func (r Request) Matches(e kv.Event) bool {
	return r.InRange(e.KV.Key) && !r.FiltersOut(e.Type)
}

// InRange reports whether key is in the watched range.
func (r Request) InRange(key string) bool { return kv.InRange(r.Key, r.RangeEnd, key) }

// FiltersOut reports whether events of type t are filtered out.
func (r Request) FiltersOut(t kv.EventType) bool {
	return (t == kv.Put && r.NoPut) || (t == kv.Delete && r.NoDelete)
}

// Response is one watch response as the client saw it (after clientv3 joined
// any fragments).
type Response struct {
	// Revision is the header revision. etcd leaves it 0 on a compaction
	// cancel; the validator ignores 0.
	Revision int64
	Events   []kv.Event
	// Created marks the response to the creation request.
	Created bool
	// Canceled ends the watch; nothing follows it.
	Canceled bool
	// CompactRevision, when not 0, says the watch needed history below it
	// that was compacted; the watch is cancelled.
	CompactRevision int64
	CancelReason    string
}

// IsProgressNotify reports whether r is a progress notification: no events,
// not a creation or a cancel, a header revision set (clientv3's definition).
func (r Response) IsProgressNotify() bool {
	return len(r.Events) == 0 && !r.Canceled && !r.Created && r.CompactRevision == 0 && r.Revision != 0
}

// Canonical returns the responses a perfect server sends on a watch created
// when the store's revision was createdAt, for everything h holds:
//
//   - a negative start revision: one response, created and cancelled with
//     etcd's reason "etcdserver: mvcc: required revision has been compacted";
//   - otherwise a created response with header revision createdAt;
//   - if the effective start (StartRevision, or createdAt+1 for 0) is below
//     h's compact revision c: a cancel with CompactRevision c (header
//     revision 0 and no reason, as etcd sends it), and nothing else;
//   - then one response per revision that has matching events, in revision
//     order, with header revision equal to that revision, or to createdAt
//     for revisions older than the watch (a server never shows a revision
//     older than one it has already shown); PrevKV is attached when asked for
//     and the previous state is still readable (at or above c);
//   - last, when ProgressNotify is set and h's head is at least the start
//     revision minus one, a progress notification at the head.
//
// h's compact revision is taken to be the one in force when the watch was created.
func Canonical(h *kv.History, req Request, createdAt int64) []Response {
	if req.StartRevision < 0 {
		return []Response{{Revision: createdAt, Created: true, Canceled: true, CancelReason: "etcdserver: " + kv.ErrCompacted.Error()}}
	}
	out := []Response{{Revision: createdAt, Created: true}}
	from := req.StartRevision
	if from == 0 {
		from = createdAt + 1
	}
	c := h.CompactRevision()
	if from < c {
		return append(out, Response{Canceled: true, CompactRevision: c})
	}
	for _, cm := range h.Between(from, h.Head()) {
		var evs []kv.Event
		for _, e := range cm.Events {
			if !req.Matches(e) {
				continue
			}
			e.PrevKV = expectedPrevKV(req, e, c)
			evs = append(evs, e)
		}
		if len(evs) > 0 {
			out = append(out, Response{Revision: max(cm.Revision, createdAt), Events: evs})
		}
	}
	if req.ProgressNotify && h.Head() >= from-1 {
		out = append(out, Response{Revision: h.Head()})
	}
	return out
}

// expectedPrevKV returns what a perfect server attaches as e's PrevKV, given
// the committed event e and the compact revision c.
func expectedPrevKV(req Request, e kv.Event, c int64) *kv.KeyValue {
	if !req.PrevKV || e.PrevKV == nil || e.KV.ModRevision-1 < c {
		return nil
	}
	p := *e.PrevKV
	return &p
}
