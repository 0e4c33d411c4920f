package watchhub_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// revisionsOf returns the distinct revisions of a response's events, and
// fails if they are not ascending.
func revisionsOf(t interface {
	Helper()
	Fatalf(string, ...any)
}, r watchhub.Response) []int64 {
	t.Helper()
	var revs []int64
	for _, e := range r.Events {
		switch n := len(revs); {
		case n == 0 || e.KV.ModRevision > revs[n-1]:
			revs = append(revs, e.KV.ModRevision)
		case e.KV.ModRevision < revs[n-1]:
			t.Fatalf("response with revision %d after %d", e.KV.ModRevision, revs[n-1])
		}
	}
	return revs
}

// readAll reads a stream one response at a time, running the hub's
// catch-up between reads, until it has n events, and returns the responses
// with events.
func readAll(t *testing.T, s *store.Store, ws *watchhub.Stream, n int) []watchhub.Response {
	t.Helper()
	var out []watchhub.Response
	events := 0
	for range 100000 {
		if events >= n {
			return out
		}
		r, err := ws.Recv(done)
		if err != nil {
			s.Hub().Flush()
			continue
		}
		if len(r.Events) > 0 {
			out = append(out, r)
			events += len(r.Events)
		}
	}
	t.Fatalf("%d events read, want %d", events, n)
	return nil
}

// SPEC §3.13 Slow watchers, §3.4 Atomic: a watch that is behind gets etcd's
// shape of response — many of its missed revisions in one response, up to
// MaxRevisionsPerResponse (etcd's watchBatchMaxRevs, 1000) — not a few
// events at a time; from the store's history and from the hub's recent
// commits alike.
func TestLaggingWatchGetsManyRevisionsPerResponse(t *testing.T) {
	const revs, maxRevs = 2500, 1000
	t.Run("from the store", func(t *testing.T) {
		s := open(t, watchhub.Options{})
		for i := range revs { // revisions 2..2501, written while nobody watches
			put(t, s, fmt.Sprintf("k%04d", i), "v")
		}
		ws := s.NewWatchStream(nil)
		if _, err := ws.Watch(ctx, watchhub.Request{Key: "k", RangeEnd: "l", StartRevision: 2}); err != nil {
			t.Fatal(err)
		}
		rs := readAll(t, s, ws, revs)
		// Windows of 1000 revisions from the watch's start: exactly
		// 1000, 1000, 500.
		var got []int
		for _, r := range rs {
			got = append(got, len(revisionsOf(t, r)))
		}
		if fmt.Sprint(got) != "[1000 1000 500]" {
			t.Fatalf("revisions per response %v, want [1000 1000 500]", got)
		}
	})
	t.Run("from the recent commits", func(t *testing.T) {
		s := open(t, watchhub.Options{StreamCapacity: 1})
		ws := s.NewWatchStream(nil)
		if _, err := ws.Watch(ctx, watchhub.Request{Key: "k", RangeEnd: "l"}); err != nil {
			t.Fatal(err)
		}
		drain(ws)
		for i := range revs { // the reader does not read: the watch falls behind at once
			put(t, s, fmt.Sprintf("k%04d", i), "v")
		}
		if st := s.Hub().Stats(); st.Victims != 1 {
			t.Fatalf("stats %+v: the watch should be a victim", st)
		}
		rs := readAll(t, s, ws, revs)
		// Revision 2 was queued live; the other 2,499 come in responses of
		// at most 1000 revisions, cut only where a chunk of recent commits
		// ends (chunks of 1000 revisions): three responses.
		if len(revisionsOf(t, rs[0])) != 1 {
			t.Fatalf("first response %s, want revision 2 alone (queued live)", shape(rs[:1]))
		}
		total := 0
		for _, r := range rs[1:] {
			n := len(revisionsOf(t, r))
			if n > maxRevs {
				t.Fatalf("a response of %d revisions, above MaxRevisionsPerResponse", n)
			}
			total += n
		}
		if want := (revs - 1 + maxRevs - 1) / maxRevs; len(rs)-1 > want+1 || total != revs-1 {
			t.Fatalf("%d revisions in %d catch-up responses, want %d in at most %d", total, len(rs)-1, revs-1, want+1)
		}
	})
	t.Run("bounded by bytes", func(t *testing.T) {
		// Values of 10 KiB, a stream of 256 KiB: windows of about 256 KiB
		// (25 revisions) are read from the store, and a watch that takes
		// every other key gets copies of its half of each, cut at revision
		// boundaries to what its stream can take — never fewer than one
		// revision, never more than StreamBytes.
		const streamBytes = 256 << 10
		s := open(t, watchhub.Options{StreamBytes: streamBytes})
		val := strings.Repeat("v", 10<<10)
		for i := range 200 { // revisions 2..201: keys a and b in turn
			put(t, s, []string{"a", "b"}[i%2], val)
		}
		ws := s.NewWatchStream(nil)
		if _, err := ws.Watch(ctx, watchhub.Request{Key: "a", StartRevision: 2}); err != nil {
			t.Fatal(err)
		}
		rs := readAll(t, s, ws, 100)
		for i, r := range rs {
			size := 0
			for _, e := range r.Events {
				size += len(e.KV.Key) + len(e.KV.Value)
			}
			if size > streamBytes || (i < len(rs)-1 && size < streamBytes/4) {
				t.Fatalf("response %d of %d holds %d bytes of events: want at most StreamBytes (%d), and at least a quarter of it but in the last", i, len(rs), size, streamBytes)
			}
		}
	})
}

