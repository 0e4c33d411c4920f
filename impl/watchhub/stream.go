package watchhub

import (
	"context"
	"math/bits"
	"sync"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// Stream is a set of watches that share one bounded queue of responses and
// one reader, like one gRPC Watch stream of etcd. Create watches with
// [Stream.Watch]; read every response of every watch, in order, with
// [Stream.Recv].
//
// The queue holds at most Options.StreamCapacity data responses and
// Options.StreamBytes of events. A watch whose next response does not fit
// falls behind instead of blocking anything: it is caught up from the hub's
// recent commits or the store's history once the reader has made room, with
// many revisions in one response. Nothing is ever dropped or reordered on
// the way (docs/SPEC.md §3.13).
//
// All methods are safe for concurrent use.
type Stream struct {
	hub *Hub

	// Guarded by hub.mu.
	watchers    map[int64]*watcher
	behind      watcherSet // unsynced and victim watchers
	nextID      int64
	maxStart    int64 // greatest StartRevision of the watchers, if !maxDirty
	maxDirty    bool
	progressReq bool // a RequestProgress is waiting to be answered
	gone        bool // closed: no longer part of the hub
	notifying   int  // watchers with ProgressNotify
	stopCtx     func() bool
	pert        Perturber // the stream's adversary, or nil

	// Guarded by hub.readyMu.
	inReady bool

	// The queue, guarded by mu.
	mu       sync.Mutex
	q        []entry   // ring buffer: qb.q, or nil
	qb       *queueBuf // its holder, for the pool
	head, n  int
	data     int    // data responses queued (entries that are not control responses)
	bytes    int    // bytes charged for them
	tail     *Batch // the batch of the last data response queued, if it shares one
	tailPin  int    // what the run of responses of tail is charged
	ctrl     int    // control responses queued
	wantRoom bool   // the hub has something that did not fit
	closed   bool
	avail    chan struct{} // cap 1: something was queued; closed when the stream is
	room     chan struct{} // cap 1: a control response was read; closed when the stream is
}

// entry is one queued response. A data response is charged own — the
// memory of the events copied for it — and run: its share of what a run of
// consecutive responses sharing one batch is charged for pinning it (the
// batch's size when the response was queued, less what the run was charged
// before). When a response is read, its run charge passes to the next
// response of the run, if one is queued: a batch stays charged while any
// response of the stream holds it.
type entry struct {
	resp  Response
	own   int32
	run   int32
	data  bool
	taken bool // sent ahead by RecvMore: released, skipped by Recv
}

func newStream(h *Hub) *Stream {
	return &Stream{
		hub:      h,
		watchers: make(map[int64]*watcher),
		avail:    make(chan struct{}, 1),
		room:     make(chan struct{}, 1),
	}
}

// Recv returns the next response of the stream, waiting for one if none is
// queued. A queued response is returned even if ctx is done, so a done ctx
// makes Recv a non-blocking poll. After the stream is closed, Recv returns
// what was queued, then ErrClosed.
func (s *Stream) Recv(ctx context.Context) (Response, error) {
	for {
		s.mu.Lock()
		if s.n > 0 {
			e := s.pop()
			wake := s.wakeHub()
			s.mu.Unlock()
			if wake {
				s.hub.markReady(s)
			}
			if e.taken {
				continue // its events went out with an earlier response
			}
			return e.resp, nil
		}
		if s.closed {
			s.mu.Unlock()
			return Response{}, ErrClosed
		}
		s.mu.Unlock()
		select {
		case <-s.avail:
		case <-ctx.Done():
			return Response{}, ctx.Err()
		}
	}
}

// wakeHub reports whether the hub, which has something that did not fit,
// should be told that the reader made room, and forgets that it wanted it.
// The caller holds s.mu.
func (s *Stream) wakeHub() bool {
	opts := &s.hub.opts
	wake := s.wantRoom && s.data <= opts.StreamCapacity/2 && s.bytes <= opts.StreamBytes/2
	if wake {
		s.wantRoom = false
	}
	return wake
}

// RecvMore takes, out of their turn, the responses of r's watch that the
// stream would deliver next for it, so that its reader can send them with r
// — the response it just received from [Stream.Recv] — as one response with
// more revisions, as a watch that fell behind gets (docs/SPEC.md §3.13). It
// waits for nothing: it appends to more the queued responses of r's watch
// in order, and stops before one that has no events or would bring the
// events to more than maxEvents or their memory (keys, values, previous
// key-values) to more than maxBytes, and at any response without events
// (a creation, a cancel, a progress notification, a compaction cancel — of
// any watch of the stream). So what the reader sends stays in order for
// every watch (§3.1), and no response without events is overtaken by an
// event that was queued after it (§3.6, §3.12). r must have events.
//
// It returns at once when r's watch has no other response counted as
// queued (each watch counts the responses the hub queues for it), so a
// reader that keeps up does not scan the queue for every response.
func (s *Stream) RecvMore(r Response, more []Response, maxEvents, maxBytes int) []Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := int32(0) // the watch's responses queued and not yet looked at
	if r.w != nil {
		left = r.w.queued
	}
	if left == 0 || len(r.Events) >= maxEvents {
		return more // nothing to join, or no room (a catch-up response)
	}
	events, bytes := len(r.Events), eventsBytes(r.Events)
	for i := range s.n {
		e := &s.q[(s.head+i)%len(s.q)]
		switch {
		case e.taken:
			continue
		case !e.data || len(e.resp.Events) == 0:
			return more
		case e.resp.WatchID != r.WatchID:
			continue
		}
		events += len(e.resp.Events)
		bytes += eventsBytes(e.resp.Events)
		if events > maxEvents || bytes > maxBytes {
			return more
		}
		// Release what it was charged but its share of a run, which passes
		// on when the entry is popped (see pop).
		more = append(more, e.resp)
		e.taken = true
		e.resp.Events = nil
		if e.resp.w != nil {
			e.resp.w.queued--
		}
		s.data--
		s.bytes -= int(e.own)
		e.own = 0
		if s.data == 0 {
			s.tail = nil
		}
		if left--; left == 0 {
			break
		}
	}
	return more
}

