package watchhub

import (
	"context"
	"sort"
	"sync"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// Hub delivers the commits of a store to watches, etcd's way (docs/SPEC.md
// §3.13): every watch is in one of three groups.
//
//   - synced: caught up. [Hub.Notify] hands it the events of each new
//     revision at once, straight into its stream's queue.
//   - victim: its stream had no room when a revision came. It leaves the
//     synced group and waits for the reader to make room; it holds nothing,
//     for the hub keeps the most recent commits.
//   - unsynced: behind (from a past start revision, or served once since it
//     was a victim).
//
// A background goroutine serves the watches behind of the streams whose
// reader made room: each gets one response with all its events from its
// next revision to the end of the chunk of history that holds it — the
// hub's recent commits, or a window read from the store and kept for the
// next passes — at most MaxRevisionsPerResponse revisions (etcd's shape of
// catch-up); a caught-up watch rejoins the synced group. Responses share the
// events they deliver ([Batch]) instead of copying them, whenever a watch
// takes a run of them whole.
//
// A watch from a past revision starts unsynced; a live one falls behind
// only when its stream is full. Either is caught up only when its stream has
// room, so a reader that stops costs the hub nothing but the watches'
// bookkeeping and what its queue holds. A watch never skips
// anything: its next revision advances only past what was queued for it,
// and a watch that needs history that compaction removed gets a cancel with
// CompactRevision — queued like any response, never dropped (etcd#17529).
//
// There is no goroutine and no channel per watch: a watch is a small struct
// in its group (see docs/IMPLEMENTATION.md for its size). The hub runs two
// goroutines — catch-up and periodic progress — or none with Options.Manual.
//
// All methods are safe for concurrent use.
type Hub struct {
	hist History
	opts Options

	mu         sync.Mutex
	rev        int64 // the last revision notified
	closed     bool
	synced     syncedGroup
	streams    map[*Stream]struct{}
	waiting    map[*Stream]struct{} // streams with a progress request to answer
	held       map[*Stream]struct{} // streams with watches their Perturber held back
	pairs      []match              // Notify's scratch
	pend       []pending            // NotifyAll's scratch
	gen        uint32
	nwatch     int      // watchers in the hub
	recent     recent   // the most recent commits, for catch-up
	windows    []*chunk // the last windows of history read from the store, newest last
	eventBytes int      // the size of an event in the last window, for sizing the next

	readyMu sync.Mutex
	ready   []*Stream // streams with room and watchers behind

	kick chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup
}

// watcher is one watch. All fields are guarded by hub.mu.
type watcher struct {
	id       int64
	s        *Stream
	key, end string // end is "" for a single key or when inf
	start    int64  // the requested StartRevision
	next     int64  // the first revision whose events are not yet queued
	inf      bool   // every key ≥ key
	noPut    bool
	noDelete bool
	prevKV   bool
	progress bool
	sent     bool // events were queued since the last progress tick
	state    uint8
	slot     int32 // position in its watcherSet
	gen      uint32
	ord      int32
	pend     int32 // 1 + its index in NotifyAll's pending responses, or 0
	queued   int32 // responses with events queued on its stream; guarded by s.mu
}

// The states of a watcher.
const (
	stSynced   uint8 = iota
	stUnsynced       // behind: replaying history (or caught up once since it was a victim)
	stVictim         // fell behind because its stream was full when a revision came
	stGone
)

func (w *watcher) single() bool { return w.end == "" && !w.inf }

func (w *watcher) holds(key string) bool {
	switch {
	case w.inf:
		return key >= w.key
	case w.end == "":
		return key == w.key
	}
	return w.key <= key && key < w.end
}

func (w *watcher) wants(e *mvcc.Event) bool {
	if e.Type == mvcc.Put && w.noPut || e.Type == mvcc.Delete && w.noDelete {
		return false
	}
	return w.holds(e.KV.Key)
}

type match struct {
	w *watcher
	i int32
}

// New returns a hub over the store history h, whose current revision is
// rev. The store must call [Hub.Notify] for every later commit, in order.
func New(h History, rev int64, opts Options) *Hub {
	opts.setDefaults()
	hub := &Hub{
		hist:    h,
		opts:    opts,
		rev:     rev,
		streams: make(map[*Stream]struct{}),
		waiting: make(map[*Stream]struct{}),
		kick:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
	}
	hub.recent = recent{
		maxEvents: max(1, opts.MaxEventsPerRead/recentChunks),
		maxRevs:   opts.MaxRevisionsPerResponse,
		maxBytes:  opts.StreamBytes,
		maxTotal:  2 * opts.StreamBytes,
	}
	if !opts.Manual {
		hub.wg.Add(1)
		go hub.catchUpLoop()
		if opts.ProgressInterval > 0 {
			ticks, stop := opts.Clock.NewTicker(opts.ProgressInterval)
			hub.wg.Add(1)
			go func() {
				defer hub.wg.Done()
				defer stop()
				for {
					select {
					case <-hub.quit:
						return
					case <-ticks:
						hub.Tick()
					}
				}
			}()
		}
	}
	return hub
}

// NewStream returns a new, empty stream. If ctx is not nil, the stream is
// closed when ctx is done.
func (h *Hub) NewStream(ctx context.Context) *Stream {
	s := newStream(h)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		s.gone = true
		s.closeQueue()
		return s
	}
	h.streams[s] = struct{}{}
	h.mu.Unlock()
	if ctx != nil {
		stop := context.AfterFunc(ctx, s.Close)
		h.mu.Lock()
		s.stopCtx = stop
		h.mu.Unlock()
	}
	return s
}

