package proptest

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

var slowFull = flag.Bool("slow.full", false, "run the slow-consumer test at full size (10,000 watchers, 100,000 events), even under -race or -short")

// slowSize is one size of the slow-consumer test.
type slowSize struct {
	watchers, streams, events, prefixes int
}

// The workload: revisions of eventsPerTxn puts each, on random keys of
// `prefixes` prefixes; watcher i watches prefix i%prefixes. A compaction at
// the middle revision M.
const eventsPerTxn = 10

type slowWorkload struct {
	size  slowSize
	txns  []mvcc.TxnRequest
	mid   int64 // the compaction revision M
	head  int64
	h     *kv.History
	model kv.State
}

func newSlowWorkload(size slowSize, seed uint64) *slowWorkload {
	w := &slowWorkload{size: size, h: &kv.History{}}
	r := rand.New(rand.NewPCG(seed, 1))
	n := size.events / eventsPerTxn
	w.mid = 1 + int64(n/2)
	for i := range n {
		var ops []mvcc.Op
		used := map[string]bool{}
		for len(ops) < eventsPerTxn {
			k := fmt.Sprintf("k/%02d/%02d", r.IntN(size.prefixes), r.IntN(50))
			if used[k] {
				continue
			}
			used[k] = true
			ops = append(ops, mvcc.Op{Put: &mvcc.PutRequest{Key: k, Value: fmt.Sprint("v", i)}})
		}
		w.txns = append(w.txns, mvcc.TxnRequest{Success: ops})
	}
	// The model's history, built before anything is measured.
	for _, t := range w.txns {
		var ops []kv.Op
		for _, op := range t.Success {
			ops = append(ops, kv.Op{Put: &kv.PutRequest{Key: op.Put.Key, Value: op.Put.Value}})
		}
		w.model, _ = kv.Step(w.model, kv.Request{Txn: &kv.TxnRequest{Success: ops}})
		c, _ := w.model.LastCommit()
		w.h.Append(c)
	}
	w.h.Compact(w.mid)
	w.head = w.model.Revision()
	return w
}