func eventsBytes(evs []mvcc.Event) int {
	n := len(evs) * eventSize
	for i := range evs {
		n += payloadBytes(&evs[i])
	}
	return n
}

// pop takes the head of the queue and releases what it was charged. The
// caller holds s.mu and has checked s.n > 0.
func (s *Stream) pop() entry {
	e := s.q[s.head]
	s.q[s.head] = entry{}
	s.head = (s.head + 1) % len(s.q)
	s.n--
	if !e.data {
		s.ctrl--
		if !s.closed {
			select {
			case s.room <- struct{}{}:
			default:
			}
		}
	} else {
		if !e.taken {
			s.data--
			if e.resp.w != nil {
				e.resp.w.queued--
			}
		}
		s.bytes -= int(e.own)
		if e.run > 0 {
			// The run's charge passes to its next response, if queued.
			if next := s.nextData(); next != nil && next.resp.src == e.resp.src {
				next.run += e.run
			} else {
				s.bytes -= int(e.run)
			}
		}
		if s.data == 0 {
			s.tail = nil
		}
	}
	if s.n == 0 {
		// An idle stream keeps no buffer: it goes back to the pool (every
		// slot was cleared when read).
		putQueue(s.qb)
		s.q, s.qb, s.head = nil, nil, 0
	}
	return e
}

// A queue's buffers: minQueue entries, then twice as many each time it is
// full. The buffers of queues that emptied or grew wait in pools by size,
// so that a stream whose reader keeps up allocates none per response, and
// an idle one holds none.
const (
	minQueue    = 4
	queueSizes  = 10 // pooled sizes: minQueue << 0 .. queueSizes-1
	maxPooledQ  = minQueue << (queueSizes - 1)
	queueShift0 = 2 // log2(minQueue)
)

type queueBuf struct{ q []entry }

var queuePools [queueSizes]sync.Pool

func queueClass(size int) int { return bits.Len(uint(size)) - 1 - queueShift0 }

func getQueue(size int) *queueBuf {
	if size <= maxPooledQ {
		if b, ok := queuePools[queueClass(size)].Get().(*queueBuf); ok {
			return b
		}
	}
	return &queueBuf{q: make([]entry, size)}
}

// putQueue pools a buffer whose slots are all cleared.
func putQueue(b *queueBuf) {
	if b != nil && len(b.q) <= maxPooledQ {
		queuePools[queueClass(len(b.q))].Put(b)
	}
}

