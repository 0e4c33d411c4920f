package traces_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

var recordEvidence = flag.Bool("record-evidence", false, "record the etcd evidence traces of corpus/ again (embedded etcd; timing-dependent, retried until the shape shows)")

// TestRecordEvidence records, against real embedded etcd, the corpus
// traces that justify the rules issue 11 relaxed, when run with
// -record-evidence. Each shape is timing-dependent, so the recorder retries
// until it shows. The kept traces are then checked by TestCorpus (which
// demands a pass) and by linearizability's TestRelaxedRulesOnRealRecordings
// (which demands the old rule fail).
func TestRecordEvidence(t *testing.T) {
	if !*recordEvidence {
		t.Skip("run with -record-evidence to record the evidence traces again")
	}
	if *evidenceOnly == "" || *evidenceOnly == "progress" {
		recordProgressBroadcastBeforeRegistration(t)
	}
	if *evidenceOnly == "" || *evidenceOnly == "prevkv" {
		recordPrevKVBeforeFlag(t)
	}
}

var evidenceOnly = flag.String("record-evidence.only", "", "with -record-evidence: progress or prevkv records only that trace")

// evidence is a tiny recorder: clientv3 calls written straight into a
// format 2 trace, with one clock.
type evidence struct {
	mu    sync.Mutex
	start time.Time
	tr    *traces.Trace
}

func newEvidence(name string) *evidence {
	return &evidence{start: time.Now(), tr: &traces.Trace{Name: name, Header: traces.Header{Format: traces.Format, Version: traces.Version,
		System: "etcd", SystemVersion: etcdtest.Version, Start: time.Now().UTC().Format(time.RFC3339), Tool: "traces/evidence_test.go",
		UniqueValues: true, BaseRevision: 1, BaseCompactRevision: ptrTo(int64(-1))}}}
}

func (e *evidence) now() int64 { return int64(time.Since(e.start)) }

// put records one put by client.
func (e *evidence) put(t *testing.T, cli *clientv3.Client, client int, key, value string) {
	call := e.now()
	resp, err := cli.Put(context.Background(), key, value)
	ret := e.now()
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tr.Ops = append(e.tr.Ops, traces.Op{Client: client, Call: call, Return: ret, Request: kv.Request{Put: &kv.PutRequest{Key: key, Value: value}},
		Response: &kv.Response{Revision: resp.Header.Revision, Put: &kv.PutResponse{}}})
}

// watch records a watch of client on stream 0 and every response it gets;
// seen is told of each response.
func (e *evidence) watch(ctx context.Context, cli *clientv3.Client, client, id int, req watch.Request, seen func(watch.Response)) *sync.WaitGroup {
	opts := []clientv3.OpOption{clientv3.WithRev(req.StartRevision), clientv3.WithCreatedNotify()}
	if req.RangeEnd != "" {
		opts = append(opts, clientv3.WithRange(req.RangeEnd))
	}
	if req.PrevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	w := &traces.Watch{Client: client, ID: id, Stream: ptrTo(0), Request: req}
	e.mu.Lock()
	w.Time = e.now()
	e.tr.Watches = append(e.tr.Watches, w)
	e.mu.Unlock()
	ch := cli.Watch(ctx, req.Key, opts...)
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for wr := range ch {
			r := watch.Response{Revision: wr.Header.GetRevision(), Created: wr.Created, Canceled: wr.Canceled, CompactRevision: wr.CompactRevision, CancelReason: wr.CancelReason}
			for _, ev := range wr.Events {
				x := kv.Event{Type: kv.Put, KV: evKV(ev.Kv)}
				if ev.Type == mvccpb.DELETE {
					x.Type = kv.Delete
				}
				if ev.PrevKv != nil {
					p := evKV(ev.PrevKv)
					x.PrevKV = &p
				}
				r.Events = append(r.Events, x)
			}
			rec := traces.WatchResponse{Response: r}
			if wr.Err() != nil && wr.CompactRevision == 0 {
				rec.Error = wr.Err().Error()
			}
			e.mu.Lock()
			rec.Time = e.now()
			w.Responses = append(w.Responses, rec)
			e.mu.Unlock()
			if seen != nil {
				seen(r)
			}
		}
	}()
	return &done
}

func evKV(k *mvccpb.KeyValue) kv.KeyValue {
	return kv.KeyValue{Key: string(k.Key), Value: string(k.Value), CreateRevision: k.CreateRevision, ModRevision: k.ModRevision, Version: k.Version}
}

func (e *evidence) progressRequest(client int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tr.ProgressRequests = append(e.tr.ProgressRequests, traces.ProgressRequest{Client: client, Stream: 0, Time: e.now()})
}

// recordProgressBroadcastBeforeRegistration: etcd answers a stream's
// progress request once every watch the stream has registered is synced,
// and clientv3 hands the answer to every watch of the stream. A watch
// created right after the request is registered after the answer was
// computed, and its created response (sent on v3rpc's control stream) can
// overtake the answer queued behind other watches' events: the new watch
// — here one catching up from revision 2 — then receives a progress
// notification above events it has not received yet.
func recordProgressBroadcastBeforeRegistration(t *testing.T) {
	const file = "etcd-3.7.3-watch-registered-after-progress-answer.ndjson.gz"
	for attempt := 1; attempt <= 5; attempt++ {
		e := newEvidence(file)
		if found := progressOvertake(t, e); found {
			if err := traces.WriteFile(filepath.Join("corpus", file), e.tr); err != nil {
				t.Fatal(err)
			}
			t.Logf("recorded %s: %d ops, %d watches", file, len(e.tr.Ops), len(e.tr.Watches))
			return
		}
		t.Logf("attempt %d: the answer never overtook a registration; again", attempt)
	}
	t.Fatal("no progress answer reached a watch registered after it; the shape did not show")
}

