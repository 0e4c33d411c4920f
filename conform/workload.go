// Package conform runs watchspec's conformance workload against any etcd-v3
// endpoint and records it as a trace (docs/TRACE_FORMAT.md), ready to be
// checked against docs/SPEC.md by the linearizability package.
//
// The workload speaks through the real etcd client, go.etcd.io/etcd/client/v3,
// as every user of an etcd-compatible store does. It runs concurrently:
//
//   - KV clients put unique values, delete keys and key ranges, run
//     multi-key and optimistic (compare-and-swap) transactions, and read
//     the current and past revisions;
//   - a compactor compacts, every CompactEvery, to the revision it saw in the
//     previous round (as Kubernetes does);
//   - watchers open watch after watch — from now, from the past, from the
//     future, from compacted revisions, resuming where the last one stopped
//     — with prevKV, filters and progress notifications, and sometimes stop
//     reading for a while (slow consumers) or ask for progress;
//   - a collector watches every key of the run from its first revision, as
//     etcd's robustness tests do, so that a write whose client never learnt
//     the outcome can be found by its unique value.
//
// The endpoint must hold no keys under the run's prefix and have no other
// writers while the run lasts: revisions are store-wide.
package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

// Config shapes a run. Zero values take the defaults noted.
type Config struct {
	// Endpoints of the etcd-v3 store under test (required).
	Endpoints []string
	// Duration of the workload (default 30s), not counting the final
	// catch-up of the collector.
	Duration time.Duration
	// Clients is the number of KV clients (default 8).
	Clients int
	// Watchers is the number of watching clients (default 8).
	Watchers int
	// CompactEvery is the compaction period (default 150ms; negative: never).
	CompactEvery time.Duration
	// Seed makes the workload's choices reproducible (the timing of a
	// concurrent run is not).
	Seed int64
	// Prefix is where the run's keys live (default "/watchspec/").
	Prefix string
	// RequestTimeout bounds each request (default 2s); a request that
	// times out has an unknown outcome.
	RequestTimeout time.Duration
	// System and SystemVersion name the store under test in the trace.
	System, SystemVersion string
	// Profile names the allowances the trace is to be checked under.
	Profile string
	// Workload is the shape of the requests: "" (WorkloadFull) uses the
	// whole etcd KV and watch API; "kubernetes" (WorkloadKubernetes) only
	// what the Kubernetes apiserver's etcd3 storage sends (kubernetes.go).
	Workload string
	// Restart, when set, is called every RestartEvery to restart the
	// server; clients must ride through it.
	Restart      func(context.Context) error
	RestartEvery time.Duration
	// Progress, when set, is told how the run goes, about once a second.
	Progress func(format string, args ...any)
}

func (c *Config) defaults() error {
	if len(c.Endpoints) == 0 {
		return errors.New("no endpoints")
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Clients <= 0 {
		c.Clients = 8
	}
	if c.Watchers < 0 {
		c.Watchers = 0
	}
	if c.CompactEvery == 0 {
		c.CompactEvery = 150 * time.Millisecond
	}
	if c.Prefix == "" {
		c.Prefix = "/watchspec/"
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 2 * time.Second
	}
	if c.System == "" {
		c.System = "etcd-v3 endpoint"
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	switch c.Workload {
	case WorkloadFull, WorkloadKubernetes:
	default:
		return fmt.Errorf("unknown workload %q (known: %q, %q)", c.Workload, WorkloadFull, WorkloadKubernetes)
	}
	return nil
}

// The workload shapes of [Config.Workload].
const (
	WorkloadFull       = ""
	WorkloadKubernetes = "kubernetes"
)

// Stats counts what a run did.
type Stats struct {
	Ops, UnknownOps, Watches, WatchResponses, Events, Compactions, Restarts int64
	Duration                                                                time.Duration
}

// run is the shared state of one run.
type run struct {
	cfg    Config
	rec    *record.Recorder
	keys   []string
	prefix string

	headRev    atomic.Int64 // highest revision any response showed
	compactRev atomic.Int64 // last successful compaction
	stats      struct {
		ops, unknown, watches, responses, events, compactions, restarts atomic.Int64
	}
	valueSeq atomic.Int64
}

func dial(cfg Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		DialOptions:          []grpc.DialOption{},
		Logger:               nopLogger(),
	})
}

