package watchhub

import (
	"context"
	"testing"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/mvcc"
)

// A stream's memory accounting (docs/IMPLEMENTATION.md, "What a slow reader
// holds"): a data response is queued only if the stream has nothing queued,
// or fewer than StreamCapacity data responses and room in StreamBytes for
// what it adds; and what the stream is charged is exactly the memory of the
// events copied for its queued responses plus, for every run of consecutive
// queued responses sharing a batch, the largest size the batch had when a
// response of the run was queued — so a batch stays charged while any
// response of the stream holds it. Checked against a model of runs over
// random pushes (shared, copied, without events, control) and reads, with
// batches that grow as the hub's newest chunk of commits does.
func TestStreamAccountingMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := New(nil, 0, Options{Manual: true,
			StreamCapacity: rapid.IntRange(1, 6).Draw(t, "capacity"),
			StreamBytes:    rapid.IntRange(1, 300).Draw(t, "bytes")})
		s := newStream(h)
		batches := []*Batch{{pin: 10}, {pin: 50}, {pin: 200}}
		type mentry struct {
			data bool
			src  *Batch
			own  int
			run  int // the run it belongs to, if it shares a batch
		}
		var q []mentry
		charge := map[int]int{} // run → its charge
		nextRun := 0
		tail := func() *mentry {
			for i := len(q) - 1; i >= 0; i-- {
				if q[i].data {
					return &q[i]
				}
			}
			return nil
		}
		check := func() {
			want, data := 0, 0
			alive := map[int]bool{}
			for _, e := range q {
				if !e.data {
					continue
				}
				data++
				want += e.own
				if e.src != nil {
					alive[e.run] = true
				}
			}
			for r := range alive {
				want += charge[r]
			}
			if s.bytes != want || s.data != data || s.n != len(q) {
				t.Fatalf("stream charged %d bytes for %d data responses of %d queued; model %d, %d, %d", s.bytes, s.data, s.n, want, data, len(q))
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				r := Response{WatchID: 1, Revision: 1}
				own := 0
				var src *Batch
				switch rapid.IntRange(0, 2).Draw(t, "kind") {
				case 0: // shared, from a batch that may have grown
					src = rapid.SampledFrom(batches).Draw(t, "batch")
					src.pin += rapid.IntRange(0, 20).Draw(t, "growth")
					r.Events, r.src = []mvcc.Event{{}}, src
				case 1: // copied
					own = rapid.IntRange(1, 100).Draw(t, "own")
					r.Events = []mvcc.Event{{}}
				}
				// The model's verdict.
				need, run := own, -1
				if src != nil {
					if tl := tail(); tl != nil && tl.src == src {
						run = tl.run
						need += max(0, src.pin-charge[run])
					} else {
						need += src.pin
					}
				}
				queued := 0
				for _, e := range q {
					if e.data {
						queued++
					}
				}
				fits := queued == 0 || queued < h.opts.StreamCapacity && s.bytes+need <= h.opts.StreamBytes
				h.mu.Lock()
				ok := s.push(r, own)
				h.mu.Unlock()
				if ok != fits {
					t.Fatalf("push needing %d with %d queued, %d charged: queued %v, want %v", need, queued, s.bytes, ok, fits)
				}
				if ok {
					if src != nil {
						if run < 0 {
							run, nextRun = nextRun, nextRun+1
						}
						charge[run] = max(charge[run], src.pin)
					}
					q = append(q, mentry{data: true, src: src, own: own, run: run})
				}
				check()
			},
			"control": func(t *rapid.T) {
				h.mu.Lock()
				s.pushCtrl(Response{WatchID: 2, Created: true})
				h.mu.Unlock()
				q = append(q, mentry{})
				check()
			},
			"recv": func(t *rapid.T) {
				if len(q) == 0 {
					t.Skip("empty")
				}
				s.mu.Lock()
				e := s.pop()
				s.mu.Unlock()
				if e.data != q[0].data || e.resp.src != q[0].src {
					t.Fatalf("read %+v, want the model's %+v", e, q[0])
				}
				q = q[1:]
				check()
			},
		})
	})
}

// bigHistory is a store's history of one-event revisions of large values,
// for the window tests: it records the most events a read returned.
type bigHistory struct {
	head    int64
	value   string
	maxRead int
}

