package mutate

import (
	"fmt"
	"math"
	"math/rand"
	"slices"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// The semantic operators on etcd watch streams (docs/SPEC.md §3). Each
// mutates one clean watch of the subject (no base violation names it) and
// derives the expected property from the stream and the committed history.

func pickOne[T any](r *rand.Rand, xs []T) T { return xs[r.Intn(len(xs))] }

// cleanWatch picks a clean watch, or nil.
func cleanWatch(m *Mutant, r *rand.Rand) *watchInfo {
	cw := m.Subject.cleanWatches()
	if len(cw) == 0 {
		return nil
	}
	return m.Subject.watch(pickOne(r, cw))
}

// matchingBelowFrom returns the revisions in [lo, hi] with matching events
// (hi below from(w), which the watch's own index starts at), and those events.
func (wi *watchInfo) matchingBelowFrom(lo, hi int64) ([]int64, map[int64][]kv.Event) {
	var revs []int64
	evs := map[int64][]kv.Event{}
	for _, c := range wi.h.Between(lo, hi) {
		for _, e := range c.Events {
			if wi.w.Request.Matches(e) {
				evs[c.Revision] = append(evs[c.Revision], e)
			}
		}
		if len(evs[c.Revision]) > 0 {
			revs = append(revs, c.Revision)
		}
	}
	return revs, evs
}

// firstEvent returns the revision of the first event the watch delivered,
// or MaxInt64.
func (wi *watchInfo) firstEvent() int64 {
	for _, resp := range wi.w.Responses {
		if evs := resp.Response.Events; len(evs) > 0 {
			return evs[0].KV.ModRevision
		}
	}
	return math.MaxInt64
}

// insertEvents inserts, at index j of the watch's stream, a response with
// the events evs and header revision hdr, received at time at.
func (m *Mutant) insertEvents(wi *watchInfo, j int, at, hdr int64, evs []kv.Event) {
	resp := traces.WatchResponse{Time: at, Response: watch.Response{Revision: hdr, Events: evs}}
	m.setResponses(wi, slices.Insert(slices.Clone(m.responses(wi)), j, resp))
}

// strictWatch picks a watch that no violation names under the strict
// profile either, or nil (the subject cannot be judged strictly).
func strictWatch(m *Mutant, r *rand.Rand) *watchInfo {
	clean := m.Subject.cleanWatches()
	if len(clean) == 0 {
		return nil
	}
	sb := m.Subject.strict()
	if sb == nil {
		return nil
	}
	var cw []int
	for _, i := range clean {
		if sb.watchClean[i] {
			cw = append(cw, i)
		}
	}
	if len(cw) == 0 {
		return nil
	}
	return m.Subject.watch(pickOne(r, cw))
}

// respAt returns the mutant's copy of response j of the watch, to change in place.
func (m *Mutant) respAt(wi *watchInfo, j int) *traces.WatchResponse {
	return &m.tr().Watches[wi.i].Responses[j]
}

// setResponses replaces the mutant's responses of the watch.
func (m *Mutant) setResponses(wi *watchInfo, rs []traces.WatchResponse) {
	m.tr().Watches[wi.i].Responses = rs
}

func (m *Mutant) responses(wi *watchInfo) []traces.WatchResponse {
	return m.tr().Watches[wi.i].Responses
}

func where(wi *watchInfo, j int) string {
	w := wi.w
	if j >= len(w.Responses) {
		return fmt.Sprintf("watch %d of client %d (line %d), after its last response", w.ID, w.Client, w.Line)
	}
	return fmt.Sprintf("watch %d of client %d (line %d), response at line %d", w.ID, w.Client, w.Line, w.Responses[j].Line)
}

// reveal finds the first response after j that shows revisions up to hi
// missing: an event response, or a progress notification at hi or above
// that binds the watch (docs/SPEC.md §3.6) in the mutant, whose stream has
// removed events fewer before it. A cancel, or a binding progress
// notification below hi, ends the search; one that binds nothing is passed
// over (the checker holds it only to the head).
func reveal(wi *watchInfo, j int, hi int64, removed int) (k int, byProgress bool, ok bool) {
	rs := wi.w.Responses
	for k = j + 1; k < len(rs); k++ {
		resp := rs[k].Response
		switch {
		case resp.Canceled:
			return 0, false, false
		case len(resp.Events) > 0:
			return k, false, true
		case resp.IsProgressNotify() && wi.bindsAt(k, wi.before[k].delivered-removed, resp.Revision):
			return k, true, resp.Revision >= hi
		}
	}
	return 0, false, false
}

func fresh(r *rand.Rand) string { return fmt.Sprintf("mutant-%08x", r.Uint32()) }

// committed returns the committed event of H on key at rev.
func (s *Subject) committed(key string, rev int64) (kv.Event, bool) {
	c, ok := s.H.Commit(rev)
	if !ok {
		return kv.Event{}, false
	}
	for _, e := range c.Events {
		if e.KV.Key == key {
			return e, true
		}
	}
	return kv.Event{}, false
}

var watchOperators = []*Operator{
	{
		Name: "watch-drop-response", Kind: Semantic,
		Doc: "drops a response with events that a later event or progress notification shows missing; " +
			"the name follows §3's rules for skipped events (Reliable, Bookmarkable, Resumable, StartRevision, CompactedCancel)",
		Properties: []spec.Property{spec.Reliable, spec.Bookmarkable, spec.Resumable, spec.StartRevision, spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || len(wi.eventResponses()) == 0 {
				return false
			}
			j := pickOne(r, wi.eventResponses())
			evs := wi.w.Responses[j].Response.Events
			revs := revisionsOf(evs)
			k, byProgress, ok := reveal(wi, j, revs[len(revs)-1], len(evs))
			if !ok {
				return false
			}
			m.Expect = m.Subject.skipName(wi, wi.before[j].delivered == 0, wi.w.Responses[k].Time, revs, byProgress)
			if m.Expect == nil {
				return false
			}
			m.setResponses(wi, slices.Delete(slices.Clone(m.responses(wi)), j, j+1))
			m.whatf("%s: dropped (revisions %v); the response at line %d reveals it", where(wi, j), revs, wi.w.Responses[k].Line)
			return true
		},
	},
	{
		Name: "watch-resume-skips-first", Kind: Semantic,
		Doc: "drops the first response with events of a watch from a past revision s ≤ R₀, revealed by the next " +
			"event: the first delivered event is not the first matching one at or after s (§3.5 Resumable; the " +
			"shape of etcd#18089 and #19179), or CompactedCancel when what it skips lies below the compaction",
		Properties: []spec.Property{spec.Resumable, spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			var ws []int
			for _, i := range m.Subject.cleanWatches() {
				wi := m.Subject.watch(i)
				if s := wi.w.Request.StartRevision; wi.created >= 0 && s > 0 && s <= wi.r0 {
					ws = append(ws, i)
				}
			}
			if len(ws) == 0 {
				return false
			}
			wi := m.Subject.watch(pickOne(r, ws))
			rs := wi.eventResponses()
			if len(rs) < 2 {
				return false
			}
			j := rs[0]
			// Nothing before it may claim the watch's progress: a binding
			// notification there would make the skip Bookmarkable's.
			if wi.before[j].bookmark > 0 {
				return false
			}
			evs := wi.w.Responses[j].Response.Events
			revs := revisionsOf(evs)
			k, byProgress, ok := reveal(wi, j, revs[len(revs)-1], len(evs))
			if !ok || byProgress {
				return false
			}
			m.Expect = m.Subject.skipName(wi, true, wi.w.Responses[k].Time, revs, false)
			if m.Expect == nil {
				return false
			}
			m.setResponses(wi, slices.Delete(slices.Clone(m.responses(wi)), j, j+1))
			m.whatf("%s: the first events (revisions %v) of a watch from %d dropped; the response at line %d reveals it",
				where(wi, j), revs, wi.w.Request.StartRevision, wi.w.Responses[k].Line)
			return true
		},
	},
	{
		Name: "watch-drop-event-of-revision", Kind: Semantic,
		Doc:        "drops one event of a revision whose other events stay in the response: the revision is not whole (§3.4 Atomic)",
		Properties: []spec.Property{spec.Atomic},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			j, x, ok := multiEventSite(wi, r)
			if !ok {
				return false
			}
			evs := m.events(wi.i, j)
			e := evs[x]
			m.respAt(wi, j).Response.Events = slices.Delete(evs, x, x+1)
			m.Expect = one(spec.Atomic)
			m.whatf("%s: dropped the event on %q of revision %d, whose other events stay", where(wi, j), e.KV.Key, e.KV.ModRevision)
			return true
		},
	},
	{
		Name: "watch-duplicate-response", Kind: Semantic,
		Doc: "sends a response with events twice in a row (§3.2 Unique; etcd#17247); when it holds several " +
			"revisions, those below its last come again below an event already delivered, which §3 names Ordered",
		Properties: []spec.Property{spec.Unique, spec.Ordered},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || len(wi.eventResponses()) == 0 {
				return false
			}
			j := pickOne(r, wi.eventResponses())
			rs := m.responses(wi)
			m.setResponses(wi, slices.Insert(slices.Clone(rs), j+1, rs[j]))
			m.Expect = one(spec.Unique)
			if revs := revisionsOf(rs[j].Response.Events); len(revs) > 1 {
				// Its events below its last revision come again below an
				// event already delivered: §3 names those Ordered first.
				m.Expect = one(spec.Ordered, spec.Unique)
			}
			m.whatf("%s: sent twice", where(wi, j))
			return true
		},
	},
	{
		Name: "watch-duplicate-event", Kind: Semantic,
		Doc:        "repeats one event right after itself in its response (§3.2 Unique)",
		Properties: []spec.Property{spec.Unique},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || len(wi.eventResponses()) == 0 {
				return false
			}
			j := pickOne(r, wi.eventResponses())
			evs := m.events(wi.i, j)
			x := r.Intn(len(evs))
			m.respAt(wi, j).Response.Events = slices.Insert(evs, x+1, evs[x])
			m.Expect = one(spec.Unique)
			m.whatf("%s: the event on %q at revision %d repeated", where(wi, j), evs[x].KV.Key, evs[x].KV.ModRevision)
			return true
		},
	},
	{
		Name: "watch-reorder-within-revision", Kind: Semantic,
		Doc:        "swaps two events of one revision: not in the order of the revision's operations (§3.1 Ordered)",
		Properties: []spec.Property{spec.Ordered},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			j, x, ok := multiEventSite(wi, r)
			if !ok {
				return false
			}
			evs := m.events(wi.i, j)
			y := x + 1
			if y >= len(evs) || evs[y].KV.ModRevision != evs[x].KV.ModRevision {
				y = x - 1
			}
			evs[x], evs[y] = evs[y], evs[x]
			m.Expect = one(spec.Ordered)
			m.whatf("%s: events on %q and %q of revision %d swapped", where(wi, j), evs[x].KV.Key, evs[y].KV.Key, evs[x].KV.ModRevision)
			return true
		},
	},
	{
		Name: "watch-reorder-revisions-in-response", Kind: Semantic,
		Doc:        "puts a later revision's events before an earlier one's in one response (§3.1 Ordered)",
		Properties: []spec.Property{spec.Ordered},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			var sites []int
			for _, j := range wi.eventResponses() {
				if len(revisionsOf(wi.w.Responses[j].Response.Events)) >= 2 {
					sites = append(sites, j)
				}
			}
			if len(sites) == 0 {
				return false
			}
			j := pickOne(r, sites)
			evs := m.events(wi.i, j)
			revs := revisionsOf(evs)
			a := r.Intn(len(revs) - 1)
			var earlier, later []kv.Event
			start := -1
			for x, e := range evs {
				switch e.KV.ModRevision {
				case revs[a]:
					if start < 0 {
						start = x
					}
					earlier = append(earlier, e)
				case revs[a+1]:
					later = append(later, e)
				}
			}
			out := append(slices.Clone(evs[:start]), later...)
			out = append(out, earlier...)
			out = append(out, evs[start+len(earlier)+len(later):]...)
			m.respAt(wi, j).Response.Events = out
			m.Expect = one(spec.Ordered)
			m.whatf("%s: revision %d's events put before revision %d's", where(wi, j), revs[a+1], revs[a])
			return true
		},
	},
	{
		Name: "watch-swap-responses", Kind: Semantic,
		Doc: "swaps two consecutive responses with events: the later revisions come first, so the earlier ones are " +
			"first skipped, then late. §3 names the skip (an event reported skipped that arrives after all is not " +
			"reported again); Ordered describes it as well",
		Properties: []spec.Property{spec.Ordered, spec.Reliable, spec.Resumable, spec.StartRevision, spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			var sites []int
			rs := wi.w.Responses
			for _, j := range wi.eventResponses() {
				if j+1 < len(rs) && len(rs[j+1].Response.Events) > 0 {
					sites = append(sites, j)
				}
			}
			if len(sites) == 0 {
				return false
			}
			j := pickOne(r, sites)
			revs := revisionsOf(rs[j].Response.Events)
			skip := m.Subject.skipName(wi, wi.before[j].delivered == 0, rs[j].Time, revs, false)
			if skip == nil {
				return false
			}
			m.Expect = append(skip, []spec.Property{spec.Ordered})
			mr := m.responses(wi)
			mr[j].Response, mr[j+1].Response = rs[j+1].Response, rs[j].Response
			m.whatf("%s and the next: contents swapped (times kept)", where(wi, j))
			return true
		},
	},
	{
		Name: "watch-split-revision", Kind: Semantic,
		Doc:        "splits one revision's events over two responses (§3.4 Atomic)",
		Properties: []spec.Property{spec.Atomic},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			j, x, ok := multiEventSite(wi, r)
			if !ok {
				return false
			}
			evs := wi.w.Responses[j].Response.Events
			// Cut after x, inside x's revision (x+1 has the same revision).
			if x+1 >= len(evs) || evs[x+1].KV.ModRevision != evs[x].KV.ModRevision {
				x--
			}
			first, second := m.responses(wi)[j], m.responses(wi)[j]
			first.Response.Events = slices.Clone(evs[:x+1])
			second.Response.Events = slices.Clone(evs[x+1:])
			rs := slices.Clone(m.responses(wi))
			rs[j] = first
			m.setResponses(wi, slices.Insert(rs, j+1, second))
			m.Expect = one(spec.Atomic)
			m.whatf("%s: split after the event on %q, inside revision %d", where(wi, j), evs[x].KV.Key, evs[x].KV.ModRevision)
			return true
		},
	},
	{
		Name: "watch-progress-before-events", Kind: Semantic,
		Doc: "moves a progress notification before responses whose events it covers (§3.6 Bookmarkable; etcd#15220); " +
			"it then reveals them missing, so §3's skip rules name it",
		Properties: []spec.Property{spec.Bookmarkable, spec.CompactedCancel, spec.Resumable, spec.StartRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			rs := wi.w.Responses
			var ps []int
			for p, resp := range rs {
				if resp.Response.IsProgressNotify() && p > 0 && len(rs[p-1].Response.Events) > 0 && p-1 != wi.created {
					ps = append(ps, p)
				}
			}
			if len(ps) == 0 {
				return false
			}
			p := pickOne(r, ps)
			R := rs[p].Response.Revision
			// Move it before t, some response with events in a run that ends at p.
			lo := p - 1
			for lo-1 > wi.created && len(rs[lo-1].Response.Events) > 0 {
				lo--
			}
			t := lo + r.Intn(p-lo)
			if !wi.bindsAt(t, wi.before[t].delivered, R) {
				return false // there it claims nothing about the watch (§3.6)
			}
			skipped := wi.matchingIn(wi.before[t].next, R)
			m.Expect = m.Subject.skipName(wi, wi.before[t].delivered == 0, rs[t].Time, skipped, true)
			if m.Expect == nil {
				return false
			}
			mr := m.responses(wi)
			moved := rs[p].Response
			for x := p; x > t; x-- {
				mr[x].Response = rs[x-1].Response
			}
			mr[t].Response = moved
			m.whatf("%s: the progress notification at %d moved before the response at line %d (times kept)", where(wi, p), R, rs[t].Line)
			return true
		},
	},
	{
		Name: "watch-progress-ahead-of-events", Kind: Semantic,
		Doc: "inserts a progress notification covering the next response's events before it (§3.6 Bookmarkable; the " +
			"shape of etcd#15220); it reveals them missing, so §3's skip rules name it",
		Properties: []spec.Property{spec.Bookmarkable, spec.CompactedCancel, spec.Resumable, spec.StartRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || len(wi.eventResponses()) == 0 {
				return false
			}
			j := pickOne(r, wi.eventResponses())
			rs := wi.w.Responses
			revs := revisionsOf(rs[j].Response.Events)
			// Not below an event delivered or a binding notification
			// before it (§3.12), nor above one after it: every binding
			// notification after j is at or above j's events.
			st := wi.before[j]
			R := max(revs[len(revs)-1], st.maxDelivered, st.bookmark)
			if s := wi.w.Request.StartRevision; R < s-1 || !wi.bindsAt(j, st.delivered, R) {
				return false
			}
			skipped := wi.matchingIn(wi.before[j].next, R)
			m.Expect = m.Subject.skipName(wi, wi.before[j].delivered == 0, rs[j].Time, skipped, true)
			if m.Expect == nil {
				return false
			}
			p := traces.WatchResponse{Time: rs[j].Time, Response: watch.Response{Revision: R}}
			m.setResponses(wi, slices.Insert(slices.Clone(m.responses(wi)), j, p))
			m.whatf("%s: a progress notification at %d inserted before it", where(wi, j), R)
			return true
		},
	},
	{
		Name: "watch-progress-beyond-head", Kind: Semantic,
		Doc:        "appends a progress notification at a revision no write ever reached (§3.6 Bookmarkable: R ≤ head(H))",
		Properties: []spec.Property{spec.Bookmarkable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			rs := wi.w.Responses
			n := len(rs)
			end := wi.before[n]
			if end.ended {
				return false
			}
			next := end.next
			if next == 0 { // no created response, from now: what follows the last event
				if end.delivered == 0 {
					next = m.Subject.head() + 1
				} else {
					next = end.lastRev + 1
				}
			}
			R := m.Subject.head() + 1 + int64(r.Intn(5))
			// Beyond the head it is wrong whether or not it binds the watch;
			// when it binds, it also claims every matching event up to R
			// delivered, and must not be below the start (§3.10).
			if wi.bindsAt(n, end.delivered, R) {
				if s := wi.w.Request.StartRevision; s > 0 && R < s-1 {
					return false
				}
				if skipped := wi.matchingIn(next, m.Subject.head()); len(skipped) > 0 {
					// It also reveals them missing: the same name, or another fault.
					if n == 0 {
						return false
					}
					skip := m.Subject.skipName(wi, end.delivered == 0, rs[n-1].Time, skipped, true)
					if !slices.EqualFunc(skip, one(spec.Bookmarkable), slices.Equal) {
						return false
					}
				}
			}
			t := wi.w.Time
			if n > 0 {
				t = rs[n-1].Time
			}
			m.setResponses(wi, append(slices.Clone(m.responses(wi)), traces.WatchResponse{Time: t, Response: watch.Response{Revision: R}}))
			m.Expect = one(spec.Bookmarkable)
			if wi.created < 0 {
				m.tag("no-created")
			}
			if end.delivered == 0 && end.bookmark == 0 {
				m.tag("first-progress")
			}
			m.whatf("%s: a progress notification at %d appended; the head is %d", where(wi, n), R, m.Subject.head())
			return true
		},
	},
	{
		Name: "watch-lower-event-header", Kind: Semantic,
		Doc:        "gives a response with events a header revision below its first event (§3.12 MonotonicRevision)",
		Properties: []spec.Property{spec.MonotonicRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			var sites []int
			for _, j := range wi.eventResponses() {
				if wi.w.Responses[j].Response.Events[0].KV.ModRevision >= 2 {
					sites = append(sites, j)
				}
			}
			if len(sites) == 0 {
				return false
			}
			j := pickOne(r, sites)
			low := wi.w.Responses[j].Response.Events[0].KV.ModRevision - 1
			h := low - int64(r.Intn(int(min(low, 3))))
			m.respAt(wi, j).Response.Revision = h
			m.Expect = one(spec.MonotonicRevision)
			m.whatf("%s: header revision %d, below its first event at %d", where(wi, j), h, low+1)
			return true
		},
	},
	{
		Name: "watch-lower-progress", Kind: Semantic,
		Doc: "lowers a progress notification that binds the watch (§3.6) below an event delivered before it or " +
			"below an earlier binding notification (§3.12 MonotonicRevision), keeping it binding and not below the start",
		Properties: []spec.Property{spec.MonotonicRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil {
				return false
			}
			lo := max(int64(1), wi.w.Request.StartRevision-1)
			var ps []int
			for p, resp := range wi.w.Responses {
				st := wi.before[p]
				if resp.Response.IsProgressNotify() && max(st.maxDelivered, st.bookmark)-1 >= lo {
					ps = append(ps, p)
				}
			}
			if len(ps) == 0 {
				return false
			}
			p := pickOne(r, ps)
			st := wi.before[p]
			bound := max(st.maxDelivered, st.bookmark)
			R := lo + r.Int63n(bound-lo)
			if !wi.bindsAt(p, st.delivered, R) {
				return false // a notification that binds nothing may go back (§3.6)
			}
			m.respAt(wi, p).Response.Revision = R
			m.Expect = one(spec.MonotonicRevision)
			what := "the event delivered at"
			if st.bookmark > st.maxDelivered {
				what = "the earlier progress notification at"
			}
			m.whatf("%s: progress notification at %d, below %s %d", where(wi, p), R, what, bound)
			return true
		},
	},
	{
		Name: "watch-lower-header-strict", Kind: Strict,
		Doc: "lowers a response's header revision below an earlier header of the watch, but not below an event " +
			"delivered in or before it nor (a binding progress notification) below an earlier binding one or the " +
			"start: §3.12's default allows it (etcd's victim re-sends, moveVictims), the strict profile's " +
			"MonotonicHeaders forbids it (§9.3)",
		Properties: []spec.Property{spec.MonotonicRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := strictWatch(m, r)
			if wi == nil {
				return false
			}
			type site struct {
				j      int
				lo, hi int64
			}
			var sites []site
			for j, resp := range wi.w.Responses {
				rp := resp.Response
				st := wi.before[j]
				if rp.Created || rp.Canceled || rp.CompactRevision != 0 || rp.Revision == 0 || resp.RevisionUnknown {
					continue
				}
				lo := max(st.maxDelivered, int64(1))
				for _, e := range rp.Events {
					lo = max(lo, e.KV.ModRevision)
				}
				if rp.IsProgressNotify() {
					lo = max(lo, st.bookmark, wi.w.Request.StartRevision-1)
				}
				if hi := min(st.header, rp.Revision) - 1; lo <= hi {
					sites = append(sites, site{j, lo, hi})
				}
			}
			if len(sites) == 0 {
				return false
			}
			st := pickOne(r, sites)
			h := st.lo + r.Int63n(st.hi-st.lo+1)
			resp := wi.w.Responses[st.j].Response
			if resp.IsProgressNotify() && !wi.bindsAt(st.j, wi.before[st.j].delivered, h) {
				return false // an answer that binds nothing is held to nothing, even strictly
			}
			m.respAt(wi, st.j).Response.Revision = h
			m.Expect = one(spec.MonotonicRevision)
			m.whatf("%s: header revision %d instead of %d, below the earlier header %d (not below any event delivered)", where(wi, st.j), h, resp.Revision, wi.before[st.j].header)
			return true
		},
	},
	{
		Name: "watch-event-outside-range", Kind: Semantic,
		Doc:        "delivers an event of a key outside the watched range: a committed one of the window when there is one (§3.7 Filtered)",
		Properties: []spec.Property{spec.Filtered},
		apply: func(m *Mutant, r *rand.Rand) bool {
			return insertForeign(m, r, func(wi *watchInfo, e kv.Event) bool { return !wi.w.Request.InRange(e.KV.Key) }, true)
		},
	},
	{
		Name: "watch-event-filtered-type", Kind: Semantic,
		Doc:        "delivers a committed event of the type a NOPUT or NODELETE filter drops (§3.7 Filtered)",
		Properties: []spec.Property{spec.Filtered},
		apply: func(m *Mutant, r *rand.Rand) bool {
			// Only a watch with a filter has events to break it with.
			var ws []int
			for _, i := range m.Subject.cleanWatches() {
				if req := m.Subject.Trace.Watches[i].Request; req.NoPut || req.NoDelete {
					ws = append(ws, i)
				}
			}
			if len(ws) == 0 {
				return false
			}
			return insertForeignInto(m, r, m.Subject.watch(pickOne(r, ws)), func(wi *watchInfo, e kv.Event) bool {
				return wi.w.Request.InRange(e.KV.Key) && wi.w.Request.FiltersOut(e.Type)
			}, false)
		},
	},
	{
		Name: "watch-corrupt-prevkv", Kind: Semantic,
		Doc:        "changes one field of an event's previous key-value (§3.8 PrevKV)",
		Properties: []spec.Property{spec.PrevKV},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi, j, x, ok := eventSite(m, r, func(wi *watchInfo, e kv.Event) bool { return e.PrevKV != nil })
			if !ok {
				return false
			}
			evs := m.events(wi.i, j)
			p := *evs[x].PrevKV
			field := corruptKV(&p, r, m.Subject.allows(linearizability.UntrackedVersions))
			evs[x].PrevKV = &p
			m.Expect = one(spec.PrevKV)
			m.whatf("%s: the previous key-value of the event on %q at %d: %s", where(wi, j), evs[x].KV.Key, evs[x].KV.ModRevision, field)
			return true
		},
	},
	{
		Name: "watch-drop-prevkv", Kind: Semantic,
		Doc:        "leaves out a previous key-value the watch asked for, whose state no compaction can have removed (§3.8 PrevKV)",
		Properties: []spec.Property{spec.PrevKV},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi, j, x, ok := eventSite(m, r, func(wi *watchInfo, e kv.Event) bool { return e.PrevKV != nil })
			if !ok {
				return false
			}
			e := wi.w.Responses[j].Response.Events[x]
			if e.KV.ModRevision-1 < m.Subject.anyCompact(wi.w.Responses[j].Time) {
				return false
			}
			evs := m.events(wi.i, j)
			evs[x].PrevKV = nil
			m.Expect = one(spec.PrevKV)
			m.whatf("%s: the previous key-value of the event on %q at %d left out", where(wi, j), e.KV.Key, e.KV.ModRevision)
			return true
		},
	},
	{
		Name: "watch-add-prevkv", Kind: Semantic,
		Doc:        "attaches the true previous key-value to an event of a watch that did not ask for it (§3.8 PrevKV; kine-4)",
		Properties: []spec.Property{spec.PrevKV},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi, j, x, ok := eventSite(m, r, func(wi *watchInfo, e kv.Event) bool {
				if wi.w.Request.PrevKV {
					return false
				}
				c, ok := wi.committed(e)
				return ok && c.PrevKV != nil
			})
			if !ok {
				return false
			}
			evs := m.events(wi.i, j)
			c, _ := wi.committed(evs[x])
			p := *c.PrevKV
			evs[x].PrevKV = &p
			m.Expect = one(spec.PrevKV)
			m.whatf("%s: the event on %q at %d carries its previous key-value, not asked for", where(wi, j), evs[x].KV.Key, evs[x].KV.ModRevision)
			return true
		},
	},
	{
		Name: "watch-corrupt-value", Kind: Semantic,
		Doc:        "gives an event a value no write wrote (a PUT's value, or a value on a DELETE's tombstone) (§3.3 Reliable)",
		Properties: []spec.Property{spec.Reliable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi, j, x, ok := eventSite(m, r, func(*watchInfo, kv.Event) bool { return true })
			if !ok {
				return false
			}
			evs := m.events(wi.i, j)
			old := evs[x].KV.Value
			evs[x].KV.Value = fresh(r)
			m.Expect = one(spec.Reliable)
			m.whatf("%s: the %s event on %q at %d carries value %q, not %q", where(wi, j), evs[x].Type, evs[x].KV.Key, evs[x].KV.ModRevision, evs[x].KV.Value, old)
			return true
		},
	},
	{
		Name: "watch-value-of-other-revision", Kind: Semantic,
		Doc:        "gives a PUT event the value its key had at another revision (§3.3 Reliable: one fault, one name)",
		Properties: []spec.Property{spec.Reliable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi, j, x, ok := eventSite(m, r, func(wi *watchInfo, e kv.Event) bool { return e.Type == kv.Put })
			if !ok {
				return false
			}
			e := wi.w.Responses[j].Response.Events[x]
			var others []kv.Event
			for _, c := range m.Subject.H.Commits() {
				for _, o := range c.Events {
					if o.Type == kv.Put && o.KV.Key == e.KV.Key && o.KV.Value != e.KV.Value && c.Revision != e.KV.ModRevision {
						others = append(others, o)
					}
				}
			}
			if len(others) == 0 {
				return false
			}
			o := pickOne(r, others)
			evs := m.events(wi.i, j)
			evs[x].KV.Value = o.KV.Value
			m.Expect = one(spec.Reliable)
			if m.Subject.Trace.Header.UniqueValues && m.Subject.knownPutAt(o.KV.Key, o.KV.Value, o.KV.ModRevision) {
				m.tag("value-of-known-put")
			}
			m.whatf("%s: the PUT on %q at %d carries %q, its value at revision %d", where(wi, j), e.KV.Key, e.KV.ModRevision, o.KV.Value, o.KV.ModRevision)
			return true
		},
	},
	{
		Name: "watch-corrupt-version", Kind: Semantic,
		Doc:        "changes a PUT event's Version (§3.3 Reliable); not under the UntrackedVersions allowance",
		Properties: []spec.Property{spec.Reliable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			if m.Subject.allows(linearizability.UntrackedVersions) {
				return false
			}
			wi, j, x, ok := eventSite(m, r, func(wi *watchInfo, e kv.Event) bool { return e.Type == kv.Put })
			if !ok {
				return false
			}
			evs := m.events(wi.i, j)
			old := evs[x].KV.Version
			evs[x].KV.Version = bump(old, r)
			m.Expect = one(spec.Reliable)
			m.whatf("%s: the PUT on %q at %d has Version %d, not %d", where(wi, j), evs[x].KV.Key, evs[x].KV.ModRevision, evs[x].KV.Version, old)
			return true
		},
	},
	{
		Name: "watch-corrupt-modrevision", Kind: Semantic,
		Doc: "moves the only event of a response to the next revision, where the key has no matching event and which " +
			"is below the next event delivered: an event the store never committed (§3.3 Reliable), and its true " +
			"revision skipped (named by §3's skip rules: Reliable, or StartRevision, Resumable, CompactedCancel)",
		Properties: []spec.Property{spec.Reliable, spec.StartRevision, spec.Resumable, spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi, j, x, ok := eventSite(m, r, func(wi *watchInfo, e kv.Event) bool {
				rev := e.KV.ModRevision
				nm := wi.nextMatching(rev)
				return !wi.w.Request.PrevKV && !e.IsCreate() && (nm == 0 || nm > rev+1) && rev+1 <= wi.h.Head()
			})
			if !ok || len(wi.w.Responses[j].Response.Events) != 1 {
				return false
			}
			resp := wi.w.Responses[j].Response
			e := resp.Events[x]
			if _, ok := m.Subject.committed(e.KV.Key, e.KV.ModRevision+1); ok {
				return false
			}
			// A progress notification below the new revision before the
			// next event would be another fault (its header goes back).
			for _, later := range wi.w.Responses[j+1:] {
				if len(later.Response.Events) > 0 {
					break
				}
				if later.Response.IsProgressNotify() && later.Response.Revision <= e.KV.ModRevision {
					return false
				}
			}
			// Its true revision is now skipped: §3's skip rules name that.
			skip := m.Subject.skipName(wi, wi.before[j].delivered == 0, wi.w.Responses[j].Time, []int64{e.KV.ModRevision}, false)
			if len(skip) != 1 {
				return false
			}
			evs := m.events(wi.i, j)
			evs[x].KV.ModRevision++
			// The header covers the event it now carries.
			m.respAt(wi, j).Response.Revision = max(resp.Revision, e.KV.ModRevision+1)
			m.Expect = one(append(skip[0], spec.Reliable)...)
			m.whatf("%s: the %s on %q at %d claims ModRevision %d", where(wi, j), e.Type, e.KV.Key, e.KV.ModRevision, e.KV.ModRevision+1)
			return true
		},
	},
	{
		Name: "watch-corrupt-createrevision", Kind: Semantic,
		Doc:        "flips whether a PUT event created its key, through its CreateRevision (§3.9 IsCreate)",
		Properties: []spec.Property{spec.IsCreate},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi, j, x, ok := eventSite(m, r, func(wi *watchInfo, e kv.Event) bool {
				return e.Type == kv.Put && (!e.IsCreate() || e.KV.ModRevision > 1)
			})
			if !ok {
				return false
			}
			evs := m.events(wi.i, j)
			e := &evs[x]
			old := e.KV.CreateRevision
			if e.IsCreate() {
				e.KV.CreateRevision = e.KV.ModRevision - 1
			} else {
				e.KV.CreateRevision = e.KV.ModRevision
			}
			m.Expect = one(spec.IsCreate)
			m.whatf("%s: the PUT on %q at %d has CreateRevision %d, not %d", where(wi, j), e.KV.Key, e.KV.ModRevision, e.KV.CreateRevision, old)
			return true
		},
	},
	{
		Name: "watch-event-before-start", Kind: Semantic,
		Doc: "delivers, right after the created response, committed matching events below where the watch may start " +
			"(§3.10 StartRevision): for a watch from s > 0 one event below s; for a watch from now, which may start " +
			"anywhere up to R₀ + 1 (§1), a whole revision r ≤ R₀ followed by matching events up to R₀ it then skips " +
			"(named by §3's skip rules: StartRevision, CompactedCancel, Bookmarkable when a progress notification " +
			"reveals them)",
		Properties: []spec.Property{spec.StartRevision, spec.CompactedCancel, spec.Bookmarkable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || wi.created < 0 {
				return false
			}
			s := m.Subject
			at := wi.w.Responses[wi.created].Time
			lo := max(1, s.anyCompact(at)+1, s.H.Base()+1)
			req := wi.w.Request
			if req.StartRevision > 0 {
				var early []kv.Event
				for _, c := range s.H.Between(lo, wi.from-1) {
					for _, e := range c.Events {
						if req.Matches(e) {
							early = append(early, e)
						}
					}
				}
				if len(early) == 0 {
					return false
				}
				e := pickOne(r, early)
				if !req.PrevKV {
					e.PrevKV = nil
				}
				m.insertEvents(wi, wi.created+1, at, max(wi.r0, e.KV.ModRevision), []kv.Event{e})
				m.Expect = one(spec.StartRevision)
				m.whatf("%s: the %s on %q at %d delivered; the watch starts at %d", where(wi, wi.created+1), e.Type, e.KV.Key, e.KV.ModRevision, wi.from)
				return true
			}
			// A watch from now: it may start at any revision up to R₀ + 1
			// (§1; against a cluster nothing bounds it from below), and
			// from its first event on it owes every matching event.
			if s.opts.SingleServer || wi.firstEvent() <= wi.r0 {
				return false // it started at or below R₀ already
			}
			revs, byRev := wi.matchingBelowFrom(lo, wi.r0)
			if len(revs) < 2 {
				return false
			}
			x := r.Intn(len(revs) - 1)
			rev, skipped := revs[x], revs[x+1:]
			// What follows shows the skip: the first event, or a progress
			// notification that binds the watch once the event came.
			k, byProgress, ok := reveal(wi, wi.created, wi.r0, -len(byRev[rev]))
			if !ok {
				return false
			}
			m.Expect = one(spec.StartRevision)
			switch c, any := s.checkerCompact(wi.w.Responses[k].Time), s.anyCompact(wi.w.Responses[k].Time); {
			case skipped[0] < c:
				m.Expect = one(spec.CompactedCancel)
			case skipped[0] < any:
				return false
			case byProgress:
				m.Expect = one(spec.Bookmarkable)
			}
			evs := slices.Clone(byRev[rev])
			if !req.PrevKV {
				for x := range evs {
					evs[x].PrevKV = nil
				}
			}
			m.insertEvents(wi, wi.created+1, at, wi.r0, evs)
			m.whatf("%s: revision %d delivered to a watch from now created at %d, which then skips revisions %v", where(wi, wi.created+1), rev, wi.r0, skipped)
			return true
		},
	},
	{
		Name: "watch-start-at-created-strict", Kind: Strict,
		Doc: "delivers to a watch from now, right after its created response, the last revision at or below R₀ " +
			"with matching events, when none follows it up to R₀: a start at R₀ or below, which etcd ≥ 3.5.22 and " +
			"clientv3's resume make (§1, allowed by default) and the strict profile's StartAfterCreated forbids " +
			"(§3.10, §9.3)",
		Properties: []spec.Property{spec.StartRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := strictWatch(m, r)
			if wi == nil || wi.created < 0 || wi.w.Request.StartRevision != 0 || m.Subject.opts.SingleServer {
				return false
			}
			s := m.Subject
			at := wi.w.Responses[wi.created].Time
			lo := max(1, s.anyCompact(at)+1, s.H.Base()+1)
			revs, byRev := wi.matchingBelowFrom(lo, wi.r0)
			if len(revs) == 0 || wi.firstEvent() <= wi.r0 {
				return false
			}
			rev := revs[len(revs)-1]
			// Once an event came, every later progress notification binds
			// (§3.6): none before the first event may then go below it.
			for _, resp := range wi.w.Responses[wi.created+1:] {
				if len(resp.Response.Events) > 0 {
					break
				}
				if resp.Response.IsProgressNotify() && resp.Response.Revision < rev {
					return false
				}
			}
			evs := slices.Clone(byRev[rev])
			if !wi.w.Request.PrevKV {
				for x := range evs {
					evs[x].PrevKV = nil
				}
			}
			m.insertEvents(wi, wi.created+1, at, wi.r0, evs)
			m.Expect = one(spec.StartRevision)
			m.whatf("%s: revision %d delivered to a watch from now created at %d", where(wi, wi.created+1), rev, wi.r0)
			return true
		},
	},
	{
		Name: "watch-progress-below-start", Kind: Semantic,
		Doc:        "sends a watch from a future revision a progress notification below its start (§3.10 StartRevision; etcd#20221)",
		Properties: []spec.Property{spec.StartRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || wi.created < 0 || wi.w.Request.StartRevision < wi.r0+2 {
				return false
			}
			// R₀ ≤ R ≤ s−2, committed, and binding the watch right after its
			// created response (§3.6: an answer at or below R₀ there may
			// predate the registration).
			lo, hi := wi.r0, min(wi.w.Request.StartRevision-2, m.Subject.head())
			if !wi.bindsAt(wi.created+1, 0, lo) {
				lo++
			}
			if lo > hi || !wi.bindsAt(wi.created+1, 0, hi) || wi.before[wi.created+1].delivered > 0 {
				return false
			}
			R := lo + r.Int63n(hi-lo+1)
			at := wi.w.Responses[wi.created].Time
			m.setResponses(wi, slices.Insert(slices.Clone(m.responses(wi)), wi.created+1, traces.WatchResponse{Time: at, Response: watch.Response{Revision: R}}))
			m.Expect = one(spec.StartRevision)
			m.whatf("%s: a progress notification at %d; the watch starts at %d", where(wi, wi.created+1), R, wi.w.Request.StartRevision)
			return true
		},
	},
	{
		Name: "watch-skip-compacted", Kind: Semantic,
		Doc: "moves the start of a watch below a compaction, over matching events, keeping its stream: the stream " +
			"silently skips compacted history instead of being cancelled (§3.11 CompactedCancel; etcd#17529)",
		Properties: []spec.Property{spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || wi.created < 0 {
				return false
			}
			s := m.Subject
			k, _, ok := reveal(wi, wi.created, 0, 0)
			if !ok || wi.before[k].delivered > 0 {
				return false
			}
			at := wi.w.Responses[k].Time
			c := s.checkerCompact(at)
			if c < 2 {
				return false
			}
			// A matching event below both c and the current start.
			var below []int64
			for _, cm := range s.H.Between(1, min(c, wi.from)-1) {
				if slices.ContainsFunc(cm.Events, wi.w.Request.Matches) {
					below = append(below, cm.Revision)
				}
			}
			if len(below) == 0 {
				return false
			}
			rev := pickOne(r, below)
			start := 1 + r.Int63n(rev)
			m.tr().Watches[wi.i].Request.StartRevision = start
			m.Expect = one(spec.CompactedCancel)
			m.whatf("watch %d of client %d (line %d): starts at %d instead of %d; compacted at %d, its matching event at %d is skipped",
				wi.w.ID, wi.w.Client, wi.w.Line, start, wi.w.Request.StartRevision, c, rev)
			return true
		},
	},
	{
		Name: "watch-false-compaction-cancel", Kind: Semantic,
		Doc: "ends a stream with a compaction cancel it does not need: at a compaction at or below next(w), or at a " +
			"revision no compaction asked for (§3.11 CompactedCancel)",
		Properties: []spec.Property{spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			wi := cleanWatch(m, r)
			if wi == nil || wi.created < 0 {
				return false
			}
			s := m.Subject
			rs := wi.w.Responses
			k := wi.created + 1 + r.Intn(len(rs)-wi.created)
			st := wi.before[k]
			if st.ended {
				return false
			}
			at := rs[len(rs)-1].Time
			if k < len(rs) {
				at = rs[k].Time
			}
			var C int64
			if r.Intn(2) == 0 {
				// The lowest revision the watch may still need (§3.11):
				// next(w); for a watch from now that has received nothing,
				// lo(w), which nothing bounds against a cluster (§1).
				needed := st.next
				if wi.w.Request.StartRevision == 0 && st.delivered == 0 && st.bookmark == 0 {
					if s.opts.SingleServer {
						return false
					}
					needed = 1
				}
				var real []int64
				for _, o := range s.compactions {
					if o.known && o.call <= at && o.rev <= needed {
						real = append(real, o.rev)
					}
				}
				if len(real) == 0 {
					return false
				}
				C = pickOne(r, real)
				m.whatf("%s: replaced, with what follows, by a cancel for the compaction at %d (the watch needs revisions from %d on)", where(wi, k), C, needed)
			} else {
				if st.next+1 > s.head() {
					return false
				}
				C = st.next + 1 + r.Int63n(s.head()-st.next)
				if slices.ContainsFunc(s.compactions, func(o compactOp) bool { return o.rev == C }) {
					return false
				}
				for _, o := range s.Trace.Ops {
					if o.Request.Compact != nil && o.Request.Compact.Revision == C {
						return false
					}
				}
				m.whatf("%s: replaced, with what follows, by a cancel for a compaction at %d no one asked for", where(wi, k), C)
			}
			if slices.ContainsFunc(rs[k:], func(r traces.WatchResponse) bool { return r.Response.CompactRevision > 0 }) {
				m.tag("drops-cancel")
			}
			cancel := traces.WatchResponse{Time: at, Response: watch.Response{Canceled: true, CompactRevision: C}}
			m.setResponses(wi, append(slices.Clone(m.responses(wi)[:k]), cancel))
			m.Expect = one(spec.CompactedCancel)
			return true
		},
	},
}