// Record runs the workload against cfg.Endpoints and writes the trace to
// out. It returns an error when the endpoint cannot be used (unreachable,
// keys already under the prefix); what the store did wrong is for the
// checker to find in the trace.
func Record(ctx context.Context, cfg Config, out io.Writer) (Stats, error) {
	if err := cfg.defaults(); err != nil {
		return Stats{}, err
	}
	probe, err := dial(cfg)
	if err != nil {
		return Stats{}, fmt.Errorf("connecting to %v: %v", cfg.Endpoints, err)
	}
	defer probe.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	existing, err := probe.Get(pctx, cfg.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return Stats{}, fmt.Errorf("reading %v: %v", cfg.Endpoints, err)
	}
	if existing.Count > 0 {
		return Stats{}, fmt.Errorf("%d keys already exist under %q: conform needs a prefix no one else uses", existing.Count, cfg.Prefix)
	}
	tool := "watchspec conform"
	if cfg.Workload == WorkloadKubernetes {
		if err := checkCompactKeyAbsent(ctx, probe); err != nil {
			return Stats{}, err
		}
		tool += " --workload " + cfg.Workload
	}
	w, err := traces.NewWriter(out, traces.Header{System: cfg.System, SystemVersion: cfg.SystemVersion,
		Tool: tool, Seed: cfg.Seed, Profile: cfg.Profile, UniqueValues: true, BaseRevision: existing.Header.Revision})
	if err != nil {
		return Stats{}, err
	}
	r := &run{cfg: cfg, rec: record.New(w), prefix: cfg.Prefix}
	for _, k := range []string{"a/0", "a/1", "a/2", "a/3", "b/0", "b/1", "b/2", "c", "d", "e"} {
		r.keys = append(r.keys, cfg.Prefix+k)
	}
	r.headRev.Store(existing.Header.Revision)
	r.compactRev.Store(0)
	start := time.Now()
	err = r.run(ctx)
	stats := Stats{Ops: r.stats.ops.Load(), UnknownOps: r.stats.unknown.Load(), Watches: r.stats.watches.Load(),
		WatchResponses: r.stats.responses.Load(), Events: r.stats.events.Load(), Compactions: r.stats.compactions.Load(),
		Restarts: r.stats.restarts.Load(), Duration: time.Since(start)}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return stats, err
}

func (r *run) seen(resp kv.Response) {
	for {
		cur := r.headRev.Load()
		if resp.Revision <= cur || r.headRev.CompareAndSwap(cur, resp.Revision) {
			return
		}
	}
}

func (r *run) run(ctx context.Context) error {
	workCtx, stopWork := context.WithTimeout(ctx, r.cfg.Duration)
	defer stopWork()
	// The collector starts first, from the revision after the base.
	collCtx, stopCollector := context.WithCancel(ctx)
	defer stopCollector()
	collector, err := newCollector(collCtx, r)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.Clients+r.cfg.Watchers+3)
	spawn := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	kube := r.cfg.Workload == WorkloadKubernetes
	for i := range r.cfg.Clients {
		if kube {
			spawn(func() error { return r.kubeClient(workCtx, i) })
		} else {
			spawn(func() error { return r.kvClient(workCtx, i) })
		}
	}
	for i := range r.cfg.Watchers {
		if kube {
			spawn(func() error { return r.kubeWatcher(workCtx, i) })
		} else {
			spawn(func() error { return r.watcher(workCtx, i) })
		}
	}
	if r.cfg.CompactEvery > 0 {
		if kube {
			spawn(func() error { return r.kubeCompactor(workCtx) })
			spawn(func() error { return r.compactKeyWatcher(workCtx) })
		} else {
			spawn(func() error { return r.compactor(workCtx) })
		}
	}
	if r.cfg.Restart != nil && r.cfg.RestartEvery > 0 {
		spawn(func() error { return r.restarter(workCtx) })
	}
	spawn(func() error { r.progress(workCtx); return nil })
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	// A last write, then wait until the collector has seen it: every
	// earlier write is then either observed or known not to have happened.
	final, err := r.finalWrite(ctx)
	if err == nil {
		collector.waitFor(ctx, final, 15*time.Second)
	}
	stopCollector()
	collector.wait()
	return nil
}

func (r *run) progress(ctx context.Context) {
	start := time.Now()
	every(ctx, time.Second, func() error {
		r.cfg.Progress("%3.0fs: %d ops (%d unknown), %d watches, %d events, %d compactions, revision %d",
			time.Since(start).Seconds(), r.stats.ops.Load(), r.stats.unknown.Load(), r.stats.watches.Load(),
			r.stats.events.Load(), r.stats.compactions.Load(), r.headRev.Load())
		return nil
	})
}

