package watchhub_test

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

var ctx = context.Background()

// done is a finished context: Recv with it polls.
var done = func() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}()

// open returns a store whose hub is driven by hand (Options.Manual), so
// that every test is deterministic.
func open(t testing.TB, o watchhub.Options) *store.Store {
	t.Helper()
	o.Manual = true
	s, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true}, Watch: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(t testing.TB, s *store.Store, k, v string) int64 {
	t.Helper()
	r, err := s.Put(ctx, mvcc.PutRequest{Key: k, Value: v})
	if err != nil {
		t.Fatal(err)
	}
	return r.Revision
}

func del(t testing.TB, s *store.Store, k string) int64 {
	t.Helper()
	r, err := s.Delete(ctx, mvcc.DeleteRequest{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	return r.Revision
}

// drain returns every response queued on ws.
func drain(ws *watchhub.Stream) []watchhub.Response {
	var out []watchhub.Response
	for {
		r, err := ws.Recv(done)
		if err != nil {
			return out
		}
		out = append(out, r)
	}
}

// eventRevs lists, per response, the revisions of its events ("p" marks a
// progress notification, "c" a created response, "x<rev>" a compaction
// cancel, "X" a cancel).
func shape(rs []watchhub.Response) string {
	var out string
	for _, r := range rs {
		switch {
		case r.Created && r.Canceled:
			out += "[rejected]"
		case r.Created:
			out += fmt.Sprintf("[c%d]", r.Revision)
		case r.CompactRevision != 0:
			out += fmt.Sprintf("[x%d]", r.CompactRevision)
		case r.Canceled:
			out += "[X]"
		case r.IsProgressNotify():
			out += fmt.Sprintf("[p%d]", r.Revision)
		default:
			out += "["
			for i, e := range r.Events {
				if i > 0 {
					out += " "
				}
				out += fmt.Sprintf("%s%d", e.KV.Key, e.KV.ModRevision)
			}
			out += "]"
		}
	}
	return out
}

// SPEC §3.10 StartRevision, §3.5 Resumable, §3.11 CompactedCancel: what each
// kind of start revision delivers.
func TestStartRevisions(t *testing.T) {
	s := open(t, watchhub.Options{})
	put(t, s, "a", "1") // 2
	put(t, s, "b", "1") // 3
	del(t, s, "a")      // 4
	put(t, s, "a", "2") // 5
	if _, err := s.Compact(ctx, 4); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		start int64
		want  string
	}{
		// Live watches get one response per revision; watches from the past
		// are caught up in one response (the hub is flushed once, at 7).
		{"now", 0, "[c5][a6][a7]"},
		{"at the compact revision sees its DELETE (etcd#18089)", 4, "[c5][a4 a5 a6 a7]"},
		{"past", 5, "[c5][a5 a6 a7]"},
		{"below the compact revision is cancelled (§3.11)", 3, "[c5][x4]"},
		{"next revision", 6, "[c5][a6][a7]"},
		{"future", 7, "[c5][a7]"},
		{"negative is rejected", -1, "[rejected]"},
	}
	var streams []*watchhub.Stream
	for _, c := range cases {
		ws := s.NewWatchStream(nil)
		_, err := ws.Watch(ctx, watchhub.Request{Key: "a", StartRevision: c.start})
		if (err != nil) != (c.start < 0) {
			t.Fatalf("%s: Watch error %v", c.name, err)
		}
		streams = append(streams, ws)
	}
	put(t, s, "a", "3") // 6
	put(t, s, "a", "4") // 7
	s.Hub().Flush()
	for i, c := range cases {
		rs := drain(streams[i])
		if got := shape(rs); got != c.want {
			t.Errorf("%s (start %d): got %s, want %s", c.name, c.start, got, c.want)
		}
		if c.start == 4 && rs[1].Events[0].Type != mvcc.Delete {
			t.Errorf("the event at the compact revision is %+v, want the DELETE", rs[1].Events[0])
		}
		if c.start < 0 && (rs[0].WatchID != -1 || rs[0].CancelReason != "etcdserver: mvcc: required revision has been compacted") {
			t.Errorf("rejection %+v: want WatchID -1 and etcd's reason", rs[0])
		}
	}
}

// SPEC §3.13 Slow watchers, §3.4 Atomic: a watch whose stream is full
// becomes a victim, then unsynced, and is caught up from the hub's recent
// commits in whole revisions, at most MaxRevisionsPerResponse per response,
// missing nothing.
func TestSlowStreamIsCaughtUpFromHistory(t *testing.T) {
	s := open(t, watchhub.Options{StreamCapacity: 3, MaxRevisionsPerResponse: 2})
	ws := s.NewWatchStream(nil)
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "k", RangeEnd: "\x00"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // revisions 2..5: one event each
		put(t, s, fmt.Sprint("k", i), "v")
	}
	// Revision 6: two events.
	if _, err := s.Txn(ctx, mvcc.TxnRequest{Success: []mvcc.Op{{Put: &mvcc.PutRequest{Key: "k8"}}, {Put: &mvcc.PutRequest{Key: "k9"}}}}); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k7", "v") // 7
	if st := s.Hub().Stats(); st.Victims != 1 || st.Synced != 0 {
		t.Fatalf("stats %+v: the watch should be a victim", st)
	}
	var all []watchhub.Response
	for range 20 {
		all = append(all, drain(ws)...)
		s.Hub().Flush()
	}
	// Three responses queued live (the stream's capacity), then revision 5
	// and the rest, at most two revisions per response: the recent commits
	// are kept in chunks of at most MaxRevisionsPerResponse revisions, and a
	// response does not cross from one to the next.
	if got, want := shape(all), "[c1][k02][k13][k24][k35][k86 k96 k77]"; got != want {
		t.Fatalf("stream %s, want %s", got, want)
	}
	if st := s.Hub().Stats(); st.Synced != 1 {
		t.Fatalf("stats %+v: the watch should be synced again", st)
	}
	// Header revisions never decrease (§3.12), and catch-up responses carry
	// the current revision.
	for i := 1; i < len(all); i++ {
		if all[i].Revision < all[i-1].Revision {
			t.Fatalf("header %d after %d", all[i].Revision, all[i-1].Revision)
		}
	}
}