func (h *bigHistory) CompactRevision() int64 { return -1 }

func (h *bigHistory) Events(from, to int64, maxEvents int, withPrev bool) ([]mvcc.Event, int64, error) {
	var evs []mvcc.Event
	last := to
	for r := max(from, 2); r <= to; r++ {
		if maxEvents > 0 && len(evs) >= maxEvents {
			last = r - 1
			break
		}
		evs = append(evs, mvcc.Event{KV: mvcc.KeyValue{Key: "k", Value: h.value, CreateRevision: 2, ModRevision: r, Version: r - 1}})
	}
	h.maxRead = max(h.maxRead, len(evs))
	return evs, last, nil
}

// SPEC §3.13: a window of history is read in about StreamBytes, whatever
// the size of the values (the store reads whole revisions by count: the hub
// sizes the count from the events it has seen), and a watch catching up
// over values of 1 MiB gets responses of at most StreamBytes and one
// revision more, never a read of MaxEventsPerRead of them.
func TestWindowsAreBoundedInBytes(t *testing.T) {
	const value = 1 << 20
	hist := &bigHistory{head: 200, value: string(make([]byte, value))}
	h := New(hist, hist.head, Options{Manual: true})
	defer h.Close()
	s := h.NewStream(nil)
	if _, err := s.Watch(context.Background(), Request{Key: "k", StartRevision: 2}); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	limit := h.opts.StreamBytes/value + 1
	next := int64(2)
	for range 1000 {
		h.Flush()
		r, err := s.Recv(done)
		if err != nil {
			continue
		}
		if r.Created {
			continue
		}
		if len(r.Events) > limit {
			t.Fatalf("a response of %d values of 1 MiB, above StreamBytes (%d) and one more", len(r.Events), h.opts.StreamBytes)
		}
		for _, e := range r.Events {
			if e.KV.ModRevision != next {
				t.Fatalf("revision %d, want %d", e.KV.ModRevision, next)
			}
			next++
		}
		if next > hist.head {
			break
		}
	}
	if next <= hist.head {
		t.Fatalf("caught up to %d of %d", next-1, hist.head)
	}
	if hist.maxRead > limit {
		t.Fatalf("a read of %d values of 1 MiB: the window was not sized by bytes (StreamBytes %d)", hist.maxRead, h.opts.StreamBytes)
	}
}