// Notify delivers a commit to the synced watches. The store calls it (or
// [Hub.NotifyAll]) for every write revision, in revision order, once the
// revision is readable.
func (h *Hub) Notify(c mvcc.Commit) { h.NotifyAll([]mvcc.Commit{c}) }

// NotifyAll delivers the commits of one group commit — consecutive write
// revisions, in order, that became readable together — to the synced
// watches.
//
// The commits' events join the hub's recent commits (a [Batch] that the
// responses share), and each synced watch that takes some of them gets one
// response with all of its events of the group (docs/SPEC.md §3.4 and
// §3.13: whole revisions, several per response): a run of the batch when
// its events are consecutive in it (a watch of every key the commits wrote:
// the common case), else its own copy. So a group commit of sixteen puts
// costs a watch of their prefix one response, not sixteen. A response
// carries the group's last revision as header (or, when a watch's events
// are not one run and come in several responses, the revision before the
// next one's first): headers never go back (§3.12). A watch whose
// stream is full falls behind (a victim): it is caught up later from the
// recent commits, many revisions at once. A stream with a [Perturber] gets
// one response per revision, as from Notify: its adversary decides what to
// join.
func (h *Hub) NotifyAll(cs []mvcc.Commit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(cs) > 0 && cs[0].Revision <= h.rev {
		cs = cs[1:]
	}
	if h.closed || len(cs) == 0 {
		return
	}
	pend := h.pend[:0]
	for k := range cs {
		c := &cs[k]
		h.rev = c.Revision
		if len(h.held) > 0 {
			h.release(c.Revision)
		}
		if h.nwatch == 0 {
			// Nobody to catch up: keep nothing. The recent commits start
			// again with the next commit a watch may need.
			h.recent.reset()
			h.windows = nil
			continue
		}
		ch, at := h.recent.append(*c)
		h.gen++
		ord := int32(0)
		pairs := h.pairs[:0]
		for i := range c.Events {
			e := &c.Events[i]
			h.synced.each(e.KV.Key, func(w *watcher) {
				if c.Revision < w.next || !w.wants(e) {
					return
				}
				if w.gen != h.gen {
					w.gen, w.ord = h.gen, ord
					ord++
				}
				pairs = append(pairs, match{w: w, i: int32(i)})
			})
		}
		if len(c.Events) > 1 {
			// Group by watcher; each watcher's events stay in operation order.
			sort.SliceStable(pairs, func(a, b int) bool { return pairs[a].w.ord < pairs[b].w.ord })
		}
		for i := 0; i < len(pairs); {
			w := pairs[i].w
			j := i + 1
			for j < len(pairs) && pairs[j].w == w {
				j++
			}
			if p := w.s.pert; p != nil && p.Hold(w.id, c.Revision) {
				h.hold(w, c.Revision)
				i = j
				continue
			}
			var (
				b           *Batch
				first, last int
				evs         []mvcc.Event
				own         int
			)
			if first, last = at+int(pairs[i].i), at+int(pairs[j-1].i); last-first == j-i-1 {
				// Consecutive events of the commit: a run of the batch.
				b = ch.batch(w.prevKV)
			} else {
				evs = make([]mvcc.Event, 0, j-i)
				for _, m := range pairs[i:j] {
					e := c.Events[m.i]
					if !w.prevKV {
						e.PrevKV = nil
					}
					own += eventSize + payloadBytes(&e)
					evs = append(evs, e)
				}
			}
			i = j
			if w.s.pert != nil || len(cs) == 1 {
				// One revision (nothing to join it with), or a perturbed
				// stream: its adversary decides what to join.
				r := Response{WatchID: w.id, Revision: c.Revision, Events: evs, w: w}
				if b != nil {
					r.Events, r.src, r.at = b.events[first:last+1:last+1], b, int32(first)
				}
				h.deliver(w, r, own, c.Revision)
				continue
			}
			if w.pend > 0 {
				p := &pend[w.pend-1]
				switch {
				case b != nil && p.r.src == b && int(p.r.at)+len(p.r.Events) == first:
					p.r.Events = b.events[p.r.at : last+1 : last+1]
					continue
				case b == nil && p.r.src == nil:
					p.r.Events = append(p.r.Events, evs...)
					p.own += own
					continue
				}
				// Not a continuation: send what the watch has so far.
				p.r.Revision = cs[k-1].Revision
				w.pend = 0
				if !h.deliver(w, p.r, p.own, p.from) {
					continue // behind now, from p.from
				}
			}
			p := pending{w: w, from: c.Revision, own: own, r: Response{WatchID: w.id, Events: evs, w: w}}
			if b != nil {
				p.r.Events, p.r.src, p.r.at = b.events[first:last+1:last+1], b, int32(first)
			}
			pend = append(pend, p)
			w.pend = int32(len(pend))
		}
		clear(pairs)
		h.pairs = pairs[:0]
	}
	last := cs[len(cs)-1].Revision
	for i := range pend {
		p := &pend[i]
		if p.w.pend != int32(i+1) {
			continue // sent already, before the watch's next one
		}
		p.w.pend = 0
		p.r.Revision = last
		h.deliver(p.w, p.r, p.own, p.from)
	}
	clear(pend)
	h.pend = pend[:0]
	h.answerAll()
}