// committed returns the committed event e stands for (same key and revision).
func (wi *watchInfo) committed(e kv.Event) (kv.Event, bool) {
	c, ok := wi.h.Commit(e.KV.ModRevision)
	if !ok {
		return kv.Event{}, false
	}
	for _, o := range c.Events {
		if o.KV.Key == e.KV.Key {
			return o, true
		}
	}
	return kv.Event{}, false
}

// multiEventSite picks, in a response, an event whose revision has another
// event in the same response.
func multiEventSite(wi *watchInfo, r *rand.Rand) (j, x int, ok bool) {
	var sites [][2]int
	for _, j := range wi.eventResponses() {
		evs := wi.w.Responses[j].Response.Events
		for x := range evs {
			if (x > 0 && evs[x-1].KV.ModRevision == evs[x].KV.ModRevision) || (x+1 < len(evs) && evs[x+1].KV.ModRevision == evs[x].KV.ModRevision) {
				sites = append(sites, [2]int{j, x})
			}
		}
	}
	if len(sites) == 0 {
		return 0, 0, false
	}
	s := pickOne(r, sites)
	return s[0], s[1], true
}

// eventSite picks a delivered event of a clean watch that ok accepts.
func eventSite(m *Mutant, r *rand.Rand, ok func(*watchInfo, kv.Event) bool) (*watchInfo, int, int, bool) {
	wi := cleanWatch(m, r)
	if wi == nil {
		return nil, 0, 0, false
	}
	var sites [][2]int
	for _, j := range wi.eventResponses() {
		for x, e := range wi.w.Responses[j].Response.Events {
			if ok(wi, e) {
				sites = append(sites, [2]int{j, x})
			}
		}
	}
	if len(sites) == 0 {
		return nil, 0, 0, false
	}
	s := pickOne(r, sites)
	return wi, s[0], s[1], true
}