// nextData returns the first queued data response, or nil. Only control
// responses (at most MaxControlResponses) can precede it.
func (s *Stream) nextData() *entry {
	for i := range s.n {
		if e := &s.q[(s.head+i)%len(s.q)]; e.data {
			return e
		}
	}
	return nil
}

// runCharge returns what queuing r charges the stream beyond the memory of
// its own: the pin of r's batch if r starts a new run of responses sharing
// it, or what the batch grew by since the run was charged. The caller holds
// s.mu.
func (s *Stream) runCharge(r *Response) int {
	switch {
	case r.src == nil:
		return 0
	case r.src != s.tail:
		return r.src.pin
	}
	return max(0, r.src.pin-s.tailPin)
}

// fits reports whether a data response charged `bytes` fits now. The caller
// holds s.mu.
func (s *Stream) fits(bytes int) bool {
	o := &s.hub.opts
	return s.data == 0 || s.data < o.StreamCapacity && s.bytes+bytes <= o.StreamBytes
}

// push queues a data response if it fits, and otherwise records that the
// hub wants room. own is the memory of the events copied for r (0 when it
// shares a batch or has none). The caller holds hub.mu.
func (s *Stream) push(r Response, own int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	run := s.runCharge(&r)
	if !s.fits(own + run) {
		s.wantRoom = true
		return false
	}
	s.data++
	s.bytes += own + run
	if r.w != nil {
		r.w.queued++
	}
	if r.src != s.tail {
		s.tailPin = 0
	}
	s.tail, s.tailPin = r.src, s.tailPin+run
	s.enqueue(entry{resp: r, own: int32(own), run: int32(run), data: true})
	return true
}

// pushCtrl queues a control response; these do not count against the
// capacity (Watch and Cancel bound them). The caller holds hub.mu.
func (s *Stream) pushCtrl(r Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.ctrl++
	s.enqueue(entry{resp: r})
}

// space returns the bytes that may still be queued now, and whether no data
// response is queued (then one revision of any size may be). The caller
// holds hub.mu.
func (s *Stream) space() (bytes int, empty bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hub.opts.StreamBytes - s.bytes, s.data == 0
}

// waitRoom reports whether a data response charged `bytes` does not fit
// now, and if so, asks the reader to wake the hub once it has made room.
// The check and the request are one step: a reader that drains the queue in
// between would otherwise never wake the hub. The caller holds hub.mu.
func (s *Stream) waitRoom(bytes int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.fits(bytes) {
		return false
	}
	s.wantRoom = true
	return true
}

func (s *Stream) enqueue(e entry) {
	if s.q == nil {
		s.qb = getQueue(minQueue)
		s.q = s.qb.q
	}
	if s.n == len(s.q) {
		qb := getQueue(2 * len(s.q))
		for i := range s.n {
			j := (s.head + i) % len(s.q)
			qb.q[i] = s.q[j]
			s.q[j] = entry{}
		}
		putQueue(s.qb)
		s.qb, s.q, s.head = qb, qb.q, 0
	}
	s.q[(s.head+s.n)%len(s.q)] = e
	s.n++
	select {
	case s.avail <- struct{}{}:
	default:
	}
}

// closeQueue stops the queue: Recv drains it, then returns ErrClosed.
func (s *Stream) closeQueue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.avail)
		close(s.room)
	}
}