// SPEC §3.4 Atomic, §3.2 Unique, §3.3 Reliable: whatever the bounds — a
// stream of one response or a few bytes, responses of one revision or
// many, windows of one event — every response holds whole revisions of its
// watch (all of the watch's events of each revision it covers), and every
// watch receives every revision exactly once, in order.
func TestRevisionIsNeverSplit(t *testing.T) {
	keys := []string{"a", "a/1", "a/2", "b", "b/1", "c"}
	rapid.Check(t, func(t *rapid.T) {
		opts := watchhub.Options{
			StreamCapacity:          rapid.IntRange(1, 4).Draw(t, "capacity"),
			StreamBytes:             rapid.SampledFrom([]int{1, 300, 2000, 1 << 20}).Draw(t, "bytes"),
			MaxRevisionsPerResponse: rapid.IntRange(1, 5).Draw(t, "maxRevs"),
			MaxEventsPerRead:        rapid.IntRange(1, 12).Draw(t, "maxEvents"),
			MaxWatchersPerPass:      rapid.IntRange(1, 3).Draw(t, "perPass"),
		}
		dir, err := os.MkdirTemp("", "watchhub-split-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts.Manual = true
		s, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}, Watch: opts})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		type watch struct {
			req watchhub.Request
			id  int64
			ws  *watchhub.Stream
		}
		var streams []*watchhub.Stream
		for range rapid.IntRange(1, 2).Draw(t, "streams") {
			streams = append(streams, s.NewWatchStream(nil))
		}
		// What each revision wrote: revision → events, from the store's
		// answers (each key once per transaction).
		byRev := map[int64][]mvcc.Event{}
		write := func(t *rapid.T) {
			n := rapid.IntRange(1, 5).Draw(t, "ops")
			var ops []mvcc.Op
			seen := map[string]bool{}
			for range n {
				k := rapid.SampledFrom(keys).Draw(t, "key")
				if seen[k] {
					continue
				}
				seen[k] = true
				ops = append(ops, mvcc.Op{Put: &mvcc.PutRequest{Key: k, Value: strings.Repeat("x", rapid.IntRange(0, 100).Draw(t, "len"))}})
			}
			r, err := s.Txn(ctx, mvcc.TxnRequest{Success: ops})
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range ops {
				byRev[r.Revision] = append(byRev[r.Revision], mvcc.Event{KV: mvcc.KeyValue{Key: op.Put.Key}})
			}
		}
		for range rapid.IntRange(0, 5).Draw(t, "before") {
			write(t)
		}
		var watches []*watch
		for range rapid.IntRange(1, 4).Draw(t, "watches") {
			w := &watch{ws: rapid.SampledFrom(streams).Draw(t, "stream")}
			w.req.Key = rapid.SampledFrom(keys).Draw(t, "wkey")
			w.req.RangeEnd = rapid.SampledFrom([]string{"", "\x00", w.req.Key + "0"}).Draw(t, "wend")
			w.req.StartRevision = rapid.Int64Range(0, s.Revision()+1).Draw(t, "start")
			id, err := w.ws.Watch(ctx, w.req)
			if err != nil {
				t.Fatal(err)
			}
			w.id = id
			if w.req.StartRevision == 0 {
				w.req.StartRevision = s.Revision() + 1
			}
			watches = append(watches, w)
		}
		got := map[*watchhub.Stream][]watchhub.Response{}
		read := func(t *rapid.T, all bool) {
			for _, ws := range streams {
				for k := 0; all || k < rapid.IntRange(0, 3).Draw(t, "reads"); k++ {
					r, err := ws.Recv(done)
					if err != nil {
						break
					}
					got[ws] = append(got[ws], r)
				}
			}
		}
		for range rapid.IntRange(1, 30).Draw(t, "steps") {
			switch rapid.IntRange(0, 2).Draw(t, "action") {
			case 0:
				write(t)
			case 1:
				read(t, false)
			case 2:
				s.Hub().Step()
			}
		}
		for range 1000 {
			s.Hub().Flush()
			read(t, true)
		}
		head := s.Revision()
		for _, w := range watches {
			in := func(k string) bool {
				switch w.req.RangeEnd {
				case "":
					return k == w.req.Key
				case "\x00":
					return k >= w.req.Key
				}
				return w.req.Key <= k && k < w.req.RangeEnd
			}
			next := w.req.StartRevision
			for _, r := range got[w.ws] {
				if r.WatchID != w.id || len(r.Events) == 0 {
					continue
				}
				if len(revisionsOf(t, r)) > opts.MaxRevisionsPerResponse {
					t.Fatalf("watch %d: a response of %d revisions, above %d", w.id, len(revisionsOf(t, r)), opts.MaxRevisionsPerResponse)
				}
				i := 0
				for i < len(r.Events) {
					rev := r.Events[i].KV.ModRevision
					// Every revision from next to rev with nothing for the
					// watch, then rev with all of the watch's events.
					for ; next < rev; next++ {
						for _, e := range byRev[next] {
							if in(e.KV.Key) {
								t.Fatalf("watch %d %+v: revision %d (key %q) skipped", w.id, w.req, next, e.KV.Key)
							}
						}
					}
					if rev != next {
						t.Fatalf("watch %d: revision %d again, or out of order (next %d)", w.id, rev, next)
					}
					var want []string
					for _, e := range byRev[rev] {
						if in(e.KV.Key) {
							want = append(want, e.KV.Key)
						}
					}
					var have []string
					for ; i < len(r.Events) && r.Events[i].KV.ModRevision == rev; i++ {
						have = append(have, r.Events[i].KV.Key)
					}
					if fmt.Sprint(have) != fmt.Sprint(want) {
						t.Fatalf("watch %d %+v: revision %d delivered as %v, want %v (split or altered)", w.id, w.req, rev, have, want)
					}
					next++
				}
			}
			for ; next <= head; next++ {
				for _, e := range byRev[next] {
					if in(e.KV.Key) {
						t.Fatalf("watch %d %+v: revision %d never delivered", w.id, w.req, next)
					}
				}
			}
		}
	})
}

