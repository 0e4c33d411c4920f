package watch

import (
	"fmt"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

// Validator checks, incrementally, the responses one watch delivered against
// the committed history. Create one per watch with [NewValidator] and call
// [Validator.Observe] with every response in the order the client received
// them. The History may grow between calls (commits and compactions appended
// as they happen); a response may only refer to revisions already in it.
//
// A Validator is not safe for concurrent use. Its memory is O(1) in the
// length of the stream, apart from the events a progress notification
// reported missing (kept so that a late arrival is not reported twice).
//
// # Which name a violation gets
//
// One fault is reported once, under the most specific property:
//
//   - an event outside the watched range or of a filtered type: Filtered;
//   - an event below the start revision: StartRevision;
//   - an event whose revision is below one already delivered, or below one
//     before it in the same response: Ordered;
//   - an event (revision, key) delivered a second time: Unique;
//   - a revision whose events did not all come in one response: Atomic;
//   - an event after a progress notification that covered its revision:
//     Bookmarkable;
//   - matching events skipped: CompactedCancel if some of them lie below the
//     compact revision (the watch should have been cancelled), else
//     Resumable or StartRevision when they open the stream (a watch from a
//     past revision, or from now or the future) — StartRevision too when a
//     watch from now started at or below its created header and skips there
//     —, Bookmarkable when a progress
//     notification reveals them, and Reliable otherwise. When such an event
//     arrives after all, it is not reported again;
//   - a header revision below an event it carries or one delivered before
//     it, or a progress notification below an earlier one:
//     MonotonicRevision, unless the response's events were already reported
//     as out of order, duplicated, below the start or late, whose fault the
//     header only echoes. (Under [Expectations.MonotonicHeaders], any header
//     revision below an earlier one.)
//
// # What a progress notification binds
//
// etcd answers a client's progress request once for the whole gRPC stream,
// and clientv3 hands that answer to every watch of the stream, including a
// watch the server registered only after it computed the answer (etcd's
// v3rpc sends the created response on its control stream, which may
// overtake the answer). Such a notification claims nothing for that watch.
// [Config.Progress] says which notifications bind; one that does not bind is
// checked only against the committed head (docs/SPEC.md §3.6).
type Validator struct {
	h   *kv.History
	req Request
	cfg Config

	from    int64 // the documented start revision (s, or R₀+1); 0 while unknown
	lo      int64 // the lowest revision an event may have; 0 while unknown
	created int64 // header revision of the created response; 0 if none seen
	next    int64 // first revision whose matching events are not yet accounted for

	lastHeader   int64        // highest non-zero header revision seen
	lastProgress int64        // highest binding progress notification seen
	maxDelivered int64        // highest revision of an event delivered
	open         openRevision // the revision of the last delivered event
	delivered    int          // events accepted so far
	bookmark     int64        // highest progress notification accepted
	missing      map[eventID]bool

	// The current registration of the watch on the server: the header of
	// its created response (0: unknown) and whether an event arrived since.
	regCreated int64
	regEvents  bool
	// startedEarly: a watch from revision 0 whose first event is at or
	// below its created header (the start §1 allows below R₀ + 1).
	startedEarly bool

	ended, endedByCompaction bool
	seq                      int // responses observed
	// explained is set when an event of the current response was reported
	// (or suppressed as reported before) for arriving out of order, twice,
	// below the start or late: a header revision that goes back with it only
	// echoes that fault.
	explained bool
	// inverted holds the events of the current response that came after a
	// higher revision in it: reported as Ordered, they are not reported
	// again as Unique when they repeat an event.
	inverted map[eventID]bool

	checks map[spec.Property]int
	out    []spec.Violation
}

type eventID struct {
	rev int64
	key string
}

// openRevision is the revision whose events are being delivered.
type openRevision struct {
	rev      int64
	expected []kv.Event // the matching events H committed at rev, in op order
	got      map[string]bool
	maxIndex int  // highest index into expected delivered so far
	seq      int  // the response that delivered its first events
	checked  bool // completeness (Atomic) already decided
}

// Config says what a [Validator] knows about how the watch was made, and
// which expectations beyond etcd's guarantees it holds the stream to. The
// zero Config knows nothing about when the watch was requested, takes every
// progress notification as binding (one watch per gRPC stream, or no
// progress requests on it) and holds the stream to etcd's guarantees only.
type Config struct {
	// CommittedBefore, when positive, is a revision that the member serving
	// the watch had certainly applied before the watch was requested. It
	// bounds from below where a watch from revision 0 may start
	// (docs/SPEC.md §1, from(w)). Against a single server, the highest
	// revision any client was answered before the watch was requested is
	// such a revision; against a cluster it is not (a member may lag), and
	// then it must stay 0.
	CommittedBefore int64
	// Progress says which progress notifications bind the watch (§3.6).
	Progress ProgressBinding
	// Expect holds the stream to expectations stronger than what etcd
	// guarantees (the strict profile, docs/SPEC.md §9.3).
	Expect Expectations
}

// ProgressBinding says which progress notifications of a watch are claims
// about that watch (docs/SPEC.md §3.6).
type ProgressBinding int

const (
	// BindAll: every progress notification was computed while the watch was
	// registered: it is the only watch of its gRPC stream, or the client never
	// asked that stream for progress (etcd's periodic notifications are per
	// watch, server/etcdserver/api/v3rpc/watch.go sendLoop).
	BindAll ProgressBinding = iota
	// BindAfterRegistration: the client may have asked the watch's stream for
	// progress before the server registered the watch. Such an answer reaches
	// the watch before any of its events and carries a revision at or below
	// the created response's header, so a notification binds once an event
	// arrived since the (re)registration or when it is above that header.
	BindAfterRegistration
	// BindNone: the watch shares a stream on which progress was requested and
	// the recording does not show when clientv3 registered it again after a
	// stream reset: no notification binds; each is checked only against the
	// committed head.
	BindNone
)

// Binds reports whether a progress notification at revision p is a claim
// about the watch (docs/SPEC.md §3.6), given what the stream showed of the
// watch's current registration on the server: created, the header revision
// of its created response (0 when none was seen), and eventsSince, whether
// an event of the watch arrived since. Under [BindAll] every notification
// binds and under [BindNone] none; under [BindAfterRegistration] one binds
// once an event arrived since the registration, or when it is above the
// created header — an answer computed before the registration is at or
// below that header and arrives before the watch's first event.
//
// It is the rule a [Validator] applies; a tool that reasons about a stream
// (a mutation campaign placing a notification where it must bind) asks it
// here rather than copying it.
func (b ProgressBinding) Binds(created int64, eventsSince bool, p int64) bool {
	switch b {
	case BindNone:
		return false
	case BindAfterRegistration:
		return eventsSince || (created != 0 && p > created)
	}
	return true
}

func (b ProgressBinding) String() string {
	switch b {
	case BindAll:
		return "BindAll"
	case BindAfterRegistration:
		return "BindAfterRegistration"
	case BindNone:
		return "BindNone"
	}
	return fmt.Sprintf("ProgressBinding(%d)", int(b))
}

// Expectations are stronger than etcd's guarantees: watchspec recommends
// them, and the strict profile checks them (docs/SPEC.md §9.3). A correct
// etcd breaks them.
type Expectations struct {
	// MonotonicHeaders: the non-zero header revisions of one watch never
	// decrease. etcd re-sends a catch-up batch that met a full send buffer
	// with header minRev−1, below headers already delivered
	// (server/storage/mvcc/watchable_store.go moveVictims, 3.5–3.7).
	MonotonicHeaders bool
	// StartAfterCreated: a watch from revision 0 delivers nothing at or
	// below its created response's header revision (the API reference's
	// start_revision). etcd ≥ 3.5.22, 3.6.2 and 3.7 reads that header after
	// registering the watch (etcd PR #20229), and clientv3 resumes such a
	// watch at that revision inclusive (client/v3/watch.go serveSubstream).
	StartAfterCreated bool
}

// NewValidator returns a validator for one watch created with req, checking
// against h, with the zero [Config].
func NewValidator(h *kv.History, req Request) *Validator {
	return NewValidatorWith(h, req, Config{})
}

// NewValidatorWith returns a validator for one watch created with req,
// checking against h with what cfg says.
func NewValidatorWith(h *kv.History, req Request, cfg Config) *Validator {
	v := &Validator{h: h, req: req, cfg: cfg, checks: make(map[spec.Property]int)}
	if req.StartRevision > 0 {
		v.from, v.lo, v.next = req.StartRevision, req.StartRevision, req.StartRevision
	}
	return v
}

// Reregistered tells the validator that the watch was registered on the
// server again (clientv3 re-creates every watch of a stream after the stream
// broke): under [BindAfterRegistration], progress notifications up to the
// watch's next event may answer a request made before that.
func (v *Validator) Reregistered() { v.regCreated, v.regEvents = 0, false }

// Validate checks a whole stream at once; see [Validator].
func Validate(h *kv.History, req Request, resps []Response) []spec.Violation {
	v := NewValidator(h, req)
	var out []spec.Violation
	for _, r := range resps {
		out = append(out, v.Observe(r)...)
	}
	return out
}

// Checks returns how many times each property was checked so far.
func (v *Validator) Checks() map[spec.Property]int {
	c := make(map[spec.Property]int, len(v.checks))
	for p, n := range v.checks {
		c[p] = n
	}
	return c
}

// Ended reports whether the watch was cancelled.
func (v *Validator) Ended() bool { return v.ended }

// Observe checks the next response the client received and returns the
// violations it reveals.
func (v *Validator) Observe(r Response) []spec.Violation {
	v.out = nil
	v.seq++
	if v.ended {
		if v.endedByCompaction {
			v.fail(spec.CompactedCancel, revs(r.Revision), nil,
				"a response arrived after the watch was cancelled for compaction; nothing may follow a cancel")
		}
		return v.out
	}
	v.explained, v.inverted = false, nil
	if r.Created {
		v.onCreated(r)
	}
	if len(r.Events) > 0 {
		v.onEvents(r)
	}
	binds := r.IsProgressNotify() && v.binds(r.Revision)
	v.monotonicRevision(r, binds)
	switch {
	case r.CompactRevision != 0:
		v.compactedCancel(r)
	case r.Canceled:
		v.ended = true
	case r.IsProgressNotify():
		v.onProgress(r.Revision, binds)
	}
	for _, e := range r.Events {
		v.maxDelivered = max(v.maxDelivered, e.KV.ModRevision)
	}
	if len(r.Events) > 0 {
		v.regEvents = true
	}
	return v.out
}

// binds reports whether a progress notification at p is a claim about this
// watch (see [ProgressBinding]).
func (v *Validator) binds(p int64) bool { return v.cfg.Progress.Binds(v.regCreated, v.regEvents, p) }

func (v *Validator) fail(p spec.Property, revisions []int64, keys []string, format string, args ...any) {
	v.out = append(v.out, spec.Violation{Property: p, Revisions: revisions, Keys: keys, Message: fmt.Sprintf(format, args...)})
}

func revs(r ...int64) []int64 { return r }

func (v *Validator) onCreated(r Response) {
	if v.regCreated == 0 {
		v.regCreated = r.Revision
	}
	if v.created != 0 {
		return // a repeated created response (a client reconnect) changes nothing
	}
	v.created = r.Revision
	if v.req.StartRevision == 0 && v.from == 0 {
		v.from, v.next = r.Revision+1, r.Revision+1
		v.lo = v.startBound(r.Revision)
	}
	if r.Canceled {
		v.ended = true
	}
}

// startBound returns the lowest revision an event of a watch from revision
// 0 may have, given its created header R₀ (0: not seen) — docs/SPEC.md §1,
// from(w). etcd registers the watch at the member's revision m and, since
// 3.5.22, 3.6.2 and 3.7, reads R₀ after that (m ≤ R₀); clientv3 resumes a
// watch that received nothing at R₀ inclusive. So the stream starts at some
// revision in [min(m+1, R₀), R₀+1], and m ≥ Config.CommittedBefore.
func (v *Validator) startBound(created int64) int64 {
	b := v.cfg.CommittedBefore
	switch {
	case created != 0 && v.cfg.Expect.StartAfterCreated:
		return created + 1
	case created != 0 && b > 0:
		return min(b+1, created)
	case created != 0:
		return 1
	case b > 0:
		return b // R₀ ≥ b, and a resume at R₀ may deliver R₀ itself
	}
	return 1
}

// monotonicRevision decides §3.12 MonotonicRevision for one response: its
// header is at or above its events and every event delivered before it, and
// a progress notification that binds is at or above the ones before it.
// Under Expectations.MonotonicHeaders, no non-zero header goes back.
func (v *Validator) monotonicRevision(r Response, binds bool) {
	if r.Revision == 0 {
		return
	}
	v.checks[spec.MonotonicRevision]++
	defer func() { v.lastHeader = max(v.lastHeader, r.Revision) }()
	for _, e := range r.Events {
		if e.KV.ModRevision > r.Revision {
			v.fail(spec.MonotonicRevision, revs(e.KV.ModRevision, r.Revision), []string{e.KV.Key},
				"event at revision %d on %q arrived in a response whose header revision is %d", e.KV.ModRevision, e.KV.Key, r.Revision)
			return
		}
	}
	if v.explained {
		return
	}
	progress := r.IsProgressNotify()
	switch {
	case progress && !binds:
		// An answer computed before the watch was registered: no claim.
	case r.Revision < v.maxDelivered:
		what := "header revision"
		if progress {
			what = "progress notification at revision"
		}
		v.fail(spec.MonotonicRevision, revs(r.Revision, v.maxDelivered), nil,
			"%s %d follows an event at revision %d on the same watch; a header revision is never below an event delivered in or before its response (server/storage/mvcc/watcher.go, WatchResponse.Revision)",
			what, r.Revision, v.maxDelivered)
		return
	case progress && r.Revision < v.lastProgress:
		v.fail(spec.MonotonicRevision, revs(r.Revision, v.lastProgress), nil,
			"progress notification at revision %d follows a progress notification at revision %d on the same watch", r.Revision, v.lastProgress)
		return
	}
	if progress && binds {
		v.lastProgress = max(v.lastProgress, r.Revision)
	}
	if v.cfg.Expect.MonotonicHeaders && r.Revision < v.lastHeader && !(progress && !binds) {
		v.fail(spec.MonotonicRevision, revs(r.Revision, v.lastHeader), nil,
			"header revision %d follows header revision %d on the same watch (strict: etcd re-sends a parked catch-up batch with header minRev-1, server/storage/mvcc/watchable_store.go moveVictims)",
			r.Revision, v.lastHeader)
	}
}

// onEvents checks the events of one response, revision by revision.
func (v *Validator) onEvents(r Response) {
	evs := make([]kv.Event, 0, len(r.Events))
	for _, e := range r.Events {
		if v.filtered(e) {
			evs = append(evs, e)
		}
	}
	v.sortedInResponse(evs)
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].KV.ModRevision == evs[i].KV.ModRevision {
			j++
		}
		v.group(evs[i:j])
		i = j
	}
	if v.open.seq == v.seq {
		v.atomic()
	}
}