// waitCtrlRoom waits until the stream may take another control response,
// then returns with hub.mu held.
func (s *Stream) waitCtrlRoom(ctx context.Context) error {
	h := s.hub
	for {
		h.mu.Lock()
		s.mu.Lock()
		full, closed := s.ctrl >= h.opts.MaxControlResponses, s.closed
		s.mu.Unlock()
		if closed || s.gone {
			h.mu.Unlock()
			return ErrClosed
		}
		if !full {
			return nil
		}
		h.mu.Unlock()
		select {
		case <-s.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Watch creates a watch on the stream and returns its ID. The stream first
// carries the created response (header revision R₀ = the hub's revision),
// then the watch's events from its start revision on (docs/SPEC.md §3.10):
// a start of 0 means R₀+1, a start above R₀ waits for it, a start below the
// compact revision is cancelled at once with CompactRevision (§3.11), and
// any other past start is replayed from the store's history (§3.5).
//
// A rejected request (negative start revision, empty range, WatchID in use
// or negative) gets a created-and-canceled response with WatchID -1 and
// etcd's reason, and Watch returns the matching error. Watch waits while
// the stream holds MaxControlResponses unread control responses, until ctx
// is done.
func (s *Stream) Watch(ctx context.Context, req Request) (int64, error) {
	if err := s.waitCtrlRoom(ctx); err != nil {
		return InvalidWatchID, err
	}
	h := s.hub
	defer h.mu.Unlock()
	reject := func(err error) (int64, error) {
		s.pushCtrl(Response{WatchID: InvalidWatchID, Revision: h.rev, Created: true, Canceled: true, CancelReason: err.Error()})
		return InvalidWatchID, err
	}
	key := req.Key
	if key == "" {
		key = "\x00"
	}
	switch {
	case req.StartRevision < 0:
		return reject(ErrNegativeStartRevision)
	case req.RangeEnd != "" && req.RangeEnd != "\x00" && req.RangeEnd <= key:
		return reject(ErrEmptyRange)
	case req.WatchID < 0:
		return reject(ErrInvalidWatchID)
	case req.WatchID > 0 && s.watchers[req.WatchID] != nil:
		return reject(ErrDuplicateWatchID)
	}
	id := req.WatchID
	if id == 0 {
		for s.watchers[s.nextID] != nil {
			s.nextID++
		}
		id = s.nextID
		s.nextID++
	}
	w := &watcher{
		id: id, s: s, key: key, start: req.StartRevision,
		noPut: req.NoPut, noDelete: req.NoDelete, prevKV: req.PrevKV, progress: req.ProgressNotify,
		slot: -1,
	}
	switch req.RangeEnd {
	case "":
	case "\x00":
		w.inf = true
	default:
		w.end = req.RangeEnd
	}
	r0 := h.rev
	s.pushCtrl(Response{WatchID: id, Revision: r0, Created: true})
	start := req.StartRevision
	if start > 0 && start <= r0 {
		if c := h.hist.CompactRevision(); start < c {
			// The watch needs compacted history: cancel it now (§3.11).
			s.pushCtrl(Response{WatchID: id, Canceled: true, CompactRevision: c})
			return id, nil
		}
	}
	s.watchers[id] = w
	h.nwatch++
	if start > s.maxStart {
		s.maxStart = start
	}
	if w.progress {
		s.notifying++
	}
	if start == 0 || start > r0 {
		// Now or the future: live from the start (etcd's synced group).
		w.next = max(start, r0+1)
		w.state = stSynced
		h.synced.add(w)
	} else {
		// The past: replay history first (etcd's unsynced group).
		w.next = start
		w.state = stUnsynced
		s.behind.add(w)
		h.markReady(s)
	}
	h.answerProgress(s)
	return id, nil
}

// Cancel ends the watch id: the stream carries a canceled response for it,
// after whatever was already queued for it. Cancel of an ID not in use
// returns ErrWatchNotFound and sends nothing (as etcd).
func (s *Stream) Cancel(ctx context.Context, id int64) error {
	if err := s.waitCtrlRoom(ctx); err != nil {
		return err
	}
	h := s.hub
	defer h.mu.Unlock()
	w := s.watchers[id]
	if w == nil {
		return ErrWatchNotFound
	}
	h.remove(w)
	s.pushCtrl(Response{WatchID: id, Revision: h.rev, Canceled: true})
	h.answerProgress(s)
	return nil
}

// RequestProgress asks for a progress notification for the whole stream: a
// response with WatchID -1, no events and header revision R, meaning that
// every event up to R of every watch of the stream has been sent before it
// (docs/SPEC.md §3.6). It is sent as soon as that is true and R is at least
// every watch's start revision minus one (§3.10): at once when every watch
// of the stream is live, otherwise once the ones behind have caught up. A
// request made while one is pending is merged with it.
func (s *Stream) RequestProgress() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.gone {
		return
	}
	s.progressReq = true
	h.answerProgress(s)
}

// Close ends every watch of the stream. Responses already queued can still
// be read; then Recv returns ErrClosed.
func (s *Stream) Close() {
	h := s.hub
	h.mu.Lock()
	h.dropStream(s)
	h.mu.Unlock()
	s.closeQueue()
}
