package watchhub_test

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// The delivery benchmarks measure the hub alone (a store with fsync off,
// no gRPC), in counts rather than wall-clock time, so that they mean
// something on a shared machine:
//
//   - events/resp: the events per response the readers received — the
//     shape of delivery, which decides what every response costs the server
//     and the client on top of its events;
//   - cpu-ns/event: the process's CPU time (user + system, every goroutine,
//     GC included) per delivered event;
//   - allocs/event and B/event: heap allocations per delivered event.
//
// The workloads are those of `watchspec bench` (bench/workloads.go), minus
// gRPC: 100 prefix watches per stream, 128-byte values.

const benchValue = "................................................................................................................................"

// cpuTime returns this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// deliveryMeter counts what the readers received and what it cost.
type deliveryMeter struct {
	cpu0         time.Duration
	mem0         runtime.MemStats
	mu           sync.Mutex
	events, resp int64
}

func (m *deliveryMeter) start() {
	runtime.GC()
	runtime.ReadMemStats(&m.mem0)
	m.cpu0 = cpuTime()
}

func (m *deliveryMeter) add(events, responses int64) {
	m.mu.Lock()
	m.events += events
	m.resp += responses
	m.mu.Unlock()
}

func (m *deliveryMeter) report(b *testing.B) {
	cpu := cpuTime() - m.cpu0
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	ev := float64(max(m.events, 1))
	b.ReportMetric(float64(m.events)/float64(max(m.resp, 1)), "events/resp")
	b.ReportMetric(float64(cpu.Nanoseconds())/ev, "cpu-ns/event")
	b.ReportMetric(float64(mem.Mallocs-m.mem0.Mallocs)/ev, "allocs/event")
	b.ReportMetric(float64(mem.TotalAlloc-m.mem0.TotalAlloc)/ev, "B/event")
}

// readStream counts a stream's events and responses until it delivers a
// stream-wide progress notification at rev or later.
func readStream(ws *watchhub.Stream, rev int64, m *deliveryMeter) error {
	return readStreamJoin(ws, rev, m, false)
}

// readStreamJoin is readStream that, with join, takes every response with
// events together with the ones of its watch queued behind it
// (Stream.RecvMore), as the gRPC server's send loop does.
func readStreamJoin(ws *watchhub.Stream, rev int64, m *deliveryMeter, join bool) error {
	var events, responses int64
	defer func() { m.add(events, responses) }()
	var more []watchhub.Response
	for {
		r, err := ws.Recv(ctx)
		if err != nil {
			return err
		}
		if len(r.Events) > 0 {
			events += int64(len(r.Events))
			responses++
			if join {
				more = ws.RecvMore(r, more[:0], 1000, 1<<20)
				for _, x := range more {
					events += int64(len(x.Events))
				}
			}
		}
		if r.WatchID == watchhub.InvalidWatchID && r.IsProgressNotify() && r.Revision >= rev {
			return nil
		}
	}
}

// benchWatches opens n prefix watches on "k" from start, 100 per stream.
// Their created responses are left for the readers (the hub is opened with
// room for them).
func benchWatches(b *testing.B, s *store.Store, n int, start int64) []*watchhub.Stream {
	var streams []*watchhub.Stream
	for i := range n {
		if i%100 == 0 {
			streams = append(streams, s.NewWatchStream(nil))
		}
		ws := streams[len(streams)-1]
		if _, err := ws.Watch(ctx, watchhub.Request{Key: "k", RangeEnd: "l", StartRevision: start}); err != nil {
			b.Fatal(err)
		}
	}
	return streams
}

func openBench(b *testing.B) *store.Store {
	s, err := store.Open(b.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true},
		Watch: watchhub.Options{MaxControlResponses: 1000}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkDeliveryFanout: live fan-out. Every put is one event for each of
// 1,000 or 10,000 synced prefix watches (100 per stream, each stream read
// by its own goroutine); one op is one put, delivered to every watch.
func BenchmarkDeliveryFanout(b *testing.B) { benchFanout(b, false) }

// BenchmarkDeliveryFanoutJoined is BenchmarkDeliveryFanout with readers
// that join the responses of a watch queued behind the one they take
// (Stream.RecvMore), as the gRPC server's send loop does: what that costs
// the hub per event when it finds little to join (before the count of each
// watch's queued responses, a scan of the queue per response).
func BenchmarkDeliveryFanoutJoined(b *testing.B) { benchFanout(b, true) }

func benchFanout(b *testing.B, join bool) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			s := openBench(b)
			streams := benchWatches(b, s, n, 0)
			var m deliveryMeter
			var wg sync.WaitGroup
			head := s.Revision() + int64(b.N)
			m.start()
			b.ResetTimer()
			for _, ws := range streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := readStreamJoin(ws, head, &m, join); err != nil {
						b.Error(err)
					}
				}()
			}
			for i := range b.N {
				if _, err := s.Put(ctx, mvcc.PutRequest{Key: fmt.Sprintf("k%06d", i%1000), Value: benchValue}); err != nil {
					b.Fatal(err)
				}
			}
			for _, ws := range streams {
				ws.RequestProgress()
			}
			wg.Wait()
			b.StopTimer()
			if want := int64(b.N) * int64(n); m.events != want {
				b.Fatalf("%d events delivered, want %d", m.events, want)
			}
			m.report(b)
		})
	}
}

// BenchmarkDeliveryCatchUp: 1,000 prefix watches (100 per stream) from
// revision 1 replay a history of 10,000 one-event revisions; one op is the
// whole replay (10 million events).
func BenchmarkDeliveryCatchUp(b *testing.B) {
	const history, watchers = 10000, 1000
	s := openBench(b)
	for i := range history {
		if _, err := s.Put(ctx, mvcc.PutRequest{Key: fmt.Sprintf("k%06d", i%1000), Value: benchValue}); err != nil {
			b.Fatal(err)
		}
	}
	head := s.Revision()
	var m deliveryMeter
	m.start()
	b.ResetTimer()
	for range b.N {
		streams := benchWatches(b, s, watchers, 1)
		var wg sync.WaitGroup
		for _, ws := range streams {
			ws.RequestProgress()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := readStream(ws, head, &m); err != nil {
					b.Error(err)
				}
				ws.Close()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	if want := int64(b.N) * watchers * history; m.events != want {
		b.Fatalf("%d events replayed, want %d", m.events, want)
	}
	m.report(b)
}