// do sends one request through c with the run's timeout.
func (r *run) do(ctx context.Context, c *record.Client, req kv.Request) (kv.Response, error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := c.Do(rctx, req)
	r.stats.ops.Add(1)
	if err != nil {
		r.stats.unknown.Add(1)
		return resp, err
	}
	r.seen(resp)
	return resp, nil
}

func (r *run) value(client int) string {
	return fmt.Sprintf("%d/%d/%d", r.cfg.Seed, client, r.valueSeq.Add(1))
}

func (r *run) kvClient(ctx context.Context, i int) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(i)))
	c := r.rec.Client(cli)
	for ctx.Err() == nil {
		key := r.keys[rng.IntN(len(r.keys))]
		var req kv.Request
		switch p := rng.IntN(100); {
		case p < 35:
			req.Put = &kv.PutRequest{Key: key, Value: r.value(i), PrevKV: rng.IntN(4) == 0}
		case p < 45:
			req.Delete = &kv.DeleteRequest{Key: key, PrevKV: rng.IntN(2) == 0}
		case p < 48:
			sub := r.prefix + []string{"a/", "b/"}[rng.IntN(2)]
			req.Delete = &kv.DeleteRequest{Key: sub, RangeEnd: kv.PrefixEnd(sub)}
		case p < 56:
			// An optimistic update, as Kubernetes does: put if unchanged since read.
			get, err := r.do(ctx, c, kv.Request{Range: &kv.RangeRequest{Key: key}})
			if err != nil || get.Err != nil {
				continue
			}
			var mod int64
			if len(get.Range.KVs) > 0 {
				mod = get.Range.KVs[0].ModRevision
			}
			req.Txn = &kv.TxnRequest{
				Compare: []kv.Compare{{Key: key, Target: kv.TargetModRevision, Result: kv.CompareEqual, Number: mod}},
				Success: []kv.Op{{Put: &kv.PutRequest{Key: key, Value: r.value(i)}}},
				Failure: []kv.Op{{Range: &kv.RangeRequest{Key: key}}},
			}
		case p < 63:
			// A multi-key transaction: several keys at one revision.
			var ops []kv.Op
			for _, j := range rng.Perm(len(r.keys))[:2+rng.IntN(2)] {
				if rng.IntN(4) == 0 {
					ops = append(ops, kv.Op{Delete: &kv.DeleteRequest{Key: r.keys[j]}})
				} else {
					ops = append(ops, kv.Op{Put: &kv.PutRequest{Key: r.keys[j], Value: r.value(i)}})
				}
			}
			req.Txn = &kv.TxnRequest{Success: ops}
		case p < 85:
			rr := &kv.RangeRequest{Key: key}
			if rng.IntN(2) == 0 {
				sub := r.prefix + []string{"a/", "b/", ""}[rng.IntN(3)]
				rr = &kv.RangeRequest{Key: sub, RangeEnd: kv.PrefixEnd(sub)}
				switch rng.IntN(6) {
				case 0:
					rr.Limit = int64(1 + rng.IntN(3))
				case 1:
					rr.CountOnly = true
				case 2:
					rr.KeysOnly = true
				}
			}
			req.Range = rr
		default:
			// A read of the past, possibly of compacted history.
			head, low := r.headRev.Load(), r.compactRev.Load()
			rev := max(1, low-1+rng.Int64N(max(1, head-low+2)))
			sub := r.prefix
			req.Range = &kv.RangeRequest{Key: sub, RangeEnd: kv.PrefixEnd(sub), Revision: rev}
		}
		r.do(ctx, c, req)
	}
	return nil
}

// everyCompactPeriod dials a recorded client and calls round with it every
// CompactEvery until ctx ends: the loop of both compactors.
func (r *run) everyCompactPeriod(ctx context.Context, round func(c *record.Client)) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	c := r.rec.Client(cli)
	return every(ctx, r.cfg.CompactEvery, func() error { round(c); return nil })
}

// every calls f every period until ctx ends (then it returns nil) or f
// fails (then it returns f's error).
func every(ctx context.Context, period time.Duration, f func() error) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := f(); err != nil {
			return err
		}
	}
}

func (r *run) compactor(ctx context.Context) error {
	prev := int64(0)
	return r.everyCompactPeriod(ctx, func(c *record.Client) {
		if prev > r.compactRev.Load() {
			resp, err := r.do(ctx, c, kv.Request{Compact: &kv.CompactRequest{Revision: prev}})
			if err == nil && resp.Err == nil {
				r.compactRev.Store(prev)
				r.stats.compactions.Add(1)
			}
		}
		prev = r.headRev.Load()
	})
}