// sortedInResponse decides the part of §3.1 Ordered that one response
// shows on its own: its events are in revision order. If they are not, it
// reports the first inversion and sorts them (stably), so that the rest of
// the checks see the events the response carried and blame nothing else on
// the inversion.
func (v *Validator) sortedInResponse(evs []kv.Event) {
	byRevision := func(i, j int) bool { return evs[i].KV.ModRevision < evs[j].KV.ModRevision }
	if sort.SliceIsSorted(evs, byRevision) {
		return
	}
	reported := false
	highest := int64(0)
	v.inverted = make(map[eventID]bool)
	for i, e := range evs {
		if i > 0 && e.KV.ModRevision < highest {
			v.inverted[eventID{e.KV.ModRevision, e.KV.Key}] = true
			if !reported {
				reported = true
				v.fail(spec.Ordered, revs(e.KV.ModRevision, evs[i-1].KV.ModRevision), []string{e.KV.Key},
					"event at revision %d on %q follows an event at revision %d in the same response",
					e.KV.ModRevision, e.KV.Key, evs[i-1].KV.ModRevision)
			}
		}
		highest = max(highest, e.KV.ModRevision)
	}
	sort.SliceStable(evs, byRevision)
	v.explained = true
}

// filtered decides §3.7 Filtered for one event and reports whether it passes.
func (v *Validator) filtered(e kv.Event) bool {
	v.checks[spec.Filtered]++
	switch {
	case !v.req.InRange(e.KV.Key):
		v.fail(spec.Filtered, revs(e.KV.ModRevision), []string{e.KV.Key},
			"event on %q is outside the watched range %s", e.KV.Key, describeRange(v.req))
		return false
	case v.req.FiltersOut(e.Type):
		v.fail(spec.Filtered, revs(e.KV.ModRevision), []string{e.KV.Key},
			"%s event on %q delivered although the watch filters %s events out", e.Type, e.KV.Key, e.Type)
		return false
	}
	return true
}