// SPEC §3.13 Slow watchers: a watch behind whose next revision does not fit
// in its stream waits for the reader, and the hub's catch-up passes never
// spin meanwhile (Hub.Step: every pass serves its lowest watcher or drops
// its stream until the reader reads). Regression for the rapid fail file
// proptest/testdata/rapid/TestStoreMatchesModel/...-6033.fail: a stream
// with room for one event, whose lowest watcher needed a revision of more,
// was marked ready again after every pass although nothing could change
// until its reader read — Step returned true forever. Both bounds of a
// stream are tried: its responses, and its bytes.
func TestBlockedCatchUpDoesNotSpin(t *testing.T) {
	for _, o := range []watchhub.Options{{StreamCapacity: 1}, {StreamBytes: 1}} {
		t.Run(fmt.Sprintf("capacity=%d,bytes=%d", o.StreamCapacity, o.StreamBytes), func(t *testing.T) {
			s := open(t, o)
			// Revision 2: two events.
			if _, err := s.Txn(ctx, mvcc.TxnRequest{Success: []mvcc.Op{{Put: &mvcc.PutRequest{Key: "k1"}}, {Put: &mvcc.PutRequest{Key: "k2"}}}}); err != nil {
				t.Fatal(err)
			}
			ws := s.NewWatchStream(nil)
			if _, err := ws.Watch(ctx, watchhub.Request{Key: "x"}); err != nil { // live
				t.Fatal(err)
			}
			if _, err := ws.Watch(ctx, watchhub.Request{Key: "k", RangeEnd: "l", StartRevision: 2}); err != nil { // behind
				t.Fatal(err)
			}
			put(t, s, "x", "1") // 3: queued for the live watch; no room is left
			passes := 0
			for s.Hub().Step() {
				if passes++; passes > 10 {
					t.Fatalf("%d catch-up passes while the stream waits for its reader: the hub spins", passes)
				}
			}
			if got := shape(drain(ws)); got != "[c2][c2][x3]" {
				t.Fatalf("before catch-up: %s", got)
			}
			// The reader made room: the waiting watch is caught up, whole revision 2.
			s.Hub().Flush()
			if got := shape(drain(ws)); got != "[k12 k22]" {
				t.Fatalf("after the reader read: %s, want revision 2 whole", got)
			}
			s.Hub().Flush() // (with StreamBytes 1, revision 2 alone filled the stream)
			if st := s.Hub().Stats(); st.Synced != 2 || st.Unsynced != 0 {
				t.Fatalf("stats %+v: both watches should be synced", st)
			}
		})
	}
}