// pending is a response NotifyAll is still adding a group's revisions to.
type pending struct {
	w    *watcher
	from int64 // its first revision
	own  int
	r    Response
}

// deliver queues a synced watcher's response of the live revisions from
// `from` to r's last, and reports whether it did; if its stream is full the
// watcher falls behind from `from` (a victim). The caller holds h.mu.
func (h *Hub) deliver(w *watcher, r Response, own int, from int64) bool {
	if w.s.push(r, own) {
		w.next, w.sent = r.Events[len(r.Events)-1].KV.ModRevision+1, true
		return true
	}
	// The stream is full: the watch falls behind, from this revision.
	h.synced.remove(w)
	w.state, w.next = stVictim, from
	w.s.behind.add(w)
	return false
}

// answerAll answers the progress requests that wait. The caller holds h.mu.
func (h *Hub) answerAll() {
	for s := range h.waiting {
		h.answerProgress(s)
	}
}

// answerProgress queues the progress notification a stream asked for if it
// is true now: every watch of the stream is synced (all its events up to
// h.rev are queued) and h.rev is not below any watch's start revision minus
// one (etcd#15220, etcd#20221). The caller holds h.mu.
func (h *Hub) answerProgress(s *Stream) {
	if !s.progressReq || s.gone {
		delete(h.waiting, s)
		return
	}
	if len(s.behind.ws) == 0 && h.rev >= s.startBound()-1 &&
		s.push(Response{WatchID: InvalidWatchID, Revision: h.rev}, 0) {
		s.progressReq = false
		delete(h.waiting, s)
		return
	}
	// Not yet: answered after a later commit, when the watches behind have
	// caught up, or when the reader has made room (a failed push asks for it).
	h.waiting[s] = struct{}{}
}