// group checks the events of one revision delivered together in one response.
func (v *Validator) group(evs []kv.Event) {
	r := evs[0].KV.ModRevision
	if v.from == 0 {
		// Start 0 and no created response seen: the stream starts where it
		// starts, no lower than what was committed before it was requested.
		v.lo = v.startBound(0)
		v.from, v.next = max(r, v.lo), max(r, v.lo)
	}
	v.checks[spec.StartRevision] += len(evs)
	v.checks[spec.Ordered] += len(evs)
	switch {
	case r < v.lo:
		v.explained = true
		v.startRevision(r, evs)
		return
	case r < v.open.rev:
		v.ordered(r, evs)
		return
	case r == v.open.rev:
		for _, e := range evs {
			v.deliver(e)
		}
		return
	case r <= v.bookmark:
		v.bookmarkable(r, evs)
		return
	}
	v.atomic()
	v.reliable(r)
	if v.delivered == 0 && v.req.StartRevision == 0 && v.created != 0 && r <= v.created {
		v.startedEarly = true
	}
	c, _ := v.h.Commit(r)
	var expected []kv.Event
	for _, e := range c.Events {
		if v.req.Matches(e) {
			expected = append(expected, e)
		}
	}
	v.open = openRevision{rev: r, expected: expected, got: make(map[string]bool, len(evs)), maxIndex: -1, seq: v.seq}
	v.next = r + 1
	for _, e := range evs {
		v.deliver(e)
	}
}

