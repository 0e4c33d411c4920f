package informer_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/model/k8s"
)

func rvOf(t *rapid.T, head int64, label string) string {
	switch rapid.IntRange(0, 9).Draw(t, label+"Kind") {
	case 0:
		return ""
	case 1:
		return "0"
	case 2:
		return rapid.SampledFrom([]string{"abc", "01", "-3"}).Draw(t, label+"Bad")
	}
	return fmt.Sprint(rapid.Int64Range(1, head+2).Draw(t, label))
}

// SPEC §4.1 ListResourceVersion, §4.2 ListSnapshot, §4.3 WatchStart, §4.4
// InitialEventsEnd, §4.5 Expired, and the watch properties of §3 for what
// follows a watch's start: the store's ListWatch answers random lists and
// watches — every resourceVersion semantic, limits and continue chains,
// invalid combinations, compacted and future revisions — as
// k8s.CheckList and k8s.CheckWatch demand. Each list is checked against
// the history as it was when the list returned (a later compaction must not
// count; a recorded list carries the compaction revision it was answered
// under).
func TestStoreListWatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rapid.SyncTest(t, func(t *rapid.T) {
			h := informertest.NewHarness(t, informertest.Reference{}, informertest.Config{},
				watchhub.Options{StreamCapacity: rapid.SampledFrom([]int{1, 2, 128}).Draw(t, "streamCapacity"), ProgressInterval: -1})
			defer h.Close()
			ctx := context.Background()
			write := func() {
				ns, name := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "ns"), rapid.SampledFrom([]string{"x", "y", "z"}).Draw(t, "name")
				if _, ok := h.Rec.Objects()[informertest.GVR.Key(ns, name)]; ok && rapid.Bool().Draw(t, "delete") {
					h.Delete(ns, name)
				} else {
					h.Put(ns, name)
				}
			}
			compact := func() {
				if cur := h.Store().Revision(); cur > h.Rec.CompactRevision() {
					h.Compact(rapid.Int64Range(max(h.Rec.CompactRevision()+1, 1), cur).Draw(t, "compact"))
				}
			}
			// lastList checks the list just recorded against the history now.
			lastList := func() {
				hist, err := h.Rec.History()
				if err != nil {
					t.Fatal(err)
				}
				lists := h.Rec.Runs()[0].Lists
				c := lists[len(lists)-1]
				if vs := k8s.CheckList(hist, c); len(vs) > 0 {
					t.Fatalf("list %+v answered %+v: %v", c.Options, c.Result, vs)
				}
			}
			for range rapid.IntRange(0, 40).Draw(t, "steps") {
				switch rapid.IntRange(0, 5).Draw(t, "action") {
				case 0, 1:
					write()
				case 2:
					compact()
				default:
					o := informer.ListOptions{ResourceVersion: rvOf(t, h.Store().Revision(), "listRV"),
						ResourceVersionMatch: rapid.SampledFrom([]string{"", "", "", "Exact", "NotOlderThan", "Newest"}).Draw(t, "match"),
						Limit:                rapid.SampledFrom([]int64{0, 0, 1, 2, -1}).Draw(t, "limit")}
					if rapid.IntRange(0, 9).Draw(t, "badContinue") == 0 {
						o.Continue = "not-a-token"
					}
					l, err := h.LW.List(ctx, o)
					lastList()
					// Follow the continue chain, with writes and compactions in between.
					for err == nil && l.Continue != "" && rapid.Bool().Draw(t, "follow") {
						if rapid.Bool().Draw(t, "between") {
							write()
							compact()
						}
						l, err = h.LW.List(ctx, informer.ListOptions{Limit: o.Limit, Continue: l.Continue})
						lastList()
					}
				}
			}

			// Watches: open a few, write on, read them, check them.
			type open struct {
				w      informer.Watcher
				events int
			}
			var watches []*open
			for range rapid.IntRange(1, 3).Draw(t, "watches") {
				yes, no := true, false
				o := informer.WatchOptions{ResourceVersion: rvOf(t, h.Store().Revision(), "watchRV"), AllowWatchBookmarks: rapid.Bool().Draw(t, "bookmarks")}
				switch rapid.IntRange(0, 3).Draw(t, "initial") {
				case 1:
					o.SendInitialEvents, o.ResourceVersionMatch = &yes, "NotOlderThan"
				case 2:
					if o.ResourceVersion == "" || o.ResourceVersion == "0" {
						// sendInitialEvents=false at "" or "0" starts now;
						// the model reads it as a watch from revision 1.
						continue
					}
					o.SendInitialEvents, o.ResourceVersionMatch = &no, "NotOlderThan"
				case 3:
					o.ResourceVersionMatch = "NotOlderThan" // invalid without sendInitialEvents
				}
				w, err := h.LW.Watch(ctx, o)
				if err == nil {
					watches = append(watches, &open{w: w})
				}
			}
			read := func() {
				synctest.Wait()
				for _, o := range watches {
					for more := true; more; {
						select {
						case _, ok := <-o.w.ResultChan():
							more = ok
							if ok {
								o.events++
								synctest.Wait()
							}
						default:
							more = false
						}
					}
				}
			}
			for range rapid.IntRange(0, 10).Draw(t, "watchSteps") {
				switch rapid.IntRange(0, 3).Draw(t, "watchAction") {
				case 0, 1:
					write()
				case 2:
					h.StoreLW.RequestBookmarks()
				case 3:
					read()
				}
			}
			read()
			for _, o := range watches {
				o.w.Stop()
			}
			synctest.Wait()
			hist, err := h.Rec.History()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range h.Rec.Runs()[0].Watches {
				if vs := k8s.CheckWatch(hist, c); len(vs) > 0 {
					t.Fatalf("watch %+v (before %d) delivered %+v: %v", c.Options, c.Before, c.Events, vs)
				}
			}
		})
	})
}
