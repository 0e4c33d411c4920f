package record_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

var recordCorpus = flag.Bool("record-corpus", false, "record the shared-stream run against embedded etcd again into ../corpus/")

// sharedStream shapes the catch-up of many watches multiplexed on one
// clientv3 watch stream, as the Kubernetes apiserver's etcd3 watcher uses
// it (issue 11).
type sharedStream struct {
	// Watches all share one clientv3 Watcher and contexts with the same
	// outgoing metadata (WithRequireLeader): one gRPC stream.
	Watches int
	// Backlog revisions are written before the watches start from
	// revision 2; During more are written while they catch up.
	Backlog, During int
	// SlowEvery makes every SlowEvery-th watch a slow reader.
	SlowEvery int
	// ProgressEvery is how often progress is requested on the shared
	// stream while the watches catch up.
	ProgressEvery time.Duration
	Seed          uint64
}

// keys: 10 groups of 10 keys. A watch watches one group or, every tenth,
// the whole prefix, so that every watch has events in every catch-up batch
// (which is what makes etcd park watchers as victims) while the trace stays
// small.
const ssPrefix = "/ss/"

func ssKey(g, i int) string { return fmt.Sprintf("%s%d/%d", ssPrefix, g, i) }

// sharedStreamEvidence counts what the run showed of the shapes it means to
// exercise.
type sharedStreamEvidence struct {
	Ops, Watches, Responses, Events, ProgressNotifies int
	// LoweredHeaders counts responses whose header revision is below an
	// earlier header of the same watch: etcd's victim re-sends
	// (watchable_store.go moveVictims sends minRev-1).
	LoweredHeaders int
	// CatchUpDuringWrites counts responses that delivered backlog events
	// after the first of the later writes had returned: the catch-up and the
	// writes overlapped.
	CatchUpDuringWrites int
	Head                int64
}

func (e sharedStreamEvidence) String() string {
	return fmt.Sprintf("%d ops, %d watches, %d responses (%d events, %d progress notifications, %d with a header below an earlier one, %d with backlog events after later writes returned), head revision %d",
		e.Ops, e.Watches, e.Responses, e.Events, e.ProgressNotifies, e.LoweredHeaders, e.CatchUpDuringWrites, e.Head)
}

func evidenceOf(tr *traces.Trace, backlogHead int64) sharedStreamEvidence {
	e := sharedStreamEvidence{Ops: len(tr.Ops), Watches: len(tr.Watches)}
	laterWrite := int64(math.MaxInt64)
	for _, o := range tr.Ops {
		if o.Response != nil {
			e.Head = max(e.Head, o.Response.Revision)
			if o.Response.Revision > backlogHead {
				laterWrite = min(laterWrite, o.Return)
			}
		}
	}
	for _, w := range tr.Watches {
		var last int64
		for _, r := range w.Responses {
			e.Responses++
			e.Events += len(r.Response.Events)
			if r.Response.IsProgressNotify() {
				e.ProgressNotifies++
			}
			if r.Response.Revision != 0 && r.Response.Revision < last {
				e.LoweredHeaders++
			}
			if evs := r.Response.Events; len(evs) > 0 && evs[0].KV.ModRevision <= backlogHead && r.Time > laterWrite {
				e.CatchUpDuringWrites++
			}
			last = max(last, r.Response.Revision)
		}
	}
	return e
}