// startRevision reports events below the lowest revision the watch may
// deliver (§3.10).
func (v *Validator) startRevision(r int64, evs []kv.Event) {
	if v.req.StartRevision == 0 && v.cfg.Expect.StartAfterCreated {
		cfg := v.cfg
		cfg.Expect.StartAfterCreated = false
		if lenient := (&Validator{cfg: cfg}).startBound(v.created); r >= lenient {
			v.fail(spec.StartRevision, revs(r, v.lo), keysOf(evs),
				"event at revision %d delivered to a watch from now created at revision %d (strict: etcd >= 3.5.22, 3.6.2 and 3.7 delivers a write applied while it registers the watch below the created header, etcd PR #20229, and clientv3 resumes such a watch at that header inclusive, client/v3/watch.go serveSubstream)",
				r, v.created)
			return
		}
	}
	if v.req.StartRevision > 0 || v.lo == v.from {
		v.fail(spec.StartRevision, revs(r, v.lo), keysOf(evs),
			"event at revision %d delivered to a watch whose first revision is %d", r, v.lo)
		return
	}
	v.fail(spec.StartRevision, revs(r, v.lo), keysOf(evs),
		"event at revision %d delivered to a watch from now that cannot start below revision %d (created at %d; revision %d was committed before it was requested)",
		r, v.lo, v.created, v.cfg.CommittedBefore)
}

