package mutate

import (
	"slices"
	"sort"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// watchInfo is what semantic operators know of one clean watch: its stream
// read with the SPEC's notation (§1), and the matching events of H.
type watchInfo struct {
	i       int
	w       *traces.Watch
	h       *kv.History
	created int   // index of the created response, −1 when none was recorded
	r0      int64 // its header revision R₀
	from    int64 // from(w); 0 when unknown (no created response and s = 0)
	// binding says which progress notifications bind the watch, as the
	// checker decides it from the trace's streams (docs/SPEC.md §3.6).
	binding watch.ProgressBinding
	// before[j] is the stream's state before response j; before[len] after the last.
	before []streamState
	// matching revisions of H at or above from (all of H when from is unknown), in order
	revs []int64
	evs  map[int64][]kv.Event
}

type streamState struct {
	delivered    int   // events delivered so far
	lastRev      int64 // revision of the last delivered event (0: none)
	maxDelivered int64 // highest revision of an event delivered so far
	header       int64 // highest non-zero header so far
	bookmark     int64 // highest progress notification so far that binds the watch
	next         int64 // next(w): the first revision not yet accounted for
	ended        bool  // a cancel came
}

// watch returns what is known of clean watch i, or nil when the watch is
// not clean (a base violation names it) or its trace has no history.
func (s *Subject) watch(i int) *watchInfo { return s.winfo[i] }

// readWatch reads clean watch i off the trace and H.
func (s *Subject) readWatch(i int) *watchInfo {
	w := s.Trace.Watches[i]
	wi := &watchInfo{i: i, w: w, h: s.H, created: -1, evs: map[int64][]kv.Event{}, binding: linearizability.ProgressBinding(s.Trace, w)}
	for j, r := range w.Responses {
		if r.Response.Created {
			wi.created, wi.r0 = j, r.Response.Revision
			break
		}
	}
	switch {
	case w.Request.StartRevision > 0:
		wi.from = w.Request.StartRevision
	case wi.created >= 0:
		wi.from = wi.r0 + 1
	}
	for _, c := range s.H.Commits() {
		if c.Revision < wi.from {
			continue
		}
		for _, e := range c.Events {
			if w.Request.Matches(e) {
				wi.evs[c.Revision] = append(wi.evs[c.Revision], e)
			}
		}
		if len(wi.evs[c.Revision]) > 0 {
			wi.revs = append(wi.revs, c.Revision)
		}
	}
	st := streamState{next: wi.from}
	for j, r := range w.Responses {
		wi.before = append(wi.before, st)
		resp := r.Response
		if resp.Revision != 0 {
			st.header = max(st.header, resp.Revision)
		}
		for _, e := range resp.Events {
			st.delivered++
			st.lastRev = e.KV.ModRevision
			st.maxDelivered = max(st.maxDelivered, e.KV.ModRevision)
			st.next = max(st.next, e.KV.ModRevision+1)
		}
		if resp.IsProgressNotify() && wi.bindsAt(j, st.delivered, resp.Revision) {
			st.bookmark = max(st.bookmark, resp.Revision)
			st.next = max(st.next, resp.Revision+1)
		}
		if resp.Canceled {
			st.ended = true
		}
	}
	wi.before = append(wi.before, st)
	return wi
}

// bindsAt reports whether a progress notification at revision p, placed
// at index j of the stream (before the response now there) with delivered
// events before it, binds the watch: the checker's rule
// ([watch.ProgressBinding.Binds]), with the watch registered at its created
// header once the created response came (the checker does not know of
// re-registrations).
func (wi *watchInfo) bindsAt(j, delivered int, p int64) bool {
	created := int64(0)
	if wi.created >= 0 && wi.created < j {
		created = wi.r0
	}
	return wi.binding.Binds(created, delivered > 0, p)
}

// cleanWatches returns the indexes of the watches semantic operators may
// mutate.
func (s *Subject) cleanWatches() []int {
	var out []int
	for i := range s.Trace.Watches {
		if s.watch(i) != nil {
			out = append(out, i)
		}
	}
	return out
}

// matchingIn returns the matching revisions r with lo ≤ r ≤ hi.
func (wi *watchInfo) matchingIn(lo, hi int64) []int64 {
	i := sort.Search(len(wi.revs), func(i int) bool { return wi.revs[i] >= lo })
	var out []int64
	for ; i < len(wi.revs) && wi.revs[i] <= hi; i++ {
		out = append(out, wi.revs[i])
	}
	return out
}

// nextMatching returns the least matching revision above rev, or 0.
func (wi *watchInfo) nextMatching(rev int64) int64 {
	i := sort.Search(len(wi.revs), func(i int) bool { return wi.revs[i] > rev })
	if i == len(wi.revs) {
		return 0
	}
	return wi.revs[i]
}

// eventResponses returns the indexes of the responses with events.
func (wi *watchInfo) eventResponses() []int {
	var out []int
	for j, r := range wi.w.Responses {
		if len(r.Response.Events) > 0 {
			out = append(out, j)
		}
	}
	return out
}

// revisionsOf returns the distinct revisions of a response's events, in order.
func revisionsOf(evs []kv.Event) []int64 {
	var out []int64
	for _, e := range evs {
		if len(out) == 0 || out[len(out)-1] != e.KV.ModRevision {
			out = append(out, e.KV.ModRevision)
		}
	}
	return out
}

// skipName returns the names docs/SPEC.md §3 ("One fault, one name") gives
// matching revisions skipped, when response j of the stream reveals them
// (by an event above them, or as a progress notification covering them;
// opening: no event was delivered before them):
// CompactedCancel if one lies below the compact revision; else Resumable or
// StartRevision when they open the stream; Bookmarkable when a progress
// notification reveals them; Reliable otherwise. It returns nil when the
// answer depends on what the recording does not say (a compaction of
// unknown outcome, a start revision the stream does not tell), so that the
// operator picks another site.
func (s *Subject) skipName(wi *watchInfo, opening bool, at int64, skipped []int64, byProgress bool) [][]spec.Property {
	if len(skipped) == 0 {
		return nil
	}
	low := skipped[0]
	c, any := s.checkerCompact(at), s.anyCompact(at)
	switch {
	case low < c:
		return one(spec.CompactedCancel)
	case low < any:
		return nil
	}
	if opening {
		req := wi.w.Request
		if wi.created < 0 || (req.StartRevision > 0 && req.StartRevision < any) {
			return nil
		}
		name := spec.StartRevision
		if req.StartRevision > 0 && req.StartRevision <= wi.r0 {
			name = spec.Resumable
		}
		if byProgress {
			// The SPEC names the opening of the stream first, but §3.5's
			// precise statement speaks of the first delivered event, which
			// has not come: Bookmarkable is as true.
			return [][]spec.Property{{name}, {spec.Bookmarkable}}
		}
		return one(name)
	}
	if byProgress {
		return one(spec.Bookmarkable)
	}
	return one(spec.Reliable)
}

// one returns the single acceptable set of the properties p (without repeats).
func one(p ...spec.Property) [][]spec.Property {
	var set []spec.Property
	for _, q := range p {
		if !slices.Contains(set, q) {
			set = append(set, q)
		}
	}
	return [][]spec.Property{set}
}