func (r *run) restarter(ctx context.Context) error {
	return every(ctx, r.cfg.RestartEvery, func() error {
		start := r.rec.Now()
		if err := r.cfg.Restart(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("restarting the server: %v", err)
		}
		r.stats.restarts.Add(1)
		r.rec.Annotate("restart", "the server was restarted on its data directory", start)
		return nil
	})
}

func (r *run) finalWrite(ctx context.Context) (int64, error) {
	cli, err := dial(r.cfg)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	c := r.rec.Client(cli)
	for attempt := 0; attempt < 10; attempt++ {
		req := kv.Request{Put: &kv.PutRequest{Key: r.prefix + "final", Value: r.value(-1)}}
		if r.cfg.Workload == WorkloadKubernetes {
			req = kubeCreate(r.prefix+"final", r.value(-1))
		}
		resp, err := r.do(ctx, c, req)
		if err == nil && resp.Err == nil && (resp.Txn == nil || resp.Txn.Succeeded) {
			return resp.Revision, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0, errors.New("the final write never succeeded")
}

// watcher opens watch sessions one after the other until ctx is done.
func (r *run) watcher(ctx context.Context, i int) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(1000+i)))
	c := r.rec.Client(cli)
	resumeFrom := int64(0)
	for ctx.Err() == nil {
		req := watch.Request{PrevKV: rng.IntN(2) == 0, ProgressNotify: rng.IntN(2) == 0}
		switch rng.IntN(3) {
		case 0:
			req.Key = r.keys[rng.IntN(len(r.keys))]
		case 1:
			sub := r.prefix + []string{"a/", "b/"}[rng.IntN(2)]
			req.Key, req.RangeEnd = sub, kv.PrefixEnd(sub)
		default:
			req.Key, req.RangeEnd = r.prefix, kv.PrefixEnd(r.prefix)
		}
		if rng.IntN(7) == 0 {
			req.NoPut = rng.IntN(2) == 0
			req.NoDelete = !req.NoPut
		}
		head, low := r.headRev.Load(), r.compactRev.Load()
		switch p := rng.IntN(100); {
		case resumeFrom > 0 && p < 25:
			req.StartRevision = resumeFrom // resume where the last session stopped
		case p < 45:
			req.StartRevision = 0 // from now
		case p < 75:
			req.StartRevision = max(1, low+rng.Int64N(max(1, head-low+1))) // from the past
		case p < 88:
			req.StartRevision = head + 1 + rng.Int64N(10) // from the future
		default:
			req.StartRevision = max(1, low-rng.Int64N(5)) // at or below the compaction
		}
		resumeFrom, _ = r.session(ctx, cli, c, rng, req)
	}
	return nil
}

// session runs one watch for a while and returns the revision to resume
// from: after the last one seen, or the compaction revision after a
// compaction cancel (the caller then relists, in Kubernetes terms), and
// whether the watch was cancelled for compaction.
func (r *run) session(ctx context.Context, cli *clientv3.Client, c *record.Client, rng *rand.Rand, req watch.Request) (int64, bool) {
	sctx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(1800))*time.Millisecond)
	defer cancel()
	r.stats.watches.Add(1)
	w := c.Watch(clientv3.WithRequireLeader(sctx), cli.Watcher, req)
	next := req.StartRevision
	pauseAt := time.Duration(-1)
	if rng.IntN(5) == 0 {
		pauseAt = time.Duration(rng.IntN(500)) * time.Millisecond
	}
	progressAt := time.Duration(-1)
	if rng.IntN(3) == 0 {
		progressAt = time.Duration(rng.IntN(800)) * time.Millisecond
	}
	start := time.Now()
	for {
		if pauseAt >= 0 && time.Since(start) > pauseAt {
			pauseAt = -1
			select { // a slow consumer: stop reading for a while
			case <-sctx.Done():
			case <-time.After(time.Duration(50+rng.IntN(450)) * time.Millisecond):
			}
		}
		if progressAt >= 0 && time.Since(start) > progressAt {
			progressAt = -1
			pctx, pcancel := context.WithTimeout(sctx, 500*time.Millisecond)
			cli.Watcher.RequestProgress(clientv3.WithRequireLeader(pctx))
			pcancel()
		}
		select {
		case resp, ok := <-w.C:
			if !ok {
				return next, false
			}
			r.stats.responses.Add(1)
			r.stats.events.Add(int64(len(resp.Events)))
			switch {
			case resp.CompactRevision != 0:
				return resp.CompactRevision, true
			case len(resp.Events) > 0:
				next = resp.Events[len(resp.Events)-1].KV.ModRevision + 1
			case resp.IsProgressNotify() && resp.Revision >= next:
				next = resp.Revision + 1
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
}