// ordered reports events whose revision is below one already delivered
// (§3.1), unless they were already reported as skipped.
func (v *Validator) ordered(r int64, evs []kv.Event) {
	if late := v.notReported(r, evs); len(late) > 0 {
		v.fail(spec.Ordered, revs(r, v.open.rev), late,
			"event at revision %d delivered after an event at revision %d", r, v.open.rev)
	}
}

// bookmarkable reports events that arrive after a progress notification
// covering their revision (§3.6), unless they were already reported as
// missing (by that notification, or as skipped).
func (v *Validator) bookmarkable(r int64, evs []kv.Event) {
	if late := v.notReported(r, evs); len(late) > 0 {
		v.fail(spec.Bookmarkable, revs(r, v.bookmark), late,
			"event at revision %d delivered after a progress notification at revision %d", r, v.bookmark)
	}
}

// notReported marks the response as explained by a late event and returns
// the keys of the events at r not yet reported missing.
func (v *Validator) notReported(r int64, evs []kv.Event) []string {
	v.explained = true
	var keys []string
	for _, e := range evs {
		if !v.missing[eventID{r, e.KV.Key}] {
			keys = append(keys, e.KV.Key)
		}
	}
	return keys
}

// reported remembers skipped events, so that their late arrival is not
// reported a second time.
func (v *Validator) reported(evs []kv.Event) {
	if v.missing == nil {
		v.missing = make(map[eventID]bool)
	}
	for _, e := range evs {
		v.missing[eventID{e.KV.ModRevision, e.KV.Key}] = true
	}
}