// SPEC §3.11 CompactedCancel; regression for etcd#17529: many prevKV watches
// on one starved stream. The watches that compaction overtook are cancelled
// with CompactRevision — the cancel waits for room like any response, the
// watch is never advanced silently — and the others get their whole
// history, with PrevKV wherever it is not compacted (§3.8).
func TestCompactionCancelsStarvedWatchesNeverSkips(t *testing.T) {
	for _, o := range []watchhub.Options{
		{StreamCapacity: 1, MaxWatchersPerPass: 2},
		{StreamCapacity: 1, MaxWatchersPerPass: 2, MaxRevisionsPerResponse: 1},
		{StreamCapacity: 1, MaxWatchersPerPass: 2, MaxEventsPerRead: 1}, // history from the store
	} {
		t.Run(fmt.Sprintf("maxRevs=%d,maxEvents=%d", o.MaxRevisionsPerResponse, o.MaxEventsPerRead), func(t *testing.T) {
			compactionCancelsStarvedWatches(t, o)
		})
	}
}

func compactionCancelsStarvedWatches(t *testing.T, o watchhub.Options) {
	s := open(t, o)
	ws := s.NewWatchStream(nil)
	put(t, s, "k", "0")                 // 2
	put(t, s, "k", "1")                 // 3
	put(t, s, "k", "2")                 // 4
	starts := []int64{2, 2, 2, 5, 5, 5} // 0-2 from revision 2, 3-5 from 5 (the future, for now)
	for _, start := range starts {
		if _, err := ws.Watch(ctx, watchhub.Request{Key: "k", PrevKV: true, StartRevision: start}); err != nil {
			t.Fatal(err)
		}
	}
	s.Hub().Flush()
	put(t, s, "k", "3") // 5
	put(t, s, "k", "4") // 6
	if _, err := s.Compact(ctx, 5); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "5") // 7
	// The stream is full (capacity 1) all along: read it one response at a
	// time, letting the hub catch up in between.
	per := map[int64][]watchhub.Response{}
	for range 100 {
		for _, r := range drain(ws) {
			per[r.WatchID] = append(per[r.WatchID], r)
		}
		s.Hub().Flush()
	}
	cancels := 0
	for id, start := range starts {
		rs := per[int64(id)][1:] // after the created response
		// The events delivered: every revision from the start, none skipped,
		// then either the head (7) or a compaction cancel that was needed.
		next := start
		for i, r := range rs {
			if r.CompactRevision != 0 {
				if i != len(rs)-1 || r.CompactRevision != 5 || next >= 5 {
					t.Errorf("watch %d: %s: a cancel at %d after revision %d", id, shape(rs), r.CompactRevision, next-1)
				}
				cancels++
				continue
			}
			for _, e := range r.Events {
				if e.KV.ModRevision != next {
					t.Fatalf("watch %d: %s: revision %d where %d was due", id, shape(rs), e.KV.ModRevision, next)
				}
				next++
				r, p := e.KV.ModRevision, e.PrevKV
				switch {
				case p == nil && r-1 >= 5:
					t.Errorf("watch %d: event at %d lacks its PrevKV, which is not compacted", id, r)
				case p != nil && (p.ModRevision != r-1 || p.Value != fmt.Sprint(r-3)):
					t.Errorf("watch %d: event at %d has PrevKV %+v", id, r, *p)
				}
			}
		}
		if last := rs[len(rs)-1]; last.CompactRevision == 0 && next != 8 {
			t.Errorf("watch %d: %s: delivered up to %d, want 7", id, shape(rs), next-1)
		}
	}
	if cancels == 0 {
		t.Errorf("no watch was cancelled: the test does not exercise §3.11")
	}
}

// SPEC §3.6 Bookmarkable; regression for etcd#15220: a requested progress
// notification is sent only once every event before it was queued — never
// ahead of events of a watch that is behind.
func TestRequestedProgressNeverOvertakesEvents(t *testing.T) {
	s := open(t, watchhub.Options{StreamCapacity: 1})
	ws := s.NewWatchStream(nil)
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	put(t, s, "a", "1") // 2: queued
	put(t, s, "a", "2") // 3: the stream is full: victim
	ws.RequestProgress()
	if got := shape(drain(ws)); got != "[c1][a2]" {
		t.Fatalf("before catch-up: %s; no progress may come while revision 3 is undelivered", got)
	}
	s.Hub().Flush()
	got := shape(drain(ws))
	s.Hub().Flush() // the notification waited for room (capacity 1)
	if got += shape(drain(ws)); got != "[a3][p3]" {
		t.Fatalf("after catch-up: %s, want the event then the progress notification", got)
	}
}