func progressOvertake(t *testing.T, e *evidence) bool {
	cli, stop := evidenceEtcd(t)
	defer stop()
	const client = 9 // the watching client: one Watcher, one stream
	for i := range 20 {
		e.put(t, cli, 1, fmt.Sprintf("/b/x%d", i), fmt.Sprintf("b%d", i)) // revisions 2..21: history to catch up on
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	defer cancel()
	// A synced watch whose events keep the stream's send channel
	// backlogged: a burst of writes right before each attempt.
	busy := e.watch(ctx, cli, client, 1, watch.Request{Key: "/a/", RangeEnd: kv.PrefixEnd("/a/"), PrevKV: true}, nil)
	found := false
	var watchers []*sync.WaitGroup
	for attempt := 0; attempt < 30 && !found; attempt++ {
		var burst sync.WaitGroup
		for w := range 60 {
			burst.Add(1)
			go func() {
				defer burst.Done()
				e.put(t, cli, 100+w, fmt.Sprintf("/a/w%d", w), fmt.Sprintf("a%d-%d", attempt, w))
			}()
		}
		burst.Wait()
		wctx, wcancel := context.WithCancel(ctx)
		var mu sync.Mutex
		events := 0
		overtaken := make(chan struct{}, 1)
		e.progressRequest(client)
		if err := cli.RequestProgress(ctx); err != nil {
			t.Fatal(err)
		}
		watchers = append(watchers, e.watch(wctx, cli, client, 2+attempt, watch.Request{Key: "/b/", RangeEnd: kv.PrefixEnd("/b/"), StartRevision: 2}, func(r watch.Response) {
			mu.Lock()
			defer mu.Unlock()
			events += len(r.Events)
			if r.IsProgressNotify() && r.Revision >= 2 && events < 20 {
				select {
				case overtaken <- struct{}{}:
				default:
				}
			}
		}))
		select {
		case <-overtaken:
			found = true
			time.Sleep(200 * time.Millisecond) // let its catch-up arrive
		case <-time.After(300 * time.Millisecond):
		}
		wcancel()
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	busy.Wait()
	for _, w := range watchers {
		w.Wait()
	}
	return found
}

// evidenceEtcd starts a fresh one-member etcd and a client of it; stop
// closes both.
func evidenceEtcd(t *testing.T) (cli *clientv3.Client, stop func()) {
	cluster, err := etcdtest.Start(etcdtest.Options{Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	cli, err = clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		cluster.Close()
		t.Fatal(err)
	}
	return cli, func() { cli.Close(); cluster.Close() }
}

// putUntil puts key again and again as client until stop is closed or a
// put fails (recorded with an unknown outcome).
func putUntil(e *evidence, cli *clientv3.Client, client int, key string, stop <-chan struct{}) {
	for i := 1; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		value := fmt.Sprintf("c%d-v%d", client, i)
		call := e.now()
		resp, err := cli.Put(context.Background(), key, value)
		ret := e.now()
		op := traces.Op{Client: client, Call: call, Return: ret, Request: kv.Request{Put: &kv.PutRequest{Key: key, Value: value}}}
		if err == nil {
			op.Response = &kv.Response{Revision: resp.Header.Revision, Put: &kv.PutResponse{}}
		}
		e.mu.Lock()
		e.tr.Ops = append(e.tr.Ops, op)
		e.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// recordPrevKVBeforeFlag: etcd 3.7.3's v3rpc recvLoop registers a watch
// (watchStream.Watch) before it sets sws.prevKV[id], and sendLoop reads
// that flag when it takes an event off the watch stream. An event of a
// write that commits in between goes out without prev_kv although the
// watch asked for it (FINDINGS etcd-1). One client puts one key as fast as
// it can (8 clients) while watches of that key with prev_kv are created one after the
// other, each from now, until one's first event lacks prev_kv although the
// key existed before (Version > 1), with no compaction at all. The trace
// keeps every put and that watch (the others, each ended after its first
// event, are dropped: the check of one watch does not depend on another's).
func recordPrevKVBeforeFlag(t *testing.T) {
	const file = "etcd-3.7.3-prevkv-missing-at-creation.ndjson.gz"
	cli, stop := evidenceEtcd(t)
	defer stop()
	e := newEvidence(file)
	const key = "/k"
	e.put(t, cli, 1, key, "v0")
	done := make(chan struct{})
	var writer sync.WaitGroup
	for client := 1; client <= 8; client++ {
		writer.Go(func() { putUntil(e, cli, client, key, done) })
	}
	var hit *traces.Watch
	const tries = 30000
	for id := 2; id < 2+tries && hit == nil; id++ {
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan bool, 1)
		done := e.watch(ctx, cli, 9, id, watch.Request{Key: key, PrevKV: true}, func(r watch.Response) {
			if len(r.Events) > 0 {
				ev := r.Events[0]
				select {
				case first <- ev.PrevKV == nil && ev.KV.Version > 1:
				default:
				}
			}
		})
		missing := <-first
		cancel()
		done.Wait()
		if missing {
			e.mu.Lock()
			hit = e.tr.Watches[len(e.tr.Watches)-1]
			e.mu.Unlock()
			t.Logf("watch %d of %d: its first event lacks prev_kv", id-1, tries)
		}
	}
	close(done)
	writer.Wait()
	if hit == nil {
		t.Fatalf("none of %d watches got an event without prev_kv; the race did not show (run again)", tries)
	}
	e.tr.Watches = []*traces.Watch{hit}
	if err := traces.WriteFile(filepath.Join("corpus", file), e.tr); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s: %d ops, 1 watch", file, len(e.tr.Ops))
}