// deliver accepts one event of the open revision.
func (v *Validator) deliver(e kv.Event) {
	o := &v.open
	key := e.KV.Key
	if !v.unique(key) {
		return
	}
	idx := -1
	for i, x := range o.expected {
		if x.KV.Key == key {
			idx = i
			break
		}
	}
	v.checks[spec.Reliable]++
	if idx < 0 {
		v.fail(spec.Reliable, revs(o.rev), []string{key},
			"event at revision %d on %q is not in the committed history", o.rev, key)
		return
	}
	o.got[key] = true
	v.delivered++
	if idx < o.maxIndex {
		v.fail(spec.Ordered, revs(o.rev), []string{key, o.expected[o.maxIndex].KV.Key},
			"events of revision %d delivered out of operation order: %q after %q", o.rev, key, o.expected[o.maxIndex].KV.Key)
	}
	o.maxIndex = max(o.maxIndex, idx)
	want := o.expected[idx]
	v.sameEvent(e, want)
	v.isCreate(e, want)
	v.prevKV(e, want)
}

// unique decides §3.2 Unique for one event of the open revision and reports
// whether it is new. (An event below the open revision is Ordered's business.)
func (v *Validator) unique(key string) bool {
	v.checks[spec.Unique]++
	if v.open.got[key] {
		v.explained = true
		if v.inverted[eventID{v.open.rev, key}] {
			return false // a replay already reported as out of order
		}
		v.fail(spec.Unique, revs(v.open.rev), []string{key}, "event at revision %d on %q delivered twice", v.open.rev, key)
		return false
	}
	return true
}

// sameEvent decides the content part of §3.3 Reliable: a delivered event is
// the one the store committed.
func (v *Validator) sameEvent(got, want kv.Event) {
	g, w := got.KV, want.KV
	if got.Type == kv.Put && want.Type == kv.Put {
		g.CreateRevision, w.CreateRevision = 0, 0 // IsCreate's business
	}
	if got.Type != want.Type || g != w {
		v.fail(spec.Reliable, revs(want.KV.ModRevision), []string{want.KV.Key},
			"event at revision %d on %q differs from the committed one: got %s, committed %s",
			want.KV.ModRevision, want.KV.Key, describeEvent(got), describeEvent(want))
	}
}

// isCreate decides §3.9 IsCreate for a PUT event.
func (v *Validator) isCreate(got, want kv.Event) {
	if got.Type != kv.Put || want.Type != kv.Put {
		return
	}
	v.checks[spec.IsCreate]++
	if got.KV.CreateRevision == want.KV.CreateRevision {
		return
	}
	existed := "existed"
	if want.PrevKV == nil {
		existed = "did not exist"
	}
	v.fail(spec.IsCreate, revs(want.KV.ModRevision), []string{want.KV.Key},
		"PUT at revision %d on %q has CreateRevision %d, but the key %s at revision %d (CreateRevision %d)",
		want.KV.ModRevision, want.KV.Key, got.KV.CreateRevision, existed, want.KV.ModRevision-1, want.KV.CreateRevision)
}