// insertForeign inserts into a response a committed event of its window
// (after the last event delivered before it, up to its last revision) that
// foreign accepts, where the revision order puts it; or, when fabricate is
// set and there is none, a PUT of a key outside the range.
func insertForeign(m *Mutant, r *rand.Rand, foreign func(*watchInfo, kv.Event) bool, fabricate bool) bool {
	return insertForeignInto(m, r, cleanWatch(m, r), foreign, fabricate)
}

// insertForeignInto is insertForeign on watch wi.
func insertForeignInto(m *Mutant, r *rand.Rand, wi *watchInfo, foreign func(*watchInfo, kv.Event) bool, fabricate bool) bool {
	if wi == nil || len(wi.eventResponses()) == 0 {
		return false
	}
	j := pickOne(r, wi.eventResponses())
	evs := wi.w.Responses[j].Response.Events
	lo := max(wi.before[j].lastRev+1, 1)
	hi := evs[len(evs)-1].KV.ModRevision
	var cands []kv.Event
	for _, c := range m.Subject.H.Between(lo, hi) {
		for _, e := range c.Events {
			if foreign(wi, e) {
				cands = append(cands, e)
			}
		}
	}
	var e kv.Event
	switch {
	case len(cands) > 0:
		e = pickOne(r, cands)
		if !wi.w.Request.PrevKV {
			e.PrevKV = nil
		}
	case fabricate:
		key := "\x00mutant"
		if wi.w.Request.InRange(key) {
			return false
		}
		e = kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: key, Value: fresh(r), CreateRevision: hi, ModRevision: hi, Version: 1}}
	default:
		return false
	}
	out := m.events(wi.i, j)
	at := len(out)
	for x, d := range out {
		if d.KV.ModRevision > e.KV.ModRevision {
			at = x
			break
		}
	}
	m.respAt(wi, j).Response.Events = slices.Insert(out, at, e)
	m.Expect = one(spec.Filtered)
	m.whatf("%s: the %s on %q at %d inserted", where(wi, j), e.Type, e.KV.Key, e.KV.ModRevision)
	return true
}

