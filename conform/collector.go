package conform

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces/record"
)

// collector watches every key of the run from its first revision, asking for
// progress every 100ms, and re-watches after a compaction cancel or a broken
// stream. What it sees pins writes of unknown outcome (their values are
// unique), and its progress tells when the run's last write was seen.
type collector struct {
	r    *run
	cli  *clientv3.Client
	c    *record.Client
	seen atomic.Int64 // highest revision known delivered
	done sync.WaitGroup
}

func newCollector(ctx context.Context, r *run) (*collector, error) {
	cli, err := dial(r.cfg)
	if err != nil {
		return nil, err
	}
	col := &collector{r: r, cli: cli, c: r.rec.Client(cli)}
	r.stats.streams.Add(1)
	col.seen.Store(r.headRev.Load())
	col.done.Add(2)
	go col.watch(ctx, r.headRev.Load()+1)
	go col.requestProgress(ctx)
	return col, nil
}

func (col *collector) watch(ctx context.Context, from int64) {
	defer col.done.Done()
	defer col.cli.Close()
	for ctx.Err() == nil {
		req := watch.Request{Key: col.r.prefix, RangeEnd: kv.PrefixEnd(col.r.prefix), StartRevision: from, PrevKV: true, ProgressNotify: true}
		col.r.stats.watches.Add(1)
		w := col.c.Watch(clientv3.WithRequireLeader(ctx), col.cli.Watcher, req)
		for resp := range w.C {
			col.r.stats.responses.Add(1)
			col.r.stats.events.Add(int64(len(resp.Events)))
			switch {
			case resp.CompactRevision != 0:
				from = resp.CompactRevision
			case len(resp.Events) > 0:
				from = resp.Events[len(resp.Events)-1].KV.ModRevision + 1
				col.advance(from - 1)
			case resp.IsProgressNotify() && resp.Revision >= from-1:
				from = resp.Revision + 1
				col.advance(resp.Revision)
			}
		}
		if ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (col *collector) advance(rev int64) {
	for {
		cur := col.seen.Load()
		if rev <= cur || col.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func (col *collector) requestProgress(ctx context.Context) {
	defer col.done.Done()
	every(ctx, 100*time.Millisecond, func() error {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		col.cli.Watcher.RequestProgress(clientv3.WithRequireLeader(pctx))
		return nil
	})
}

// waitFor waits until the collector has seen revision rev, or timeout.
func (col *collector) waitFor(ctx context.Context, rev int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for col.seen.Load() < rev {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func (col *collector) wait() { col.done.Wait() }

func nopLogger() *zap.Logger { return zap.NewNop() }