// prevKV decides §3.8 PrevKV for one event.
func (v *Validator) prevKV(got, want kv.Event) {
	v.checks[spec.PrevKV]++
	r, key := want.KV.ModRevision, want.KV.Key
	switch {
	case !v.req.PrevKV && got.PrevKV != nil:
		v.fail(spec.PrevKV, revs(r), []string{key}, "event at revision %d on %q carries a PrevKV the watch did not ask for", r, key)
	case !v.req.PrevKV:
	case got.PrevKV == nil && want.PrevKV != nil && r-1 >= v.h.CompactRevision():
		v.fail(spec.PrevKV, revs(r), []string{key},
			"event at revision %d on %q lacks its PrevKV, though revision %d is not compacted", r, key, r-1)
	case got.PrevKV != nil && want.PrevKV == nil:
		v.fail(spec.PrevKV, revs(r), []string{key},
			"event at revision %d on %q carries a PrevKV, but the key did not exist at revision %d", r, key, r-1)
	case got.PrevKV != nil && *got.PrevKV != *want.PrevKV:
		v.fail(spec.PrevKV, revs(r, want.PrevKV.ModRevision), []string{key},
			"event at revision %d on %q carries PrevKV %s, but the key at revision %d was %s",
			r, key, describeKV(*got.PrevKV), r-1, describeKV(*want.PrevKV))
	}
}

// atomic decides §3.4 Atomic for the open revision, once: all its matching
// events must have come in the response that opened it.
func (v *Validator) atomic() {
	o := &v.open
	if o.rev == 0 || o.checked {
		return
	}
	o.checked = true
	v.checks[spec.Atomic]++
	var missing []string
	for _, e := range o.expected {
		if !o.got[e.KV.Key] {
			missing = append(missing, e.KV.Key)
		}
	}
	if len(missing) > 0 {
		v.fail(spec.Atomic, revs(o.rev), missing,
			"revision %d was delivered without %d of its %d matching events in the same response",
			o.rev, len(missing), len(o.expected))
	}
}

// reliable checks that no matching event between the last accounted-for
// revision and r was skipped (§3.3), naming the skip by where it happened.
func (v *Validator) reliable(r int64) {
	v.checks[spec.Reliable]++
	atStart := v.delivered == 0 && v.bookmark == 0
	historical := atStart && v.req.StartRevision > 0 && (v.created == 0 || v.req.StartRevision <= v.created)
	if historical {
		v.checks[spec.Resumable]++
	}
	skipped := v.skipped(v.next, r-1)
	if len(skipped) == 0 {
		return
	}
	v.reported(skipped)
	first := skipped[0]
	what := fmt.Sprintf("%d matching events in revisions %d..%d (first: %s) were skipped before the event at revision %d",
		len(skipped), first.KV.ModRevision, skipped[len(skipped)-1].KV.ModRevision, describeEvent(first), r)
	switch {
	case v.compactedSkip(skipped, what):
	case historical:
		v.resumable(skipped, what)
	case atStart:
		v.fail(spec.StartRevision, revisionsOf(skipped), keysOf(skipped),
			"the first event is not the first matching event at or after the start revision %d: %s", v.from, what)
	case v.startedEarly && skipped[0].KV.ModRevision <= v.created:
		v.fail(spec.StartRevision, revisionsOf(skipped), keysOf(skipped),
			"a watch from now created at %d started below %d, so it owes every matching event after its first: %s", v.created, v.created+1, what)
	default:
		v.fail(spec.Reliable, revisionsOf(skipped), keysOf(skipped), "%s", what)
	}
}

// resumable reports a historical watch whose first event is not the first
// matching event at or after its start revision (§3.5).
func (v *Validator) resumable(skipped []kv.Event, what string) {
	v.fail(spec.Resumable, revisionsOf(skipped), keysOf(skipped),
		"a watch from revision %d must first deliver the first matching event at or after it: %s", v.req.StartRevision, what)
}

