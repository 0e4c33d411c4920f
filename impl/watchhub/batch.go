package watchhub

import (
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// Batch is a run of whole revisions' events that the responses of many
// watches share: a stretch of the most recent commits, or a window of
// history read from the store for catch-up. A response whose events are a
// run of a batch refers to it ([Response.Shared]) instead of holding a copy,
// so an event is held in memory once, and can be encoded for the wire once,
// however many watches and streams deliver it.
//
// A batch's events never change once a response has shown them; a batch of
// recent commits may grow (the hub appends later commits), never beyond its
// capacity, so a slice of it stays valid.
type Batch struct {
	events []mvcc.Event // the batch's array; the hub sets events[:n] under its lock
	pin    int          // what a stream is charged for a run of responses of the batch

	memo   atomic.Pointer[any]
	memoMu sync.Mutex
}

// Events returns the batch's first n events, in revision and operation
// order. n must not exceed at+len(r.Events) for some response r of the batch
// that the caller received (those events are set for good).
func (b *Batch) Events(n int) []mvcc.Event { return b.events[:n:n] }

// Memo returns the value newValue made for b: newValue is called once, by
// the first caller, and every caller gets its value. It is the place for
// what a server derives from the batch's events once for all the responses
// that share them, such as their wire encoding. The value must be safe for
// concurrent use: every stream that delivers the batch gets it.
func (b *Batch) Memo(newValue func() any) any {
	if p := b.memo.Load(); p != nil {
		return *p
	}
	b.memoMu.Lock()
	defer b.memoMu.Unlock()
	if p := b.memo.Load(); p != nil {
		return *p
	}
	v := newValue()
	b.memo.Store(&v)
	return v
}

// eventSize is the size of an event's struct in a batch or a copy.
const eventSize = int(unsafe.Sizeof(mvcc.Event{}))

// payloadBytes estimates what an event's key, value and PrevKV hold beyond
// its struct (the strings, the PrevKV's struct).
func payloadBytes(e *mvcc.Event) int {
	n := len(e.KV.Key) + len(e.KV.Value)
	if p := e.PrevKV; p != nil {
		n += int(unsafe.Sizeof(*p)) + len(p.Key) + len(p.Value)
	}
	return n
}

// chunk is a run of whole revisions [from, last] and all their events:
// either a stretch of recent commits (the hub's recent ring; it grows until
// closed) or a window of history read from the store (closed at once).
// Responses are served from chunks, sharing their events when a watch takes
// a run of them whole. Guarded by hub.mu.
type chunk struct {
	from, last int64
	n          int    // events set
	revs       int    // revisions in it
	bytes      int    // its memory: the arrays of both variants, and the events' payload
	full       *Batch // the events with their PrevKV, or nil (a window read without)
	bare       *Batch // the same events without PrevKV, or nil until needed
	closed     bool   // takes no more commits
	byKey      []int32
}

// batch returns the variant of the chunk's events a watch with or without
// prevKV delivers, making the variant without PrevKV if needed; nil if the
// chunk cannot serve it (a window read without PrevKV, for a prevKV watch).
func (ch *chunk) batch(prevKV bool) *Batch {
	if prevKV {
		return ch.full
	}
	if ch.bare == nil {
		// A closed chunk read with PrevKV, first needed without.
		evs := make([]mvcc.Event, ch.n)
		copy(evs, ch.full.events[:ch.n])
		for i := range evs {
			evs[i].PrevKV = nil
		}
		ch.bytes += len(evs) * eventSize
		ch.full.pin = ch.bytes
		ch.bare = &Batch{events: evs, pin: ch.bytes}
	}
	return ch.bare
}

// search returns the position of the chunk's first event at or after
// revision rev.
func (ch *chunk) search(rev int64) int {
	evs := ch.anyEvents()
	return sort.Search(ch.n, func(i int) bool { return evs[i].KV.ModRevision >= rev })
}

func (ch *chunk) anyEvents() []mvcc.Event {
	if ch.full != nil {
		return ch.full.events
	}
	return ch.bare.events
}

// index sorts the positions of a closed chunk's events by key, for the
// watches that take only a few of its keys (see candidates).
func (ch *chunk) index() {
	evs := ch.anyEvents()
	ch.byKey = make([]int32, ch.n)
	for i := range ch.byKey {
		ch.byKey[i] = int32(i)
	}
	sort.SliceStable(ch.byKey, func(a, b int) bool { return evs[ch.byKey[a]].KV.Key < evs[ch.byKey[b]].KV.Key })
}

// candidates returns the positions at or after `from` of the events on w's
// keys, in commit order, from a closed chunk's key index — or dense, when
// w's keys hold so large a share of the chunk that scanning it in order is
// cheaper than collecting and sorting their positions (always for a chunk
// that is open or has no index).
func (ch *chunk) candidates(w *watcher, from int) (pos []int32, dense bool) {
	k := ch.byKey
	if k == nil {
		return nil, true
	}
	evs := ch.anyEvents()
	lo := sort.Search(len(k), func(i int) bool { return evs[k[i]].KV.Key >= w.key })
	var hi int
	switch {
	case w.inf:
		hi = len(k)
	case w.end == "":
		hi = lo + sort.Search(len(k)-lo, func(i int) bool { return evs[k[lo+i]].KV.Key > w.key })
	default:
		hi = lo + sort.Search(len(k)-lo, func(i int) bool { return evs[k[lo+i]].KV.Key >= w.end })
	}
	if 4*(hi-lo) >= len(k) {
		return nil, true
	}
	for _, p := range k[lo:hi] {
		if int(p) >= from {
			pos = append(pos, p)
		}
	}
	sortInt32s(pos)
	return pos, false
}

func sortInt32s(a []int32) { sort.Slice(a, func(i, j int) bool { return a[i] < a[j] }) }

// recentChunks is how many chunks of recent commits the hub keeps, at most.
const recentChunks = 4

// recent is the hub's memory of the most recent commits: up to recentChunks
// chunks, oldest first, covering every revision from the first one's from
// to the hub's revision. Notify appends each commit; a watch that falls
// behind by less than that is caught up from here without reading the
// store. Guarded by hub.mu.
type recent struct {
	chunks []*chunk
	// Limits of one chunk: events, revisions, bytes (a single commit may
	// exceed them: it is a chunk of its own); and of all of them, bytes.
	maxEvents, maxRevs, maxBytes, maxTotal int
}

// append adds a commit's events (both variants) and returns the chunk and
// the position they went to.
func (r *recent) append(c mvcc.Commit) (*chunk, int) {
	var ch *chunk
	if k := len(r.chunks); k > 0 {
		ch = r.chunks[k-1]
		if ch.closed || ch.n+len(c.Events) > len(ch.full.events) {
			ch.closed = true
			ch = nil
		}
	}
	if ch == nil {
		// The chunk's arrays: for maxEvents events, or as many as the last
		// chunk's events suggest fit in maxBytes (at first, a quarter of
		// maxBytes).
		size := min(r.maxEvents, max(1, r.maxBytes/(8*eventSize)))
		if k := len(r.chunks); k > 0 {
			if last := r.chunks[k-1]; last.n > 0 {
				per := 2*eventSize + (last.bytes-2*len(last.full.events)*eventSize)/last.n
				size = min(size, max(1, r.maxBytes/per))
			}
		}
		size = max(size, len(c.Events))
		ch = &chunk{from: c.Revision, full: &Batch{events: make([]mvcc.Event, size)},
			bare: &Batch{events: make([]mvcc.Event, size)}, bytes: 2 * size * eventSize}
		r.chunks = append(r.chunks, ch)
	}
	at := ch.n
	copy(ch.full.events[at:], c.Events)
	copy(ch.bare.events[at:], c.Events)
	for i := range c.Events {
		ch.bare.events[at+i].PrevKV = nil
		ch.bytes += payloadBytes(&c.Events[i])
	}
	ch.n += len(c.Events)
	ch.last = c.Revision
	ch.revs++
	ch.full.pin, ch.bare.pin = ch.bytes, ch.bytes
	if ch.n >= r.maxEvents || ch.revs >= r.maxRevs || ch.bytes >= r.maxBytes {
		ch.closed = true
	}
	// Forget the oldest chunks beyond the limits (never the newest).
	total := 0
	for _, ch := range r.chunks {
		total += ch.bytes
	}
	for len(r.chunks) > 1 && (len(r.chunks) > recentChunks || total > r.maxTotal) {
		total -= r.chunks[0].bytes
		r.chunks[0] = nil
		r.chunks = r.chunks[1:]
	}
	return ch, at
}

// reset forgets every recent commit (nobody watches: nothing to keep).
func (r *recent) reset() {
	clear(r.chunks)
	r.chunks = r.chunks[:0]
}

// newWindow makes a closed chunk of a window of history read from the
// store: the revisions [from, last], with PrevKV if withPrev.
func newWindow(from, last int64, evs []mvcc.Event, withPrev bool) *chunk {
	ch := &chunk{from: from, last: last, n: len(evs), closed: true, bytes: len(evs) * eventSize}
	prev := int64(0)
	for i := range evs {
		ch.bytes += payloadBytes(&evs[i])
		if r := evs[i].KV.ModRevision; r != prev {
			ch.revs, prev = ch.revs+1, r
		}
	}
	b := &Batch{events: evs, pin: ch.bytes}
	if withPrev {
		ch.full = b
	} else {
		ch.bare = b
	}
	return ch
}
