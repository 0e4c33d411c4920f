package watchhub

import (
	"sort"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// pass runs one catch-up pass over the streams that have room and watchers
// behind, and reports whether it did anything (so the caller runs another).
//
// A pass serves up to MaxWatchersPerPass watches behind (victims and
// unsynced) of the streams whose reader has made room. Each gets at most one
// response: its events from its next revision to the end of the chunk of
// history that holds it — the hub's recent commits, or a window of history
// read from the store and kept for the next passes — whole revisions, at
// most MaxRevisionsPerResponse of them. A watch that takes every event of
// that stretch shares the chunk's events (nothing is copied); one that takes
// only some gets a copy, cut at a revision boundary to what its stream can
// take. When some watches need history the hub does not hold, the pass reads
// one window from the store, from the lowest of their next revisions (at
// most MaxRevisionsPerResponse revisions, MaxEventsPerRead events and about
// StreamBytes), and serves them from it.
//
// A watch whose next revision is below the compact revision gets a cancel
// with CompactRevision instead (docs/SPEC.md §3.11); it is removed only once
// that cancel is queued.
func (h *Hub) pass() bool {
	streams := h.takeReady()
	if len(streams) == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	var work []*watcher
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
		if !s.waitRoom(0) { // when nothing fits, the reader wakes the stream
			work = append(work, s.behind.ws...)
		}
		h.answerProgress(s)
	}
	blocked := make(map[*Stream]bool) // streams with a watcher that waits for room
	var later []*watcher              // watchers that need history from the store
	c := h.hist.CompactRevision()
	for _, w := range work {
		switch h.serve(w, c) {
		case outBlocked:
			blocked[w.s] = true
		case outHistory:
			later = append(later, w)
		}
	}
	stalled := false
	if len(later) > 0 {
		stalled = h.readWindow(later)
		if h.closed {
			return false
		}
		c = h.hist.CompactRevision()
		for _, w := range later {
			if h.serve(w, c) == outBlocked {
				blocked[w.s] = true
			}
		}
	}
	// A stream with watchers still behind goes again, unless one of them
	// waits for room: then the reader wakes it (a failed push asked it to).
	// So every pass serves its lowest watcher or drops its stream until the
	// reader reads: passes never spin. Re-marking a full stream would: the
	// next pass would find the same watcher blocked the same way until the
	// reader reads.
	for _, w := range work {
		if (w.state == stUnsynced || w.state == stVictim) && !stalled && !blocked[w.s] {
			h.markReady(w.s)
		}
	}
	for _, s := range streams {
		h.answerProgress(s)
	}
	return true
}

// The outcomes of serving a watcher.
const (
	outIdle    = iota // nothing to do (caught up, gone)
	outServed         // a response was queued, or the watcher advanced
	outBlocked        // its stream has no room: the reader wakes it
	outHistory        // it needs history the hub does not hold
)

// serve queues the next response of a watcher behind, from the history the
// hub holds. The caller holds h.mu.
func (h *Hub) serve(w *watcher, c int64) int {
	for {
		if w.state != stUnsynced && w.state != stVictim {
			return outIdle
		}
		if w.next < c {
			if w.s.push(Response{WatchID: w.id, CompactRevision: c, Canceled: true}, 0) {
				h.remove(w)
				return outServed
			}
			return outBlocked
		}
		if w.next > h.rev {
			h.toSynced(w)
			return outIdle
		}
		ch := h.chunkAt(w.next, w.prevKV)
		if ch == nil {
			return outHistory
		}
		switch out := h.serveChunk(w, ch); out {
		case outIdle:
			continue // nothing for w up to the chunk's end: on to the next one
		case outServed:
			if w.next > h.rev {
				h.toSynced(w)
			}
			return out
		default:
			return out
		}
	}
}

// chunkAt returns, of the chunks of history the hub holds that cover
// revision rev and can serve a watcher with or without prevKV, the one that
// reaches furthest (the largest response), or nil.
func (h *Hub) chunkAt(rev int64, prevKV bool) *chunk {
	var best *chunk
	for _, ch := range h.recent.chunks {
		if ch.from <= rev && rev <= ch.last {
			best = ch
			break
		}
	}
	for _, ch := range h.windows {
		if ch.from <= rev && rev <= ch.last && (ch.full != nil || !prevKV) && (best == nil || ch.last > best.last) {
			best = ch
		}
	}
	return best
}