// SPEC §3.10 StartRevision; regression for etcd#20221: no progress
// notification below a future watch's start revision minus one, neither
// requested nor periodic.
func TestNoProgressBelowFutureStart(t *testing.T) {
	s := open(t, watchhub.Options{})
	ws := s.NewWatchStream(nil)
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a", StartRevision: 4, ProgressNotify: true}); err != nil {
		t.Fatal(err)
	}
	ws.RequestProgress()
	s.Hub().Tick()
	if got := shape(drain(ws)); got != "[c1]" {
		t.Fatalf("at revision 1: %s, want no progress notification", got)
	}
	put(t, s, "b", "1") // 2
	s.Hub().Tick()
	if got := shape(drain(ws)); got != "" {
		t.Fatalf("at revision 2: %s, want nothing", got)
	}
	put(t, s, "b", "2") // 3 = start-1: now true
	if got := shape(drain(ws)); got != "[p3]" {
		t.Fatalf("at revision 3: %s, want the requested notification", got)
	}
	s.Hub().Tick()
	if got := shape(drain(ws)); got != "[p3]" {
		t.Fatalf("tick at revision 3: %s, want a periodic one", got)
	}
}

// fakeClock ticks when the test says so.
type fakeClock struct{ ch chan time.Time }

func (c fakeClock) NewTicker(time.Duration) (<-chan time.Time, func()) { return c.ch, func() {} }

// Periodic progress notifications (ProgressNotify) come on the interval of
// an injected clock, only for watches with nothing else to say since the
// last tick (etcd's elision), and are true (§3.6).
func TestPeriodicProgressOnInjectedClock(t *testing.T) {
	clock := fakeClock{ch: make(chan time.Time)}
	s, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true},
		Watch: watchhub.Options{Clock: clock, ProgressInterval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ws := s.NewWatchStream(nil)
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a", ProgressNotify: true}); err != nil {
		t.Fatal(err)
	}
	quiet, err := ws.Watch(ctx, watchhub.Request{Key: "b"})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() watchhub.Response {
		t.Helper()
		r, err := ws.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	recv()
	recv()                  // the two created responses
	clock.ch <- time.Time{} // the tick goroutine takes it...
	if r := recv(); r.WatchID != 0 || !r.IsProgressNotify() || r.Revision != 1 {
		t.Fatalf("after a tick: %+v, want a progress notification for watch 0 at 1", r)
	}
	put(t, s, "a", "1") // 2
	if r := recv(); len(r.Events) != 1 {
		t.Fatalf("want the event, got %+v", r)
	}
	clock.ch <- time.Time{} // elided: watch 0 sent an event since the last tick
	clock.ch <- time.Time{} // the second tick is sent (the first was processed before it was taken)
	if r := recv(); r.WatchID != 0 || !r.IsProgressNotify() || r.Revision != 2 {
		t.Fatalf("after two ticks: %+v, want one progress notification at 2", r)
	}
	if r, err := ws.Recv(done); err == nil {
		t.Fatalf("unexpected %+v (watch %d never asked for progress)", r, quiet)
	}
}

// Bad requests get a clear answer on the stream and as an error; Cancel of
// an unknown ID sends nothing (as etcd).
func TestWatchRequestValidation(t *testing.T) {
	s := open(t, watchhub.Options{})
	ws := s.NewWatchStream(nil)
	for _, c := range []struct {
		req watchhub.Request
		err error
	}{
		{watchhub.Request{Key: "b", RangeEnd: "a"}, watchhub.ErrEmptyRange},
		{watchhub.Request{Key: "b", RangeEnd: "b"}, watchhub.ErrEmptyRange},
		{watchhub.Request{Key: "a", WatchID: -3}, watchhub.ErrInvalidWatchID},
		{watchhub.Request{Key: "a", StartRevision: -1}, watchhub.ErrNegativeStartRevision},
	} {
		if id, err := ws.Watch(ctx, c.req); err != c.err || id != watchhub.InvalidWatchID {
			t.Errorf("Watch(%+v) = %d, %v; want -1, %v", c.req, id, err, c.err)
		}
		rs := drain(ws)
		if len(rs) != 1 || !rs[0].Created || !rs[0].Canceled || rs[0].WatchID != -1 || rs[0].CancelReason != c.err.Error() {
			t.Errorf("Watch(%+v) sent %+v", c.req, rs)
		}
	}
	if id, err := ws.Watch(ctx, watchhub.Request{Key: "a", WatchID: 7}); err != nil || id != 7 {
		t.Fatalf("explicit id: %d, %v", id, err)
	}
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a", WatchID: 7}); err != watchhub.ErrDuplicateWatchID {
		t.Fatalf("duplicate id: %v", err)
	}
	if id, err := ws.Watch(ctx, watchhub.Request{}); err != nil || id != 0 {
		t.Fatalf("auto id: %d, %v (empty key means \\x00)", id, err)
	}
	drain(ws)
	if err := ws.Cancel(ctx, 3); err != watchhub.ErrWatchNotFound {
		t.Fatalf("cancel unknown: %v", err)
	}
	if err := ws.Cancel(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if got := drain(ws); len(got) != 1 || got[0].WatchID != 7 || !got[0].Canceled {
		t.Fatalf("after cancels: %+v, want one canceled response for 7", got)
	}
	put(t, s, "a", "1")
	if got := drain(ws); len(got) != 0 {
		t.Fatalf("a cancelled watch got %+v", got)
	}
}