// write runs the workload against s, compacting at M (after running
// beforeCompact, if set), and checks each revision against the model's.
func (w *slowWorkload) write(t *testing.T, s *store.Store, beforeCompact func()) {
	for i, txn := range w.txns {
		r, err := s.Txn(ctx, txn)
		if err != nil {
			t.Fatal(err)
		}
		if r.Revision != int64(i+2) {
			t.Fatalf("txn %d at revision %d", i, r.Revision)
		}
		if r.Revision == w.mid {
			if beforeCompact != nil {
				beforeCompact()
			}
			if _, err := s.Compact(ctx, w.mid); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func heap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func openSlow(t *testing.T) *store.Store {
	// Checkpoints by size only: the control run and the measured one keep
	// the same records in memory at the same point of the workload.
	s, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true, CheckpointInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The groups of the slow-consumer test.
const (
	groupReader  = iota // reads all along
	groupStopped        // never reads until the end: compaction overtakes it
	groupFuture         // starts at M, never reads until the end: caught up from history
)

type slowStream struct {
	ws      *store.WatchStream
	group   int
	watches map[int64]*slowWatch
	lastPN  int64
	// A reader publishes the revision of every progress notification it
	// sees, for waitProgress.
	seenPN atomic.Int64
	pn     chan struct{} // cap 1
}

// waitProgress asks a reading stream for a progress notification and waits
// until it has received one at rev or later: everything up to rev was
// delivered to all its watches.
func (ss *slowStream) waitProgress(rev int64) {
	for ss.seenPN.Load() < rev {
		ss.ws.RequestProgress()
		<-ss.pn
	}
}

type slowWatch struct {
	v                  *watch.Validator
	events             int
	cancelled, checked bool
}

// read reads one stream until it delivers a progress notification at the
// head (so every watch of it has delivered everything, or was cancelled),
// validating every response with the model's validator. It first reads
// until phase1 ends if it is a reader.
func (ss *slowStream) read(phase1 context.Context, head int64) error {
	observe := func(r watchhub.Response) error {
		mr := fromWatchResponse(r)
		var targets []*slowWatch
		if r.WatchID == watchhub.InvalidWatchID {
			ss.lastPN = r.Revision
			ss.seenPN.Store(r.Revision)
			select {
			case ss.pn <- struct{}{}:
			default:
			}
			for _, w := range ss.watches {
				if !w.cancelled {
					targets = append(targets, w)
				}
			}
		} else {
			w := ss.watches[r.WatchID]
			if w == nil {
				return fmt.Errorf("response for unknown watch %d", r.WatchID)
			}
			targets = []*slowWatch{w}
			w.events += len(r.Events)
			if r.Canceled {
				w.cancelled = true
			}
		}
		for _, w := range targets {
			if vs := w.v.Observe(mr); len(vs) > 0 {
				return fmt.Errorf("watch %d: %v", r.WatchID, vs)
			}
		}
		return nil
	}
	if ss.group == groupReader {
		for {
			r, err := ss.ws.Recv(phase1)
			if err != nil {
				break
			}
			if err := observe(r); err != nil {
				return err
			}
		}
	}
	ss.ws.RequestProgress()
	final, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a failsafe, not a timing assertion
	defer cancel()
	for ss.lastPN < head {
		r, err := ss.ws.Recv(final)
		if err != nil {
			return fmt.Errorf("no progress notification at %d: %v (a watch is stuck)", head, err)
		}
		if err := observe(r); err != nil {
			return err
		}
	}
	return nil
}

// TestSlowConsumers: 10,000 watches, most of which never read while 100,000
// events are written (SPEC §3.13). Heap growth stays bounded by what the
// streams' bounded queues and the parked victims can hold — independent of
// the number of events — and, once they read, every watch receives its full
// gapless stream (§3.1–§3.4, checked by the model's validator) or a
// compaction cancel (§3.11, etcd#17529).
//
// Three groups: readers (a quarter) read all along; stopped watches (half)
// never read until the end, and a compaction at the middle revision M
// overtakes them; future watches (a quarter) start at M and never read until
// the end, so their queues fill after M and they are caught up from history.
//
// Under the race detector (or -short) it runs scaled down (1,000 watches,
// 10,000 events); -slow.full (make slow) forces the full size.
func TestSlowConsumers(t *testing.T) {
	size := slowSize{watchers: 10000, events: 100000, prefixes: 100}
	if (raceEnabled || testing.Short()) && !*slowFull {
		size = slowSize{watchers: 1000, events: 10000, prefixes: 20}
	}
	for _, perStream := range []int{1, 100} {
		sz := size
		sz.streams = sz.watchers / perStream
		t.Run(fmt.Sprintf("%d_watchers_on_%d_streams", sz.watchers, sz.streams), func(t *testing.T) {
			slowConsumers(t, sz)
		})
	}
}

func slowConsumers(t *testing.T, size slowSize) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d watchers on %d streams, %d events in %d revisions, compaction at the middle",
		seed, size.watchers, size.streams, size.events, size.events/eventsPerTxn)
	w := newSlowWorkload(size, seed)

	// Control: the same writes with no watch, for the store's own growth.
	s := openSlow(t)
	before := heap()
	w.write(t, s, nil)
	storeGrowth := heap() - before
	s.Close()

	s = openSlow(t)
	defer s.Close()
	streams := make([]*slowStream, size.streams)
	for i := range streams {
		g := groupStopped
		switch i % 4 {
		case 0:
			g = groupReader
		case 1:
			g = groupFuture
		}
		streams[i] = &slowStream{ws: s.NewWatchStream(nil), group: g, watches: map[int64]*slowWatch{}, pn: make(chan struct{}, 1)}
	}
	for i := range size.watchers {
		ss := streams[i%size.streams]
		p := i % size.prefixes
		req := watchhub.Request{Key: fmt.Sprintf("k/%02d/", p), RangeEnd: fmt.Sprintf("k/%02d0", p), PrevKV: i%2 == 0}
		if ss.group == groupFuture {
			req.StartRevision = w.mid
		}
		id, err := ss.ws.Watch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ss.watches[id] = &slowWatch{v: watch.NewValidator(w.h, toModelWatch(req))}
		if len(ss.watches)%8 == 0 {
			drainCreated(t, ss) // Watch waits once 16 control responses are unread
		}
	}
	for _, ss := range streams {
		drainCreated(t, ss)
	}
	phase1, endPhase1 := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, len(streams))
	start := func(ss *slowStream) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ss.read(phase1, w.head); err != nil {
				errs <- err
			}
		}()
	}
	for _, ss := range streams {
		if ss.group == groupReader {
			start(ss)
		}
	}

	base := heap()
	w.write(t, s, func() {
		// The readers may be slower than the writer: before compacting at M,
		// wait until each has received everything up to M (its progress
		// notification says so), so that compaction overtakes only the
		// watches that stopped reading.
		for _, ss := range streams {
			if ss.group == groupReader {
				ss.waitProgress(w.mid)
			}
		}
	})
	// Measure once the readers have caught up, so that only what the
	// watches that do not read hold is left.
	for _, ss := range streams {
		if ss.group == groupReader {
			ss.waitProgress(w.head)
		}
	}
	growth := heap() - base
	st := s.Hub().Stats()
	endPhase1()

	// The bound: what the bounded queues of the streams that do not read,
	// and the victims' parked revisions, can hold — whatever the number of
	// events — plus the store's own growth and the event payload they keep.
	var resp watchhub.Response
	var ev mvcc.Event
	entry := int64(unsafe.Sizeof(resp)) + 8
	event := int64(unsafe.Sizeof(ev))
	quiet := int64(size.streams - (size.streams+3)/4)
	queues := quiet * 128 * (entry + event)
	victims := int64(size.watchers) * (32 + eventsPerTxn*event)
	payload := min(int64(size.events), quiet*128+int64(size.watchers)*eventsPerTxn) * 160
	bound := queues + victims + payload + max(storeGrowth, 0) + 16<<20
	t.Logf("heap growth while %d events were written: %.1f MiB (the store alone: %.1f MiB); bound %.1f MiB "+
		"(queues %.1f + victims %.1f + payload %.1f + store + 16 slack); hub after writing: %+v",
		size.events, mib(growth), mib(storeGrowth), mib(bound), mib(queues), mib(victims), mib(payload), st)
	if os.Getenv("SLOW_PROFILE") != "" {
		if f, err := os.Create(filepath.Join(os.TempDir(), "watchspec-slow-heap.prof")); err == nil {
			pprof.WriteHeapProfile(f)
			f.Close()
			t.Logf("heap profile in %s", f.Name())
		}
	}
	if growth > bound {
		t.Errorf("heap grew by %.1f MiB, above the bound of %.1f MiB", mib(growth), mib(bound))
	}
	if st.Victims+st.Unsynced == 0 {
		t.Errorf("no watch fell behind: the test does not exercise slow consumers")
	}

	// Now everyone reads.
	for _, ss := range streams {
		if ss.group != groupReader {
			start(ss)
		}
	}
	wg.Wait()
	close(errs)
	var problems []string
	for err := range errs {
		if len(problems) < 5 {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%d streams failed, e.g.:\n%s", len(errs), strings.Join(problems, "\n"))
	}
	count := map[int][2]int{} // group → {complete, cancelled}
	events := 0
	for _, ss := range streams {
		for _, sw := range ss.watches {
			c := count[ss.group]
			if sw.cancelled {
				c[1]++
			} else {
				c[0]++
			}
			count[ss.group] = c
			events += sw.events
		}
	}
	t.Logf("%d events delivered; complete/cancelled by compaction: readers %v, stopped %v, future %v",
		events, count[groupReader], count[groupStopped], count[groupFuture])
	if count[groupReader][1] != 0 || count[groupFuture][1] != 0 {
		t.Errorf("watches that never needed compacted history were cancelled")
	}
	if count[groupStopped][1] == 0 {
		t.Errorf("no stopped watch was overtaken by the compaction: the test does not exercise §3.11")
	}
}

func drainCreated(t *testing.T, ss *slowStream) {
	for {
		r, err := ss.ws.Recv(done)
		if err != nil {
			return
		}
		if !r.Created {
			t.Fatalf("unexpected %+v before any write", r)
		}
		if vs := ss.watches[r.WatchID].v.Observe(fromWatchResponse(r)); len(vs) > 0 {
			t.Fatal(vs)
		}
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