// SPEC §3.13 Slow watchers: streams whose readers stopped hold a bounded
// amount of memory, whatever is written — at most StreamCapacity responses
// and StreamBytes of events each, and the hub's recent commits (twice
// StreamBytes) — here 20 stopped streams while 64 MiB of values are
// written: the heap grows by a fraction of that.
func TestStoppedStreamsHoldBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 64 MiB")
	}
	const (
		streams, perStream = 20, 4
		streamBytes        = 256 << 10
		valueSize, revs    = 16 << 10, 4000
	)
	s := open(t, watchhub.Options{StreamBytes: streamBytes})
	var all []*watchhub.Stream
	for i := range streams {
		ws := s.NewWatchStream(nil)
		for j := range perStream {
			// Prefix watches (share the commits) and single keys (copies).
			req := watchhub.Request{Key: "k", RangeEnd: "l"}
			if j%2 == 1 {
				req = watchhub.Request{Key: fmt.Sprintf("k%02d", (i+j)%20), PrevKV: true}
			}
			if _, err := ws.Watch(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		drain(ws)
		all = append(all, ws)
	}
	val := strings.Repeat("v", valueSize)
	heapNow := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heapNow()
	for i := range revs {
		put(t, s, fmt.Sprintf("k%02d", i%20), val)
	}
	s.Hub().Flush()
	growth := heapNow() - before
	// Per stream: its queue's entries, StreamBytes, one response beyond
	// (a revision: a value and its PrevKV); the recent commits; and slack
	// for the store's own index and the runtime.
	entry := int64(160)
	bound := int64(streams)*(128*entry+streamBytes+2*valueSize) + 2*streamBytes + 8<<20
	t.Logf("%d MiB of values written; heap grew by %.1f MiB (bound %.1f MiB); %+v",
		revs*valueSize>>20, float64(growth)/(1<<20), float64(bound)/(1<<20), s.Hub().Stats())
	if growth > bound {
		t.Errorf("heap grew by %d bytes, above the bound of %d", growth, bound)
	}
	// Each stream holds what its bounds allow: its first revisions.
	held := 0
	for _, ws := range all {
		for _, r := range drain(ws) {
			held += len(r.Events)
		}
	}
	t.Logf("the stopped streams held %d events", held)
}
