package record_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

// TestRecordResumeBelowFutureStart records, with -record-corpus, a fault of
// clientv3 3.7.3 against a correct etcd 3.7.3 (1 member): a watch from a
// future revision that is handed its stream's progress answer — computed
// by etcd before the watch was registered, so below the watch's start —
// takes that answer's revision plus one as where to resume
// (client/v3/watch.go serveSubstream: nextRev = Header.Revision + 1 for any
// response but the created one). When the stream breaks before the watch
// gets an event (here: the member restarts), clientv3 re-creates it from
// there, below the revision the caller asked for, and the caller receives
// events below its start revision (or, if that history was compacted
// meanwhile, a compaction cancel the watch never needed). Same family as
// etcd#20221 (open). The recorder retries until the shape shows: the
// answer must reach the new watch before its first event. TestCorpus then
// holds the checker to FAIL StartRevision on it.
func TestRecordResumeBelowFutureStart(t *testing.T) {
	if !*recordCorpus {
		t.Skip("run with -record-corpus to record the evidence again (timing-dependent, retried until the shape shows)")
	}
	for attempt := 1; attempt <= 5; attempt++ {
		if raw, ok := resumeBelowFutureStart(t); ok {
			writeCorpus(t, "clientv3-3.7.3-resume-below-future-start.ndjson.gz", raw)
			return
		}
		t.Logf("attempt %d: no progress answer below a new future watch's start; again", attempt)
	}
	t.Fatal("the shape never showed")
}

func resumeBelowFutureStart(t *testing.T) ([]byte, bool) {
	cluster, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var buf bytes.Buffer
	never := int64(-1)
	w, err := traces.NewWriter(&buf, traces.Header{System: "etcd", SystemVersion: etcdtest.Version,
		Tool: "traces/record TestRecordResumeBelowFutureStart", UniqueValues: true, BaseRevision: 1, BaseCompactRevision: &never})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.New(w)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writers := make(chan *record.Client, 60)
	for range cap(writers) {
		writers <- rec.Client(cli)
	}
	var head int64
	var mu sync.Mutex
	put := func(key, value string) {
		c := <-writers
		defer func() { writers <- c }()
		for ctx.Err() == nil {
			resp, err := c.Do(ctx, kv.Request{Put: &kv.PutRequest{Key: key, Value: value}})
			if err == nil && resp.Err == nil {
				mu.Lock()
				head = max(head, resp.Revision)
				mu.Unlock()
				return
			}
			time.Sleep(50 * time.Millisecond) // the member restarting; a new value next time
			value += "'"
		}
	}
	stream := clientv3.WithRequireLeader(ctx)
	wc := rec.Client(cli)
	drain := func(rw *record.Watch, seen func(watch.Response)) *sync.WaitGroup {
		var done sync.WaitGroup
		done.Go(func() {
			for r := range rw.C {
				if seen != nil {
					seen(r)
				}
			}
		})
		return &done
	}
	// A synced watch whose events keep the stream's send channel busy, so
	// that a new watch's created response (etcd's control stream) can
	// overtake the progress answer queued behind them.
	busy := drain(wc.Watch(stream, cli.Watcher, watch.Request{Key: "/a/", RangeEnd: kv.PrefixEnd("/a/"), PrevKV: true}), nil)
	defer busy.Wait()
	defer cancel()
	var watchers []*sync.WaitGroup
	defer func() {
		for _, w := range watchers {
			w.Wait()
		}
	}()
	for attempt := 0; attempt < 30; attempt++ {
		var burst sync.WaitGroup
		for i := range 60 {
			burst.Go(func() { put(fmt.Sprintf("/a/w%d", i), fmt.Sprintf("a%d-%d", attempt, i)) })
		}
		burst.Wait()
		mu.Lock()
		start := head + 5
		mu.Unlock()
		bctx, bcancel := context.WithCancel(stream)
		low := make(chan int64, 1)
		if err := wc.RequestProgress(stream, cli.Watcher); err != nil {
			t.Fatal(err)
		}
		b := wc.Watch(bctx, cli.Watcher, watch.Request{Key: "/b/", RangeEnd: kv.PrefixEnd("/b/"), StartRevision: start})
		events := 0
		watchers = append(watchers, drain(b, func(r watch.Response) {
			events += len(r.Events)
			if r.IsProgressNotify() && r.Revision < start-1 && events == 0 {
				select {
				case low <- r.Revision:
				default:
				}
			}
		}))
		select {
		case rev := <-low:
			// The watch from start now resumes from rev+1 if its stream
			// breaks: restart the member, then write below start.
			t.Logf("watch %d from %d got the stream's progress answer %d; restarting the member", b.ID, start, rev)
			annotateStart := rec.Now()
			if err := cluster.Restart(0); err != nil {
				t.Fatal(err)
			}
			rec.Annotate("restart", "the member was restarted gracefully: clientv3 resumes every watch of the stream", annotateStart)
			for i := range 8 {
				put(fmt.Sprintf("/b/k%d", i), fmt.Sprintf("b%d", i))
			}
			time.Sleep(time.Second) // let the resumed watch deliver
			bcancel()
			cancel()
			for _, w := range watchers {
				w.Wait()
			}
			busy.Wait()
			if err := rec.Flush(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes(), true
		case <-time.After(300 * time.Millisecond):
			bcancel()
		}
	}
	return nil, false
}