// corruptKV changes one field of k and says which.
func corruptKV(k *kv.KeyValue, r *rand.Rand, untrackedVersions bool) string {
	n := 4
	if untrackedVersions {
		n = 3
	}
	switch r.Intn(n) {
	case 0:
		old := k.Value
		k.Value = fresh(r)
		return fmt.Sprintf("value %q, not %q", k.Value, old)
	case 1:
		old := k.ModRevision
		k.ModRevision = bump(old, r)
		return fmt.Sprintf("ModRevision %d, not %d", k.ModRevision, old)
	case 2:
		old := k.CreateRevision
		k.CreateRevision = bump(old, r)
		return fmt.Sprintf("CreateRevision %d, not %d", k.CreateRevision, old)
	default:
		old := k.Version
		k.Version = bump(old, r)
		return fmt.Sprintf("Version %d, not %d", k.Version, old)
	}
}

// bump returns a positive number other than n.
func bump(n int64, r *rand.Rand) int64 {
	if n > 1 && r.Intn(2) == 0 {
		return n - 1
	}
	return n + 1
}

// knownPutAt reports whether a write of known outcome put value on key and
// was answered with revision rev.
func (s *Subject) knownPutAt(key, value string, rev int64) bool {
	for _, o := range s.Trace.Ops {
		if o.Response == nil || o.Response.Err != nil || o.Response.Revision != rev {
			continue
		}
		reqs := []kv.Op{{Put: o.Request.Put}}
		if o.Request.Txn != nil {
			reqs = append(reqs, o.Request.Txn.Success...)
			reqs = append(reqs, o.Request.Txn.Failure...)
		}
		for _, q := range reqs {
			if q.Put != nil && q.Put.Key == key && q.Put.Value == value {
				return true
			}
		}
	}
	return false
}