// serveChunk queues w's events of the chunk from w.next on — as one run of
// the chunk when w takes all of them, else as a copy of whole revisions cut
// to what its stream can take — and advances w.next past what was queued
// and past revisions with nothing for w. It returns outIdle when the chunk
// had nothing more for w (w.next is then past it), outServed, or outBlocked
// when the stream has no room (having asked the reader to say when it has).
// The caller holds h.mu.
func (h *Hub) serveChunk(w *watcher, ch *chunk) int {
	b := ch.batch(w.prevKV)
	evs := b.events[:ch.n:ch.n]
	i := ch.search(w.next)
	j := i
	for j < len(evs) && w.wants(&evs[j]) {
		j++
	}
	if j == len(evs) {
		if i == j {
			h.advance(w, ch.last, false)
			return outIdle
		}
		// Every event from w.next to the chunk's end is w's: share them.
		if !w.s.push(Response{WatchID: w.id, Revision: h.rev, Events: evs[i:j:j], src: b, at: int32(i), w: w}, 0) {
			return outBlocked
		}
		h.advance(w, ch.last, true)
		return outServed
	}

	// w takes some of the events: copy them. The events to look at, in
	// commit order, are evs[at(k)] for k in [k, n).
	if ch.closed && ch.byKey == nil && ch.n >= 64 {
		ch.index()
	}
	pos, dense := ch.candidates(w, i)
	k, n := 0, len(pos)
	if dense {
		k, n = i, len(evs)
	}
	at := func(k int) int {
		if dense {
			return k
		}
		return int(pos[k])
	}
	room, empty := w.s.space()
	upTo := ch.last
	var out []mvcc.Event
	own, stuck := 0, 0
	for k < n {
		rev := evs[at(k)].KV.ModRevision
		mark, markOwn := len(out), own
		for ; k < n && evs[at(k)].KV.ModRevision == rev; k++ {
			e := &evs[at(k)]
			if !w.wants(e) {
				continue
			}
			if out == nil {
				out = make([]mvcc.Event, 0, min(n-k, 64))
			}
			out = append(out, *e)
			own += eventSize + payloadBytes(e)
		}
		if len(out) == mark {
			continue
		}
		if own > room && !(empty && mark == 0) {
			// This revision does not fit: stop before it.
			stuck = own - markOwn
			out, own = out[:mark], markOwn
			upTo = rev - 1
			break
		}
	}
	if len(out) > 0 {
		if !w.s.push(Response{WatchID: w.id, Revision: h.rev, Events: out, w: w}, own) {
			return outBlocked
		}
	}
	h.advance(w, upTo, len(out) > 0)
	switch {
	case stuck > 0 && w.s.waitRoom(stuck):
		// Stopped for lack of room: wait for the reader, unless it made
		// room meanwhile (then the stream goes again at once). Checking and
		// asking in one step matters: a reader that drained the queue in
		// between would otherwise never wake the stream.
		return outBlocked
	case len(out) == 0 && stuck == 0:
		return outIdle
	}
	return outServed
}

// advance moves w past revision upTo, after queuing its events up to there
// (sent) or finding none. The caller holds h.mu.
func (h *Hub) advance(w *watcher, upTo int64, sent bool) {
	if upTo >= w.next {
		w.next = upTo + 1
	}
	if sent {
		w.sent = true
		if w.state == stVictim {
			w.state = stUnsynced
		}
	}
}

// readWindow reads one window of history from the store for watchers that
// need it — from the lowest of their next revisions — and keeps it for this
// pass and the next ones. It reports whether the store failed (then the
// watchers stay as they are until something wakes their streams again). It
// releases h.mu while it reads; the caller holds it, and must check h.closed
// afterwards.
func (h *Hub) readWindow(ws []*watcher) (stalled bool) {
	sort.Slice(ws, func(i, j int) bool { return ws[i].next < ws[j].next })
	from := ws[0].next
	// The window may overlap the recent commits: reading them again costs
	// less than cutting every watch's response where they begin.
	to := min(h.rev, from+int64(h.opts.MaxRevisionsPerResponse)-1)
	withPrev := false
	for _, w := range ws {
		withPrev = withPrev || (w.prevKV && w.next <= to)
	}
	size := h.eventBytes
	h.mu.Unlock()
	var (
		evs  []mvcc.Event
		last int64
		err  error
	)
	if size == 0 {
		// No idea yet how large events are: read one to find out.
		evs, _, err = h.hist.Events(from, to, 1, withPrev)
		size = eventSize
		if len(evs) > 0 {
			size += payloadBytes(&evs[0])
		}
	}
	if err == nil {
		// About StreamBytes of events: the store reads whole revisions.
		maxEvents := min(h.opts.MaxEventsPerRead, max(1, h.opts.StreamBytes/size))
		evs, last, err = h.hist.Events(from, to, maxEvents, withPrev)
	}
	h.mu.Lock()
	switch err {
	case nil:
		evs, last = trimWindow(evs, last, h.opts.StreamBytes)
		win := newWindow(from, last, evs, withPrev)
		if win.n > 0 {
			h.eventBytes = win.bytes / win.n
		}
		h.windows = append(h.windows, win)
		if len(h.windows) > keptWindows {
			h.windows[0] = nil
			h.windows = h.windows[1:]
		}
	case mvcc.ErrCompacted:
		// A compaction came into force meanwhile: serving cancels the
		// watchers it overtook, the next pass serves the rest.
	default:
		return true
	}
	return false
}

// trimWindow cuts a window read from the store after the revision that
// brings its size to maxBytes, keeping at least one revision: the size of
// its events was only estimated when it was read.
func trimWindow(evs []mvcc.Event, last int64, maxBytes int) ([]mvcc.Event, int64) {
	size := 0
	for i := range evs {
		if size >= maxBytes && evs[i].KV.ModRevision != evs[i-1].KV.ModRevision {
			return evs[:i:i], evs[i-1].KV.ModRevision
		}
		size += eventSize + payloadBytes(&evs[i])
	}
	return evs, last
}

// keptWindows is how many windows of history read from the store the hub
// keeps for the next passes.
const keptWindows = 2

// toSynced moves a caught-up watcher (next > h.rev) to the synced group.
func (h *Hub) toSynced(w *watcher) {
	w.s.behind.remove(w)
	w.state = stSynced
	h.synced.add(w)
}