// compactedSkip reports skipped events as a silent skip over compacted
// history (§3.11) when some of them lie below the compact revision, and
// reports whether it did. It is the other half of compactedCancel.
func (v *Validator) compactedSkip(skipped []kv.Event, what string) bool {
	c := v.h.CompactRevision()
	if skipped[0].KV.ModRevision >= c {
		return false
	}
	v.checks[spec.CompactedCancel]++
	v.fail(spec.CompactedCancel, append(revisionsOf(skipped), c), keysOf(skipped),
		"%s; they lie below the compact revision %d, so the watch should have been cancelled with CompactRevision, not advanced", what, c)
	return true
}

// skipped returns the matching events committed in [from, to].
func (v *Validator) skipped(from, to int64) []kv.Event {
	var out []kv.Event
	for _, c := range v.h.Between(from, to) {
		for _, e := range c.Events {
			if v.req.Matches(e) {
				out = append(out, e)
			}
		}
	}
	return out
}

// onProgress checks a progress notification at revision p; binds says
// whether it is a claim about this watch (see [ProgressBinding]).
func (v *Validator) onProgress(p int64, binds bool) {
	v.atomic()
	v.checks[spec.Bookmarkable]++
	if head := v.h.Head(); p > head {
		v.fail(spec.Bookmarkable, revs(p, head), nil,
			"progress notification at revision %d, beyond the last committed revision %d", p, head)
	}
	if !binds {
		return
	}
	v.checks[spec.StartRevision]++
	if s := v.req.StartRevision; s > 0 && p < s-1 {
		v.fail(spec.StartRevision, revs(p, s), nil,
			"progress notification at revision %d on a watch that starts at revision %d", p, s)
		return
	}
	if v.from == 0 {
		// Start 0 and no created response seen: the stream starts here.
		v.lo = v.startBound(0)
		v.from, v.next, v.bookmark = p+1, p+1, p
		return
	}
	if skipped := v.skipped(v.next, p); len(skipped) > 0 {
		what := fmt.Sprintf("progress notification at revision %d, but %d matching events in revisions %d..%d (first: %s) were not delivered",
			p, len(skipped), skipped[0].KV.ModRevision, skipped[len(skipped)-1].KV.ModRevision, describeEvent(skipped[0]))
		if !v.compactedSkip(skipped, what) {
			v.fail(spec.Bookmarkable, append(revs(p), revisionsOf(skipped)...), keysOf(skipped), "%s", what)
		}
		v.reported(skipped)
	}
	v.bookmark = max(v.bookmark, p)
	v.next = max(v.next, p+1)
}

// needed returns the lowest revision the watch may still have needed: the
// next one not accounted for, or — for a watch from revision 0 that has
// received nothing yet — the lowest revision its stream may start at.
func (v *Validator) needed() int64 {
	if v.delivered == 0 && v.bookmark == 0 && v.lo > 0 {
		return min(v.next, v.lo)
	}
	return v.next
}

// compactedCancel decides §3.11 CompactedCancel for a cancel that carries
// CompactRevision: the compaction must be real, and the watch must have
// needed history below it.
func (v *Validator) compactedCancel(r Response) {
	v.checks[spec.CompactedCancel]++
	v.atomic()
	cr := r.CompactRevision
	switch {
	case len(r.Events) > 0:
		v.fail(spec.CompactedCancel, revs(cr), nil, "a compaction cancel carries %d events", len(r.Events))
	case !v.h.WasCompactedAt(cr):
		v.fail(spec.CompactedCancel, revs(cr, v.h.CompactRevision()), nil,
			"cancelled with CompactRevision %d, but the store was never compacted at %d (latest compaction: %d)",
			cr, cr, v.h.CompactRevision())
	case v.from != 0 && v.needed() >= cr:
		v.fail(spec.CompactedCancel, revs(cr, v.needed()), nil,
			"cancelled with CompactRevision %d, but the watch needed only revisions from %d on, which compaction kept",
			cr, v.needed())
	}
	v.ended, v.endedByCompaction = true, true
}
