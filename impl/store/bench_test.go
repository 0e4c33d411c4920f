package store_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

var ctx = context.Background()

func openB(b *testing.B, fsync bool) *store.Store {
	s, err := store.Open(b.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: !fsync}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkPut: durable puts (fsync before each acknowledgement) from 1 and
// 16 concurrent writers; group commit lets the writers share fsyncs.
func BenchmarkPut(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := openB(b, true)
			var wg sync.WaitGroup
			var next sync.Mutex
			n := 0
			b.ResetTimer()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						next.Lock()
						i := n
						n++
						next.Unlock()
						if i >= b.N {
							return
						}
						if _, err := s.Put(ctx, mvcc.PutRequest{Key: fmt.Sprint("k", w, "/", i%1000), Value: "value"}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
		})
	}
}

// reader drains a stream until it has seen a stream-wide progress
// notification at rev or later, and counts the events.
func readUntil(ws *store.WatchStream, rev int64, events *int) error {
	for {
		r, err := ws.Recv(ctx)
		if err != nil {
			return err
		}
		*events += len(r.Events)
		if r.WatchID == watchhub.InvalidWatchID && r.IsProgressNotify() && r.Revision >= rev {
			return nil
		}
	}
}

// watchers creates n watches of prefix "k" starting at start, 100 per
// stream. It reads every watch's created response (Watch waits once a
// stream holds MaxControlResponses unread ones); a watch from a past
// revision may deliver events before a later watch's created response, and
// early counts them, per stream.
func watchers(b *testing.B, s *store.Store, n int, start int64) (streams []*store.WatchStream, early []int) {
	for i := range n {
		if i%100 == 0 {
			streams = append(streams, s.NewWatchStream(nil))
			early = append(early, 0)
		}
		j := len(streams) - 1
		ws := streams[j]
		resp, err := ws.Watch(ctx, watchhub.Request{Key: "k", RangeEnd: "l", StartRevision: start})
		if err != nil {
			b.Fatal(err)
		}
		for {
			r, err := ws.Recv(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if r.Created && r.WatchID == resp {
				break
			}
			if r.Created || r.Canceled || r.WatchID == watchhub.InvalidWatchID {
				b.Fatalf("waiting for the created response of watch %d: %+v", resp, r)
			}
			early[j] += len(r.Events)
		}
	}
	return streams, early
}

// BenchmarkFanout: every put is one event for each of 1,000 or 10,000
// watches (100 per stream, each stream read by its own goroutine); events/s
// counts delivered events, end to end.
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			s := openB(b, false)
			streams, _ := watchers(b, s, n, 0) // no event before the first put
			var wg sync.WaitGroup
			counts := make([]int, len(streams))
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Put(ctx, mvcc.PutRequest{Key: fmt.Sprint("k", i%100), Value: "value"}); err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					for j, ws := range streams {
						wg.Add(1)
						go func() {
							defer wg.Done()
							if err := readUntil(ws, int64(b.N)+1, &counts[j]); err != nil {
								b.Error(err)
							}
						}()
					}
				}
			}
			for _, ws := range streams {
				ws.RequestProgress()
			}
			wg.Wait()
			total := 0
			for _, c := range counts {
				total += c
			}
			if total != b.N*n {
				b.Fatalf("%d events delivered, want %d", total, b.N*n)
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkCatchUp: 100 watches from revision 1 replay a history of 10,000
// revisions from the store, in catch-up batches; events/s counts replayed
// events.
func BenchmarkCatchUp(b *testing.B) {
	s := openB(b, false)
	const history = 10000
	for i := range history {
		if _, err := s.Put(ctx, mvcc.PutRequest{Key: fmt.Sprint("k", i%100), Value: "value"}); err != nil {
			b.Fatal(err)
		}
	}
	head := s.Revision()
	b.ResetTimer()
	total := 0
	for range b.N {
		streams, counts := watchers(b, s, 100, 1)
		var wg sync.WaitGroup
		for j, ws := range streams {
			ws.RequestProgress()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := readUntil(ws, head, &counts[j]); err != nil {
					b.Error(err)
				}
				ws.Close()
			}()
		}
		wg.Wait()
		for _, c := range counts {
			total += c
		}
	}
	if total != b.N*100*history {
		b.Fatalf("%d events replayed, want %d", total, b.N*100*history)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "events/s")
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkIdleWatcher measures the heap an idle watch costs: 10,000 synced
// watches on single keys, all on one stream (bytes/watcher), and 10,000
// streams of one watch each (bytes/stream, watch included).
func BenchmarkIdleWatcher(b *testing.B) {
	const n = 10000
	for _, perStream := range []int{n, 1} {
		name := "shared_stream"
		if perStream == 1 {
			name = "own_stream"
		}
		b.Run(name, func(b *testing.B) {
			s, err := store.Open(b.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true},
				Watch: watchhub.Options{MaxControlResponses: n + 1}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("key/%06d", i)
			}
			var per float64
			for range b.N {
				before := heapAlloc()
				var streams []*store.WatchStream
				for i := range n {
					if i%perStream == 0 {
						streams = append(streams, s.NewWatchStream(nil))
					}
					ws := streams[len(streams)-1]
					if _, err := ws.Watch(ctx, watchhub.Request{Key: keys[i]}); err != nil {
						b.Fatal(err)
					}
					if _, err := ws.Recv(ctx); err != nil { // the created response
						b.Fatal(err)
					}
				}
				per = float64(heapAlloc()-before) / n
				for _, ws := range streams {
					ws.Close()
				}
				runtime.KeepAlive(streams)
			}
			b.ReportMetric(per, "bytes/watcher")
		})
	}
}

// BenchmarkPutUnderReadLoad: one writer's durable puts while 16 goroutines
// range over 100 keys in a loop (docs/PERFORMANCE.md, "read overload": a
// writer must not queue behind readers). puts/s counts the writer's
// acknowledged puts; ranges/s the readers' completed ranges.
func BenchmarkPutUnderReadLoad(b *testing.B) {
	s := openB(b, true)
	for i := range 100 {
		if _, err := s.Put(ctx, mvcc.PutRequest{Key: fmt.Sprintf("r/%03d", i), Value: "value"}); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ranges sync.Map
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for {
				select {
				case <-stop:
					ranges.Store(g, n)
					return
				default:
				}
				if _, err := s.Range(ctx, mvcc.RangeRequest{Key: "r/", RangeEnd: "r0"}); err != nil {
					b.Error(err)
					ranges.Store(g, n)
					return
				}
				n++
			}
		}()
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Put(ctx, mvcc.PutRequest{Key: fmt.Sprintf("r/%03d", i%100), Value: "value"}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := b.Elapsed()
	close(stop)
	wg.Wait()
	total := 0
	ranges.Range(func(_, v any) bool { total += v.(int); return true })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "puts/s")
	b.ReportMetric(float64(total)/elapsed.Seconds(), "ranges/s")
}
