package watchhub_test

import (
	"testing"

	"github.com/watchspec/watchspec/impl/mvcc"

	"github.com/watchspec/watchspec/impl/watchhub"
)

// holdFor holds every watch from revision at (once) until revision until
// is about to be delivered.
type holdFor struct{ at, until int64 }

func (p *holdFor) Hold(_, rev int64) bool { return rev >= p.at && rev < p.until }
func (p *holdFor) Release(rev int64) bool { return rev >= p.until }

// SPEC §3.13 Slow watchers, §3.4 Atomic: a watch its Perturber holds back
// although its stream has room falls behind like a victim and is caught up
// in one response of whole revisions once released; nothing is skipped or
// repeated.
func TestPerturberHoldsAndReleases(t *testing.T) {
	st := open(t, watchhub.Options{})
	ws := st.NewWatchStream(nil)
	defer ws.Close()
	ws.Perturb(&holdFor{at: 3, until: 6})
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a", RangeEnd: "b"}); err != nil {
		t.Fatal(err)
	}
	put(t, st, "a1", "v") // 2
	put(t, st, "a2", "v") // 3: held
	put(t, st, "a3", "v") // 4
	put(t, st, "a4", "v") // 5
	st.Hub().Flush()
	if got, want := shape(drain(ws)), "[c1][a12]"; got != want {
		t.Fatalf("while held: %s, want %s", got, want)
	}
	put(t, st, "a5", "v") // 6: released before it is delivered
	st.Hub().Flush()
	if got, want := shape(drain(ws)), "[a23 a34 a45 a56]"; got != want {
		t.Fatalf("after the release: %s, want %s", got, want)
	}
	put(t, st, "a6", "v") // 7: live again
	if got, want := shape(drain(ws)), "[a67]"; got != want {
		t.Fatalf("live again: %s, want %s", got, want)
	}
}

// SPEC §3.11 CompactedCancel: a watch held back past a compaction of the
// revisions it still needs is cancelled with CompactRevision when it is let
// catch up (Stream.CatchUp), never advanced past them.
func TestPerturberHoldPastCompactionCancels(t *testing.T) {
	st := open(t, watchhub.Options{})
	ws := st.NewWatchStream(nil)
	defer ws.Close()
	ws.Perturb(&holdFor{at: 3, until: 1 << 62})
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a", RangeEnd: "b"}); err != nil {
		t.Fatal(err)
	}
	put(t, st, "a1", "v") // 2
	put(t, st, "a2", "v") // 3: held
	put(t, st, "a3", "v") // 4
	if _, err := st.Compact(ctx, 4); err != nil {
		t.Fatal(err)
	}
	st.Hub().Flush()
	if got, want := shape(drain(ws)), "[c1][a12]"; got != want {
		t.Fatalf("while held: %s, want %s", got, want)
	}
	ws.CatchUp()
	st.Hub().Flush()
	if got, want := shape(drain(ws)), "[x4]"; got != want {
		t.Fatalf("after CatchUp: %s, want %s", got, want)
	}
}

// SPEC §3.4 Atomic: SplitAt and Join keep a response's events, shared or
// not, in order; a split response and its halves encode the same events.
func TestSplitAtAndJoin(t *testing.T) {
	st := open(t, watchhub.Options{})
	ws := st.NewWatchStream(nil)
	defer ws.Close()
	ws.Perturb(&holdFor{at: 2, until: 5})
	if _, err := ws.Watch(ctx, watchhub.Request{Key: "a", RangeEnd: "b"}); err != nil {
		t.Fatal(err)
	}
	put(t, st, "a1", "v") // 2
	put(t, st, "a2", "v") // 3
	put(t, st, "a3", "v") // 4
	put(t, st, "a4", "v") // 5
	st.Hub().Flush()
	rs := drain(ws)
	if got, want := shape(rs), "[c1][a12 a23 a34 a45]"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	a, b := rs[1].SplitAt(1)
	if got, want := shape([]watchhub.Response{a, b}), "[a12][a23 a34 a45]"; got != want {
		t.Fatalf("SplitAt(1): %s, want %s", got, want)
	}
	if ba, at := b.Shared(); ba != nil {
		if evs := ba.Events(at + len(b.Events))[at:]; evs[0].KV.ModRevision != 3 {
			t.Fatalf("the second half's shared events start at %d, want 3", evs[0].KV.ModRevision)
		}
	}
	b1, b2 := b.SplitAt(1)
	b2.Revision = 9 // a later header
	j := a.Join(b1).Join(b2)
	if got, want := shape([]watchhub.Response{j}), "[a12 a23 a34 a45]"; got != want {
		t.Fatalf("Join: %s, want %s", got, want)
	}
	if sb, _ := j.Shared(); sb == nil {
		t.Fatal("Join of consecutive runs of one batch copied them")
	}
	if j.Revision != 9 {
		t.Fatalf("Join's header %d, want the later one, 9", j.Revision)
	}
	own := watchhub.Response{WatchID: a.WatchID, Revision: 5, Events: append([]mvcc.Event(nil), b2.Events...)}
	if got, want := shape([]watchhub.Response{a.Join(own)}), "[a12 a34 a45]"; got != want {
		t.Fatalf("Join with events of its own: %s, want %s", got, want)
	}
}
