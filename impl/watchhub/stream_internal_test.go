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