// Watch and Cancel wait while the reader leaves MaxControlResponses unread
// (etcd's ctrlStream backpressure), and give up with their context.
func TestControlResponsesAreBounded(t *testing.T) {
	s := open(t, watchhub.Options{MaxControlResponses: 2})
	ws := s.NewWatchStream(nil)
	for range 2 {
		if _, err := ws.Watch(ctx, watchhub.Request{Key: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ws.Watch(done, watchhub.Request{Key: "a"}); err != context.Canceled {
		t.Fatalf("third Watch with two unread responses: %v, want it to wait", err)
	}
	ws.Recv(ctx)
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a"}); err != nil {
		t.Fatal(err)
	}
}

// Closing a stream or the hub: Recv returns what was queued, then ErrClosed.
func TestCloseDrainsThenEnds(t *testing.T) {
	s := open(t, watchhub.Options{})
	ws := s.NewWatchStream(nil)
	ws.Watch(ctx, watchhub.Request{Key: "a"})
	put(t, s, "a", "1")
	ws.Close()
	if got := shape(drain(ws)); got != "[c1][a2]" {
		t.Fatalf("after close: %s", got)
	}
	if _, err := ws.Recv(ctx); err != watchhub.ErrClosed {
		t.Fatalf("Recv after close: %v", err)
	}
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a"}); err != watchhub.ErrClosed {
		t.Fatalf("Watch after close: %v", err)
	}
	c, cancel := context.WithCancel(ctx)
	ws2 := s.NewWatchStream(c)
	cancel()
	if _, err := ws2.Recv(ctx); err != watchhub.ErrClosed {
		t.Fatalf("a stream whose context ended: %v", err)
	}
}

// No goroutine per watch: creating thousands of watches (synced, and behind)
// starts none.
func TestNoGoroutinePerWatch(t *testing.T) {
	s, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true},
		Watch: watchhub.Options{MaxControlResponses: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put(t, s, "a", "1")
	before := runtime.NumGoroutine()
	ws := s.NewWatchStream(nil)
	for i := range 2000 {
		if _, err := ws.Watch(ctx, watchhub.Request{Key: fmt.Sprint("k", i), StartRevision: int64(i % 3)}); err != nil {
			t.Fatal(err)
		}
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Fatalf("%d goroutines before 2000 watches, %d after", before, after)
	}
}

// The synced group finds exactly the watches whose range holds a key: the
// interval tree against a brute-force scan, over random ranges.
func TestSyncedGroupMatchesBruteForce(t *testing.T) {
	s := open(t, watchhub.Options{StreamCapacity: 1 << 20, MaxControlResponses: 1 << 20})
	ws := s.NewWatchStream(nil)
	keys := []string{"a", "aa", "ab", "b", "ba", "c", "d", "\xff"}
	type rng struct{ key, end string }
	var ranges []rng
	for i, k := range keys {
		for j, e := range append([]string{"", "\x00"}, keys...) {
			if e != "" && e != "\x00" && e <= k {
				continue
			}
			if (i+j)%2 == 0 { // a deterministic half of them, plus duplicates below
				ranges = append(ranges, rng{k, e})
			}
		}
	}
	ranges = append(ranges, ranges[:5]...)
	for _, r := range ranges {
		if _, err := ws.Watch(ctx, watchhub.Request{Key: r.key, RangeEnd: r.end}); err != nil {
			t.Fatal(err)
		}
	}
	drain(ws)
	// Cancel a few, so that the tree also loses ranges.
	for _, id := range []int64{0, 3, 4, 9} {
		ws.Cancel(ctx, id)
		ranges[id] = rng{"", "-"}
	}
	drain(ws)
	for _, k := range keys {
		rev := put(t, s, k, "v")
		var got, want []int64
		for _, r := range drain(ws) {
			got = append(got, r.WatchID)
		}
		for id, r := range ranges {
			if r.end != "-" && mvcc.InRange(r.key, r.end, k) {
				want = append(want, int64(id))
			}
		}
		sortInts(got)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("put %q at %d reached watches %v, want %v", k, rev, got, want)
		}
	}
}

