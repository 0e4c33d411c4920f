package watchhub

import (
	"slices"
	"sort"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// pass runs one catch-up pass over the streams that have room and watchers
// behind, and reports whether it did anything (so the caller runs another).
//
// A pass first hands victims their parked revision, then serves up to
// MaxWatchersPerPass unsynced watchers from one window of history read once
// from the store: the whole revisions from the lowest next revision among
// them, at most MaxRevisionsPerResponse of them and about MaxEventsPerRead
// events (fewer when the streams served have less room), never beyond the
// hub's revision. Each watcher whose next revision
// lies in the window gets, in one response, its events of the window from
// its next revision on, cut at a revision boundary to what its stream can
// take. A watcher whose next revision is below the compact revision gets a
// cancel with CompactRevision instead (docs/SPEC.md §3.11); it is removed
// only once that cancel is queued.
func (h *Hub) pass() bool {
	streams := h.takeReady()
	if len(streams) == 0 {
		return false
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	var work []*watcher
	budget := 0 // what the streams served can take, in events
	for i, s := range streams {
		if s.gone {
			continue
		}
		if len(work) >= h.opts.MaxWatchersPerPass {
			for _, s := range streams[i:] {
				h.markReady(s)
			}
			break
		}
		for _, w := range slices.Clone(s.behind.ws) {
			if w.state == stVictim {
				h.serveVictim(w)
			}
		}
		if !s.waitRoom(1) { // when nothing fits, the reader wakes the stream
			served := false
			for _, w := range s.behind.ws {
				if w.state == stUnsynced {
					work = append(work, w)
					served = true
				}
			}
			if room, empty := s.space(); served {
				if empty {
					room = h.opts.StreamCapacity
				}
				budget += room
			}
		}
		h.answerProgress(s)
	}
	rev := h.rev
	h.mu.Unlock()
	if len(work) == 0 {
		return true
	}

	// Read one window of history, from the lowest next revision that is
	// still readable.
	c := h.hist.CompactRevision()
	sort.Slice(work, func(i, j int) bool { return work[i].next < work[j].next })
	var win window
	stalled := false
	if i := sort.Search(len(work), func(i int) bool { return work[i].next >= c }); i < len(work) && work[i].next <= rev {
		from := work[i].next
		to := min(rev, from+int64(h.opts.MaxRevisionsPerResponse)-1)
		withPrev := false
		for _, w := range work[i:] {
			withPrev = withPrev || (w.prevKV && w.next <= to)
		}
		// Read no more than the streams can take (but at least a little):
		// a window is read again by the next pass from where its slowest
		// watcher stopped.
		maxEvents := min(h.opts.MaxEventsPerRead, max(budget, 64))
		evs, last, err := h.hist.Events(from, to, maxEvents, withPrev)
		switch err {
		case nil:
			win = window{from: from, last: last, events: evs, ok: true}
			if len(work) > 8 {
				win.index()
			}
		case mvcc.ErrCompacted:
			// A compaction came into force meanwhile: the loop below
			// cancels the watchers it overtook, the next pass serves the rest.
		default:
			// The store failed or is closing: leave the watchers as they are
			// until something wakes the stream again.
			stalled = true
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	c = h.hist.CompactRevision()
	full := make(map[*Stream]bool) // streams with a watcher that waits for room
	for _, w := range work {
		if w.state != stUnsynced {
			continue // cancelled, or its stream closed, meanwhile
		}
		switch {
		case w.next < c:
			if w.s.push(Response{WatchID: w.id, CompactRevision: c, Canceled: true}, 1) {
				h.remove(w)
				continue
			}
			full[w.s] = true
		case win.ok && win.from <= w.next && w.next <= win.last:
			if h.serveWindow(w, &win) {
				full[w.s] = true
			}
		}
		if w.next > h.rev {
			h.toSynced(w)
		}
	}
	// A stream with watchers still behind goes again, unless one of them
	// waits for room: then the reader wakes it (a failed push asked it to).
	// So every pass serves its lowest watcher or drops its stream until the
	// reader reads: passes never spin. Re-marking a full stream would: the
	// next pass reads the same window from the same blocked watcher and
	// fails the same way until the reader reads.
	for _, w := range work {
		if w.state == stUnsynced && !stalled && !full[w.s] {
			h.markReady(w.s)
		}
	}
	for _, s := range streams {
		h.answerProgress(s)
	}
	return true
}

// serveVictim queues a victim's parked revision if its stream has room; the
// victim then rejoins the synced group if nothing was committed since, and
// is unsynced otherwise. The caller holds h.mu.
func (h *Hub) serveVictim(w *watcher) {
	b := w.victim
	if !w.s.push(Response{WatchID: w.id, Revision: h.rev, Events: b.events}, len(b.events)) {
		return
	}
	w.victim, w.sent = nil, true
	w.next = b.rev + 1
	w.state = stUnsynced
	if w.next > h.rev {
		h.toSynced(w)
	}
}

// toSynced moves a caught-up watcher (next > h.rev) to the synced group.
func (h *Hub) toSynced(w *watcher) {
	w.s.behind.remove(w)
	w.state = stSynced
	h.synced.add(w)
}

// window is a run of whole revisions read from the store.
type window struct {
	from, last int64
	events     []mvcc.Event
	ok         bool
	byKey      []int32 // event positions sorted by key, then position; nil for a linear scan
}

func (win *window) index() {
	win.byKey = make([]int32, len(win.events))
	for i := range win.byKey {
		win.byKey[i] = int32(i)
	}
	sort.SliceStable(win.byKey, func(a, b int) bool {
		return win.events[win.byKey[a]].KV.Key < win.events[win.byKey[b]].KV.Key
	})
}

// start returns the position of the window's first event at or after
// revision rev.
func (win *window) start(rev int64) int {
	return sort.Search(len(win.events), func(i int) bool { return win.events[i].KV.ModRevision >= rev })
}

// candidates returns the positions of the window's events on w's keys, in
// commit order — or dense, when w's keys hold so large a share of the
// window that scanning it in order is cheaper than collecting and sorting
// their positions (always for a window without an index).
func (win *window) candidates(w *watcher) (pos []int32, dense bool) {
	k := win.byKey
	if k == nil {
		return nil, true
	}
	lo := sort.Search(len(k), func(i int) bool { return win.events[k[i]].KV.Key >= w.key })
	var hi int
	switch {
	case w.inf:
		hi = len(k)
	case w.end == "":
		hi = lo + sort.Search(len(k)-lo, func(i int) bool { return win.events[k[lo+i]].KV.Key > w.key })
	default:
		hi = lo + sort.Search(len(k)-lo, func(i int) bool { return win.events[k[lo+i]].KV.Key >= w.end })
	}
	if 4*(hi-lo) >= len(k) {
		return nil, true
	}
	pos = slices.Clone(k[lo:hi])
	slices.Sort(pos)
	return pos, false
}

// serveWindow queues w's events of the window from w.next on, as many whole
// revisions as its stream takes, and advances w.next past what was queued
// (and past revisions with nothing for w). It reports whether it stopped for
// lack of room, having asked the stream to say when there is some. The
// caller holds h.mu.
func (h *Hub) serveWindow(w *watcher, win *window) (blocked bool) {
	room, empty := w.s.space()
	upTo := win.last
	// The events to look at, in commit order: win.events[at(i)] for i in
	// [i, n).
	pos, dense := win.candidates(w)
	i, n := 0, len(pos)
	if dense {
		i, n = win.start(w.next), len(win.events)
	}
	at := func(i int) int {
		if dense {
			return i
		}
		return int(pos[i])
	}
	var evs []mvcc.Event
	stuck := 0 // the size of the revision that did not fit
	for i < n {
		rev := win.events[at(i)].KV.ModRevision
		mark := len(evs)
		for ; i < n && win.events[at(i)].KV.ModRevision == rev; i++ {
			e := &win.events[at(i)]
			if rev < w.next || !w.wants(e) {
				continue
			}
			if evs == nil {
				evs = make([]mvcc.Event, 0, max(1, min(room, n-i)))
			}
			evs = append(evs, *e)
			if !w.prevKV {
				evs[len(evs)-1].PrevKV = nil
			}
		}
		if len(evs) == mark {
			continue
		}
		if len(evs) > room && !(empty && mark == 0) {
			stuck = len(evs) - mark
			evs = evs[:mark] // this revision does not fit: stop before it
			upTo = rev - 1
			break
		}
	}
	if len(evs) > 0 {
		if !w.s.push(Response{WatchID: w.id, Revision: h.rev, Events: evs}, len(evs)) {
			return true
		}
		w.sent = true
	}
	if upTo >= w.next {
		w.next = upTo + 1
	}
	// Stopped for lack of room: wait for the reader, unless it made room
	// meanwhile (then the caller goes again at once). Checking and asking
	// in one step matters: a reader that drained the queue in between would
	// otherwise never wake the stream.
	if stuck > 0 {
		return w.s.waitRoom(stuck)
	}
	return false
}