// Stream.RecvMore, which lets a reader send the responses of a watch queued
// behind the one it received as one (docs/SPEC.md §3.13), changes neither
// what each watch receives nor where it stands against the responses
// without events: every watch gets its responses' events exactly once and
// in order (§3.1, §3.2), a response without events (creation, cancel,
// progress notification, compaction cancel) is never overtaken by events
// queued after it (§3.6, §3.12), the bounds on events and bytes hold, and
// the stream's charges all return to zero once everything is read (its
// memory bound, docs/IMPLEMENTATION.md "What a slow reader holds"). Random
// pushes of shared, copied and event-less responses of three watches,
// controls, and reads with and without RecvMore.
func TestRecvMoreKeepsEachWatchsOrder(t *testing.T) {
	pollCtx, cancel := context.WithCancel(context.Background())
	cancel() // Recv with it polls
	rapid.Check(t, func(t *rapid.T) {
		h := New(nil, 0, Options{Manual: true, StreamCapacity: 1000, StreamBytes: 1 << 30})
		s := newStream(h)
		batches := []*Batch{{pin: 10}, {pin: 50}}
		watchers := map[int64]*watcher{1: {id: 1, s: s}, 2: {id: 2, s: s}, 3: {id: 3, s: s}}
		rev := int64(0)
		type item struct {
			watch  int64
			rev    int64 // the response's (first) revision, or its header if no events
			events bool
		}
		var pushed, got []item
		maxEvents := rapid.IntRange(1, 4).Draw(t, "maxEvents")
		maxBytes := rapid.IntRange(eventSize, 6*eventSize).Draw(t, "maxBytes")
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				for range rapid.IntRange(1, 6).Draw(t, "pushes") { // runs of a few
					rev++
					id := rapid.Int64Range(1, 2).Draw(t, "watch")
					r := Response{WatchID: id, Revision: rev}
					if rapid.Bool().Draw(t, "counted") { // as the hub queues them, or not
						r.w = watchers[id]
					}
					own := 0
					switch k := rapid.IntRange(0, 9).Draw(t, "kind"); {
					case k < 4: // shared
						r.Events, r.src = []mvcc.Event{{KV: mvcc.KeyValue{ModRevision: rev}}}, rapid.SampledFrom(batches).Draw(t, "batch")
					case k < 8: // copied
						n := rapid.IntRange(1, 3).Draw(t, "n")
						for range n {
							r.Events = append(r.Events, mvcc.Event{KV: mvcc.KeyValue{ModRevision: rev}})
						}
						own = n * eventSize
					case k == 8: // a progress notification of the watch
					default: // a compaction cancel
						r.Revision, r.CompactRevision, r.Canceled = 0, rev, true
					}
					h.mu.Lock()
					ok := s.push(r, own)
					h.mu.Unlock()
					if !ok {
						t.Fatalf("push refused with room for everything")
					}
					pushed = append(pushed, item{id, rev, len(r.Events) > 0})
				}
			},
			"control": func(t *rapid.T) {
				rev++
				h.mu.Lock()
				s.pushCtrl(Response{WatchID: rapid.Int64Range(1, 3).Draw(t, "watch"), Revision: rev, Created: true})
				h.mu.Unlock()
				pushed = append(pushed, item{rev: rev})
			},
			"recv": func(t *rapid.T) {
				r, err := s.Recv(pollCtx)
				if err != nil {
					t.Skip("nothing queued")
				}
				first := r.Revision
				if len(r.Events) > 0 {
					first = r.Events[0].KV.ModRevision
				} else if r.CompactRevision != 0 {
					first = r.CompactRevision
				}
				got = append(got, item{r.WatchID, first, len(r.Events) > 0})
				if len(r.Events) == 0 {
					return
				}
				more := s.RecvMore(r, nil, maxEvents, maxBytes)
				events, bytes := len(r.Events), eventsBytes(r.Events)
				for _, m := range more {
					if m.WatchID != r.WatchID || len(m.Events) == 0 {
						t.Fatalf("RecvMore for watch %d gave %+v", r.WatchID, m)
					}
					events += len(m.Events)
					bytes += eventsBytes(m.Events)
					got = append(got, item{m.WatchID, m.Events[0].KV.ModRevision, true})
				}
				if len(more) > 0 && (events > maxEvents || bytes > maxBytes) {
					t.Fatalf("joined %d events of %d bytes, bounds %d and %d", events, bytes, maxEvents, maxBytes)
				}
			},
		})
		for {
			r, err := s.Recv(pollCtx)
			if err != nil {
				break
			}
			first := r.Revision
			if len(r.Events) > 0 {
				first = r.Events[0].KV.ModRevision
			} else if r.CompactRevision != 0 {
				first = r.CompactRevision
			}
			got = append(got, item{r.WatchID, first, len(r.Events) > 0})
		}
		if s.n != 0 || s.data != 0 || s.bytes != 0 || s.ctrl != 0 {
			t.Fatalf("drained stream still holds %d entries, %d data, %d bytes charged, %d controls", s.n, s.data, s.bytes, s.ctrl)
		}
		for id, w := range watchers {
			if w.queued != 0 {
				t.Fatalf("drained stream still counts %d responses queued for watch %d", w.queued, id)
			}
		}
		if len(got) != len(pushed) {
			t.Fatalf("read %d responses, %d were queued", len(got), len(pushed))
		}
		// Each watch's responses in order; every response without events
		// read after exactly the responses queued before it.
		pos := map[int64]int{}
		for i, it := range got {
			pos[it.rev] = i
		}
		for i, it := range pushed {
			j, ok := pos[it.rev]
			if !ok {
				t.Fatalf("response at revision %d queued, never read", it.rev)
			}
			for _, before := range pushed[:i] {
				if (before.watch == it.watch || !it.events) && pos[before.rev] > j {
					t.Fatalf("revision %d of watch %d read after revision %d of watch %d, queued before it (read: %v)",
						before.rev, before.watch, it.rev, it.watch, got)
				}
			}
			if !it.events {
				for _, after := range pushed[i+1:] {
					if pos[after.rev] < j {
						t.Fatalf("revision %d of watch %d read before revision %d (no events), queued after it (read: %v)",
							after.rev, after.watch, it.rev, got)
					}
				}
			}
		}
	})
}