func sortInts(a []int64) {
	for i := range a {
		for j := i + 1; j < len(a); j++ {
			if a[j] < a[i] {
				a[i], a[j] = a[j], a[i]
			}
		}
	}
}

// SPEC §3.4 Atomic, §3.13 Slow watchers, §3.12 MonotonicRevision: the
// revisions of one group commit reach a watch in one response when its
// events are consecutive in them (a run of the shared batch), with the
// group's last revision as header; a watch whose events are not
// consecutive gets them in order, every revision whole, headers never
// going back; a full stream makes the watch a victim from the first
// revision it did not get, and it misses nothing.
func TestGroupCommitIsOneResponsePerWatch(t *testing.T) {
	s := open(t, watchhub.Options{StreamCapacity: 2})
	h := s.Hub()
	prefix := s.NewWatchStream(nil)
	single := s.NewWatchStream(nil)
	full := s.NewWatchStream(nil)
	for _, w := range []struct {
		ws       *watchhub.Stream
		key, end string
	}{{prefix, "k", "l"}, {single, "k1", ""}, {full, "k", "l"}} {
		if _, err := w.ws.Watch(ctx, watchhub.Request{Key: w.key, RangeEnd: w.end}); err != nil {
			t.Fatal(err)
		}
	}
	drain(prefix)
	drain(single)
	drain(full)
	if _, err := full.Watch(ctx, watchhub.Request{Key: "z"}); err != nil { // a control response: no room taken
		t.Fatal(err)
	}
	ev := func(key string, rev int64) mvcc.Event {
		return mvcc.Event{Type: mvcc.Put, KV: mvcc.KeyValue{Key: key, Value: "v", CreateRevision: rev, ModRevision: rev, Version: 1}}
	}
	// The store is at revision 1: the hub is handed revisions 2..4 as one
	// group commit (what the store does when three writers commit together).
	h.NotifyAll([]mvcc.Commit{
		{Revision: 2, Events: []mvcc.Event{ev("k1", 2)}},
		{Revision: 3, Events: []mvcc.Event{ev("k2", 3)}},
		{Revision: 4, Events: []mvcc.Event{ev("k1", 4)}},
	})
	rs := drain(prefix)
	if got := shape(rs); got != "[k12 k23 k14]" {
		t.Fatalf("prefix watch: %s, want one response of the three revisions", got)
	}
	if b, _ := rs[0].Shared(); b == nil || rs[0].Revision != 4 {
		t.Errorf("the response shares no batch (%v) or has header %d, want 4", b, rs[0].Revision)
	}
	rs = drain(single)
	if got := shape(rs); got != "[k12][k14]" {
		t.Fatalf("single-key watch: %s", got)
	}
	for i := 1; i < len(rs); i++ {
		if rs[i].Revision < rs[i-1].Revision || rs[i].Revision < rs[i].Events[len(rs[i].Events)-1].KV.ModRevision {
			t.Fatalf("headers %d then %d for %s", rs[i-1].Revision, rs[i].Revision, shape(rs))
		}
	}
	// The stream of capacity 2 holds the first group's response and takes
	// the second's; the third group finds it full and makes the watch a
	// victim, caught up once the reader reads.
	h.NotifyAll([]mvcc.Commit{{Revision: 5, Events: []mvcc.Event{ev("k3", 5)}}, {Revision: 6, Events: []mvcc.Event{ev("k4", 6)}}})
	h.NotifyAll([]mvcc.Commit{{Revision: 7, Events: []mvcc.Event{ev("k5", 7)}}})
	if st := h.Stats(); st.Victims != 1 {
		t.Fatalf("stats %+v: the watch on the full stream should be a victim", st)
	}
	var got string
	for range 5 {
		got += shape(drain(full))
		h.Flush()
	}
	if want := "[c1][k12 k23 k14][k35 k46][k57]"; got != want {
		t.Fatalf("full stream: %s, want %s", got, want)
	}
}