// recordSharedStream runs the shape against endpoints and returns the
// trace as recorded.
func recordSharedStream(t *testing.T, endpoints []string, system, version string, s sharedStream) (raw []byte, progressRequests int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var buf bytes.Buffer
	// A fresh store: revision 1, never compacted.
	never := int64(-1)
	w, err := traces.NewWriter(&buf, traces.Header{System: system, SystemVersion: version,
		Tool: "traces/record TestSharedStreamCatchUp", Seed: int64(s.Seed), UniqueValues: true,
		BaseRevision: 1, BaseCompactRevision: &never})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.New(w)
	var seq, requests atomic.Int64
	// write puts n revisions from concurrent recorded clients.
	write := func(ctx context.Context, n, clients int) error {
		var left atomic.Int64
		left.Store(int64(n))
		var g sync.WaitGroup
		errs := make(chan error, clients)
		for c := range clients {
			rc := rec.Client(cli)
			rng := rand.New(rand.NewPCG(s.Seed, uint64(n*8+c)))
			g.Go(func() {
				if err := func() error {
					for left.Add(-1) >= 0 {
						v := seq.Add(1)
						req := kv.Request{Put: &kv.PutRequest{Key: ssKey(rng.IntN(10), rng.IntN(10)), Value: fmt.Sprint(v)}}
						rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						resp, err := rc.Do(rctx, req)
						cancel()
						if err != nil || resp.Err != nil {
							return fmt.Errorf("put: %v %v", err, resp.Err)
						}
					}
					return nil
				}(); err != nil {
					errs <- err
				}
			})
		}
		g.Wait()
		close(errs)
		return <-errs
	}
	if err := write(ctx, s.Backlog, 8); err != nil {
		t.Fatal(err)
	}

	// Every watch on one stream: one Watcher, the same metadata.
	streamCtx := clientv3.WithRequireLeader(ctx)
	wc := rec.Client(cli)
	watchCtx, stopWatches := context.WithCancel(streamCtx)
	defer stopWatches()
	// While the watches are created and catch up: progress requests on
	// their stream, and more writes (from two clients, so that they spread
	// over the catch-up).
	progressCtx, stopProgress := context.WithCancel(streamCtx)
	defer stopProgress()
	var progress sync.WaitGroup
	progress.Go(func() {
		t := time.NewTicker(s.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-progressCtx.Done():
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(progressCtx, time.Second)
				if wc.RequestProgress(rctx, cli.Watcher) == nil {
					requests.Add(1)
				}
				cancel()
			}
		}
	})
	writes := make(chan error, 1)
	go func() { writes <- write(ctx, s.During, 2) }()
	// Each watch's reader notes when it saw the final transaction, and the
	// revision of the last progress notification it got; it reads on until
	// the watch ends.
	type result struct {
		end      atomic.Bool
		progress atomic.Int64
		err      error
	}
	results := make([]result, s.Watches)
	var readers, seenEnd sync.WaitGroup
	for i := range s.Watches {
		req := watch.Request{Key: ssPrefix, RangeEnd: kv.PrefixEnd(ssPrefix), StartRevision: 2}
		if i%10 != 0 {
			sub := fmt.Sprintf("%s%d/", ssPrefix, i%10)
			req.Key, req.RangeEnd = sub, kv.PrefixEnd(sub)
		}
		rw := wc.Watch(watchCtx, cli.Watcher, req)
		slow := s.SlowEvery > 0 && i%s.SlowEvery == 1
		res := &results[i]
		seenEnd.Add(1)
		readers.Go(func() {
			defer func() {
				if !res.end.Load() {
					seenEnd.Done()
				}
			}()
			for resp := range rw.C {
				if resp.Canceled && res.err == nil && watchCtx.Err() == nil {
					res.err = fmt.Errorf("watch %d cancelled: %+v", rw.ID, resp)
				}
				if resp.IsProgressNotify() {
					res.progress.Store(resp.Revision)
				}
				for _, e := range resp.Events {
					if kv.InRange(req.Key, req.RangeEnd, e.KV.Key) && e.KV.Value == "end" && !res.end.Swap(true) {
						seenEnd.Done()
					}
				}
				if slow && !res.end.Load() {
					time.Sleep(2 * time.Millisecond)
				}
			}
		})
	}

	if err := <-writes; err != nil {
		t.Fatal(err)
	}
	// The end: one transaction puts <group>/end in every group, so every
	// watch sees it.
	var ops []kv.Op
	for g := range 10 {
		ops = append(ops, kv.Op{Put: &kv.PutRequest{Key: fmt.Sprintf("%s%d/end", ssPrefix, g), Value: "end"}})
	}
	final, err := rec.Client(cli).Do(ctx, kv.Request{Txn: &kv.TxnRequest{Success: ops}})
	if err != nil || final.Err != nil {
		t.Fatalf("the final transaction: %v %v", err, final.Err)
	}
	// Wait until every watch has seen it, then (progress requests going on)
	// until every watch has a progress notification at or above it: etcd
	// answers a stream's progress request only when all its watches are
	// synced, and clientv3 hands the answer to all of them.
	wait := func(what string, done func() bool) {
		deadline := time.Now().Add(3 * time.Minute)
		for !done() {
			if time.Now().After(deadline) {
				t.Errorf("%s within 3 minutes", what)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ended := make(chan struct{})
	go func() { seenEnd.Wait(); close(ended) }()
	wait("the watches did not all see the final transaction", func() bool {
		select {
		case <-ended:
			return true
		default:
			return false
		}
	})
	wait("the watches did not all get a progress notification after the final transaction", func() bool {
		for i := range results {
			if results[i].progress.Load() < final.Revision {
				return false
			}
		}
		return true
	})
	stopProgress()
	progress.Wait()
	stopWatches()
	readers.Wait()
	for i := range results {
		if results[i].err != nil {
			t.Error(results[i].err)
		}
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), requests.Load()
}

// keepRaw saves a failed test's trace in its artifact directory.
func keepRaw(t *testing.T, raw []byte) {
	path := filepath.Join(t.ArtifactDir(), "trace.ndjson")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Logf("saving the trace: %v", err)
		return
	}
	t.Logf("trace saved as %s", path)
}

// checkSharedStream checks the recorded run; every property must hold.
func checkSharedStream(t *testing.T, raw []byte, backlogHead int64) (*traces.Trace, sharedStreamEvidence) {
	t.Helper()
	tr, err := traces.Read(bytes.NewReader(raw), t.Name()+".ndjson")
	if err != nil {
		keepRaw(t, raw)
		t.Fatal(err)
	}
	ev := evidenceOf(tr, backlogHead)
	t.Logf("recorded %v", ev)
	res, err := linearizability.Check(tr, linearizability.Options{SingleServer: true}) // one etcd member, or the reference server
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for i, v := range res.Violations {
		counts[string(v.Property)]++
		if i < 10 {
			t.Errorf("%s: %s", v.Where, v.Violation)
		}
	}
	if len(res.Violations) > 0 {
		t.Errorf("%d violations: %v", len(res.Violations), counts)
	}
	if res.Verdict != linearizability.Linearizable {
		t.Errorf("verdict %s", res.Verdict)
	}
	if t.Failed() {
		keepRaw(t, raw)
		if html, err := res.WriteHTML(t.ArtifactDir()); html != "" || err != nil {
			t.Logf("visualisation: %s %v", html, err)
		}
	}
	return tr, ev
}

var issue11 = sharedStream{Watches: 200, Backlog: 3000, During: 500, SlowEvery: 5, ProgressEvery: 20 * time.Millisecond}

// 200 watches multiplexed on ONE clientv3 watch stream, all from revision 2
// over a backlog of 3,000 revisions, while 500 more are written and progress
// is requested on the stream: how the Kubernetes apiserver watches etcd
// (clientv3 groups watches by their context's outgoing metadata,
// client/v3/watch.go streamKeyFromCtx). Real etcd 3.7.3 parks catch-up
// batches that meet a full send buffer as victims and re-sends them with a
// lower header (server/storage/mvcc/watchable_store.go moveVictims), and
// broadcasts each progress response to every watch of the stream. A correct
// etcd must pass: issue 11; SPEC §3.12 MonotonicRevision, §3.6 Bookmarkable.
func TestSharedStreamCatchUpEtcd(t *testing.T) {
	s := issue11
	s.Seed = seed(t)
	cluster, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	raw, requests := recordSharedStream(t, cluster.Endpoints, "etcd", etcdtest.Version, s)
	t.Logf("%d progress requests", requests)
	checkSharedStream(t, raw, int64(s.Backlog)+1)
	if *recordCorpus {
		writeCorpus(t, "etcd-3.7.3-shared-stream-catch-up.ndjson.gz", raw)
	}
}

// The same run against the reference server (impl/server). Issue 11.
func TestSharedStreamCatchUpReference(t *testing.T) {
	s := issue11
	s.Seed = seed(t)
	srv, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	raw, requests := recordSharedStream(t, []string{srv.Endpoint()}, "watchspec-reference", "dev", s)
	t.Logf("%d progress requests", requests)
	checkSharedStream(t, raw, int64(s.Backlog)+1)
}

// seed returns the run's random seed, printed so that a failure can be
// replayed (the timing of a concurrent run is not replayable).
func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if *seedFlag != 0 {
		s = *seedFlag
	}
	t.Logf("seed %d (replay with -seed %d)", s, s)
	return s
}

var seedFlag = flag.Uint64("seed", 0, "the random seed of the randomised tests (0: from the clock)")

// writeCorpus writes raw, gzipped and in the order recorded, as
// ../corpus/name.
func writeCorpus(t *testing.T, name string, raw []byte) {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression) // the level is valid
	zw.Write(raw)
	zw.Close()
	path := filepath.Join("..", "corpus", name)
	if err := os.WriteFile(path, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes, %d uncompressed)", path, z.Len(), len(raw))
}