// startBound returns the greatest start revision of the stream's watches.
func (s *Stream) startBound() int64 {
	if s.maxDirty {
		s.maxStart, s.maxDirty = 0, false
		for _, w := range s.watchers {
			s.maxStart = max(s.maxStart, w.start)
		}
	}
	return s.maxStart
}

// remove takes a watcher out of the hub. The caller holds h.mu.
func (h *Hub) remove(w *watcher) {
	switch w.state {
	case stSynced:
		h.synced.remove(w)
	case stUnsynced, stVictim:
		w.s.behind.remove(w)
	case stGone:
		return
	}
	w.state = stGone
	h.nwatch--
	delete(w.s.watchers, w.id)
	if w.start == w.s.maxStart {
		w.s.maxDirty = true
	}
	if w.progress {
		w.s.notifying--
	}
}

// dropStream removes a stream and its watchers. The caller holds h.mu.
func (h *Hub) dropStream(s *Stream) {
	if s.gone {
		return
	}
	for _, w := range s.watchers {
		h.remove(w)
	}
	s.gone = true
	delete(h.streams, s)
	delete(h.waiting, s)
	delete(h.held, s)
	if s.stopCtx != nil {
		s.stopCtx()
	}
}

// Tick sends the periodic progress notifications: one to every synced
// watch that asked for them, sent nothing since the last tick and whose
// start revision is at most the hub's revision plus one (etcd#20221). It
// runs every Options.ProgressInterval; call it directly with Options.Manual.
func (h *Hub) Tick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.streams {
		if s.notifying == 0 {
			continue
		}
		for _, w := range s.watchers {
			if !w.progress {
				continue
			}
			if w.state == stSynced && !w.sent && h.rev >= w.start-1 {
				s.push(Response{WatchID: w.id, Revision: h.rev}, 0)
			}
			w.sent = false
		}
	}
}

// Close closes every stream (their queued responses stay readable) and
// stops the hub's goroutines.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	var streams []*Stream
	for s := range h.streams {
		streams = append(streams, s)
		h.dropStream(s)
	}
	h.mu.Unlock()
	for _, s := range streams {
		s.closeQueue()
	}
	close(h.quit)
	h.wg.Wait()
}

// Stats counts the hub's streams and its watches by group.
type Stats struct {
	Streams, Synced, Unsynced, Victims int
}

// Stats returns the current counts.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := Stats{Streams: len(h.streams), Synced: h.synced.n}
	for s := range h.streams {
		for _, w := range s.behind.ws {
			if w.state == stVictim {
				st.Victims++
			} else {
				st.Unsynced++
			}
		}
	}
	return st
}

// markReady queues s for the catch-up goroutine.
func (h *Hub) markReady(s *Stream) {
	h.readyMu.Lock()
	if !s.inReady {
		s.inReady = true
		h.ready = append(h.ready, s)
	}
	h.readyMu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *Hub) takeReady() []*Stream {
	h.readyMu.Lock()
	defer h.readyMu.Unlock()
	r := h.ready
	h.ready = nil
	for _, s := range r {
		s.inReady = false
	}
	return r
}

func (h *Hub) catchUpLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.quit:
			return
		case <-h.kick:
			for h.pass() {
			}
		}
	}
}

// Step runs one catch-up pass and reports whether there was anything to do
// (then another pass may have more). A pass serves the watches behind on
// streams whose reader has made room: each either makes progress or waits
// for its reader, so passes never spin. With Options.Manual, Step and Flush
// are the only way watches behind catch up.
func (h *Hub) Step() bool { return h.pass() }

// Flush runs catch-up passes until there is nothing to do.
func (h *Hub) Flush() {
	for h.Step() {
	}
}
