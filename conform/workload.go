// Package conform runs watchspec's conformance workload against any etcd-v3
// endpoint and records it as a trace (docs/TRACE_FORMAT.md), ready to be
// checked against docs/SPEC.md by the linearizability package.
//
// The workload speaks through the real etcd client, go.etcd.io/etcd/client/v3,
// and uses it the way etcd's users do. It runs concurrently:
//
//   - KV clients put unique values, delete keys and key ranges, run
//     multi-key and optimistic (compare-and-swap) transactions, and read
//     the current and past revisions, some of them serializable;
//   - a compactor compacts, every CompactEvery, to the revision it saw in the
//     previous round (as Kubernetes does);
//   - watching clients each keep WatchesPerStream watches open at once on
//     one clientv3 watch stream (one Watcher, one context metadata — as the
//     Kubernetes apiserver does), and ask that stream for progress; each
//     watch comes from now, the past, the future, a compacted revision, or
//     resumes where the last one stopped, with prevKV, filters and progress
//     notifications, and some stop reading for a while (slow readers);
//   - a catch-up client opens CatchUpWatches watches at once on its one
//     stream, from where the previous burst ended, some thousand revisions
//     back (the compactor does not compact past it), and reads them up to
//     the head while asking the stream for progress — a restarting apiserver's watch cache: the burst that makes
//     etcd park watchers as victims and re-send their batches later;
//   - a collector watches every key of the run from its first revision, as
//     etcd's robustness tests do, so that a write whose client never learnt
//     the outcome can be found by its unique value;
//   - with Disrupt (or Restart), members are killed or restarted while
//     clients ride through: clientv3 resumes watches on another member.
//
// A store need not be fresh: the run records the revision and the
// compaction in force when it starts, and its keys live under a prefix of
// their own. Nobody else may write while the run lasts: revisions are
// store-wide.
//
// To start, [Record] a run into a trace and check it with
// linearizability.Check, or let `watchspec conform` do both. From go test,
// conform/conformtest.TestStore runs, checks and reports in one call, and
// conform/brokenstore puts a deliberately broken server in front of a
// store, to show that such a test fails.
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

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

// Config shapes a run. Zero values take the defaults noted.
type Config struct {
	// Endpoints of the etcd-v3 store under test (required).
	Endpoints []string
	// Dial connects one client of the run. It gets the run's client
	// configuration (Endpoints, timeouts, a silent logger) and may add to
	// it — TLS, credentials, DialOptions with a dialer for an in-memory
	// listener — before calling clientv3.New. Default: clientv3.New.
	Dial func(clientv3.Config) (*clientv3.Client, error)
	// Duration of the workload (default 30s), not counting the final
	// catch-up of the collector.
	Duration time.Duration
	// Clients is the number of KV clients (default 8).
	Clients int
	// Watchers is the number of watching clients (default 8), each with
	// its own watch stream.
	Watchers int
	// WatchesPerStream is how many watches each watching client keeps open
	// at once on its one stream (default 4; 1 is one watch per stream).
	WatchesPerStream int
	// SlowReaders is the fraction of watches that stop reading for a while
	// (default 0.2; negative: none).
	SlowReaders float64
	// ProgressRequestEvery is how often each watching client asks its
	// stream for progress (clientv3's RequestProgress; default 250ms), on
	// top of the requests its watches make now and then; negative: none
	// (the collector asks its own stream all the same).
	ProgressRequestEvery time.Duration
	// FragmentWatches is the fraction of watches that let the server
	// fragment large responses (clientv3.WithFragment; default 0: none).
	// clientv3 joins the fragments, so the trace and the check are the
	// same; a server that fragments wrongly (a revision lost or doubled
	// across fragments) shows as a watch property failing. The adversary
	// fragments every response of several events it chooses to (docs/ADVERSARY.md).
	FragmentWatches float64
	// CatchUpWatches is how many watches the catch-up client opens at once
	// on its stream, burst after burst (default 200; negative: no catch-up
	// client).
	CatchUpWatches int
	// SerializableReads is the fraction of reads sent serializable
	// (clientv3.WithSerializable: the member that gets one answers from its
	// own state, which may be behind; default 0.1; negative: none). They
	// are recorded as such (traces.Op.Serializable).
	SerializableReads float64
	// CompactEvery is the compaction period (default 150ms; negative: never).
	CompactEvery time.Duration
	// Seed makes the workload's choices reproducible (the timing of a
	// concurrent run is not).
	Seed int64
	// Prefix is where the run's keys live. The default is a new prefix per
	// run, "/watchspec/<time>-<random>/", so that a store reused across runs
	// holds no keys of this one.
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
	// Leases is the number of lease clients (default 0: none; the
	// kubernetes workload has none): each grants leases, puts keys with
	// them, keeps some alive, revokes some and lets others expire, so that
	// the server deletes keys of its own accord (docs/SPEC.md §2.9–§2.11,
	// §3.14, §3.15), and watches over those keys, with prevKV, see it. A
	// store that serves no Lease API answers every lease request with an
	// error (an unknown outcome) and every leased put with one: nothing
	// is checked of it then.
	Leases int
	// Restart, when set, is called every RestartEvery to restart the
	// server; clients must ride through it.
	Restart      func(context.Context) error
	RestartEvery time.Duration
	// Disrupt, when set, is called every RestartEvery instead of Restart:
	// it disrupts the system under test (kills a member, restarts one) and
	// says what it did, for the trace's annotations and Stats.
	Disrupt func(context.Context) (Disruption, error)
	// Progress, when set, is told how the run goes, about once a second.
	Progress func(format string, args ...any)
}

// Disruption is what one call of Config.Disrupt did.
type Disruption struct {
	// Kill says a member was killed (and started again), rather than
	// restarted gracefully.
	Kill bool
	// Text describes it, such as "killed member m1 (the leader) for 400ms".
	Text string
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
	if c.Leases < 0 || c.Workload == WorkloadKubernetes {
		c.Leases = 0
	}
	if c.WatchesPerStream <= 0 {
		c.WatchesPerStream = 4
	}
	if c.SlowReaders == 0 {
		c.SlowReaders = 0.2
	}
	if c.ProgressRequestEvery == 0 {
		c.ProgressRequestEvery = 250 * time.Millisecond
	}
	if c.CatchUpWatches == 0 {
		c.CatchUpWatches = 200
	}
	if c.SerializableReads == 0 {
		c.SerializableReads = 0.1
	}
	if c.SlowReaders > 1 || c.SerializableReads > 1 {
		return fmt.Errorf("SlowReaders (%v) and SerializableReads (%v) are fractions, at most 1", c.SlowReaders, c.SerializableReads)
	}
	if c.FragmentWatches < 0 || c.FragmentWatches > 1 {
		return fmt.Errorf("FragmentWatches (%v) is a fraction, from 0 to 1", c.FragmentWatches)
	}
	if c.CompactEvery == 0 {
		c.CompactEvery = 150 * time.Millisecond
	}
	if c.Prefix == "" {
		c.Prefix = fmt.Sprintf("/watchspec/%s-%04x/", time.Now().UTC().Format("20060102T150405.000"), rand.N(1<<16))
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
	if c.Dial == nil {
		c.Dial = clientv3.New
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
	// Ops counts the key-value operations, UnknownOps those whose outcome
	// the client never learnt, SerializableReads the reads sent
	// serializable.
	Ops, UnknownOps, SerializableReads int64
	// Watches counts the watches; Streams the watch streams they shared
	// (one per watching client, the catch-up client and the collector);
	// CatchUpWatches those opened in bursts by the catch-up client.
	Watches, Streams, CatchUpWatches int64
	// WatchResponses and Events count what the watches received;
	// ProgressNotifies the responses that were progress notifications.
	WatchResponses, Events, ProgressNotifies int64
	// ProgressRequests counts the progress requests sent on shared streams.
	ProgressRequests int64
	// LoweredHeaders counts watch responses whose header revision is below
	// an earlier one of the same watch: etcd's re-sends of batches it
	// parked as victims (server/storage/mvcc/watchable_store.go
	// moveVictims), or a resumed watch served by a member that is behind.
	LoweredHeaders int64
	// Resumed counts watches that received events both before and after a
	// disruption without being created again: clientv3 resumed them.
	Resumed int64
	// Compactions counts successful compactions; BaseCompaction is the
	// compaction in force when the run started (0: none) and BaseRevision
	// the store's revision then.
	Compactions, BaseCompaction, BaseRevision int64
	// Restarts and Kills count the disruptions.
	Restarts, Kills int64
	// LeaseGrants, LeaseRevokes, LeasedPuts and KeepAlives count the
	// successful lease operations of the lease clients (Config.Leases);
	// LeaseExpiries the leases they saw expire (TimeToLive answered -1
	// for a lease they had not revoked).
	LeaseGrants, LeaseRevokes, LeasedPuts, KeepAlives, LeaseExpiries int64
	Duration                                                         time.Duration
}

// run is the shared state of one run.
type run struct {
	cfg    Config
	rec    *record.Recorder
	keys   []string
	prefix string
	// watchSubs are the sub-prefixes watches choose from.
	watchSubs []string

	headRev    atomic.Int64 // highest revision any response showed
	compactRev atomic.Int64 // last successful compaction
	// compactMu makes a compaction round and a pin of the catch-up client
	// atomic: nothing above pin is compacted, unless it is 0.
	compactMu sync.Mutex
	pin       int64
	// disruptions counts Restart and Disrupt calls begun, so that a watch
	// can tell it lived through one.
	disruptions, disruptionsDone atomic.Int64
	stats                        struct {
		ops, unknown, serializable, watches, streams, catchUpWatches, responses, events, progressNotifies,
		progressRequests, lowered, resumed, compactions, restarts, kills atomic.Int64
		leaseGrants, leaseRevokes, leasedPuts, keepAlives, leaseExpiries atomic.Int64
	}
	valueSeq atomic.Int64
}

// dial connects one client of the run through cfg.Dial.
func dial(cfg Config) (*clientv3.Client, error) {
	newClient := cfg.Dial
	if newClient == nil {
		newClient = clientv3.New
	}
	return newClient(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
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
	base := existing.Header.Revision
	baseCompaction, err := compactionInForce(ctx, probe, cfg.Prefix, base)
	if err != nil {
		return Stats{}, err
	}
	tool := "watchspec conform"
	if cfg.Workload == WorkloadKubernetes {
		if err := checkCompactKeyAbsent(ctx, probe); err != nil {
			return Stats{}, err
		}
		tool += " --workload " + cfg.Workload
	}
	w, err := traces.NewWriter(out, traceHeader(cfg, tool, base, baseCompaction))
	if err != nil {
		return Stats{}, err
	}
	r := &run{cfg: cfg, rec: record.New(w), prefix: cfg.Prefix}
	for _, k := range []string{"a/0", "a/1", "a/2", "a/3", "b/0", "b/1", "b/2", "c", "d", "e"} {
		r.keys = append(r.keys, cfg.Prefix+k)
	}
	r.watchSubs = []string{"a/", "b/"}
	if cfg.Leases > 0 {
		r.watchSubs = append(r.watchSubs, "l/") // the leased keys
	}
	r.headRev.Store(base)
	r.compactRev.Store(baseCompaction)
	start := time.Now()
	err = r.run(ctx)
	st := &r.stats
	stats := Stats{Ops: st.ops.Load(), UnknownOps: st.unknown.Load(), SerializableReads: st.serializable.Load(),
		Watches: st.watches.Load(), Streams: st.streams.Load(), CatchUpWatches: st.catchUpWatches.Load(),
		WatchResponses: st.responses.Load(), Events: st.events.Load(), ProgressNotifies: st.progressNotifies.Load(),
		ProgressRequests: st.progressRequests.Load(), LoweredHeaders: st.lowered.Load(), Resumed: st.resumed.Load(),
		Compactions: st.compactions.Load(), BaseCompaction: baseCompaction, BaseRevision: base,
		Restarts: st.restarts.Load(), Kills: st.kills.Load(),
		LeaseGrants: st.leaseGrants.Load(), LeaseRevokes: st.leaseRevokes.Load(), LeasedPuts: st.leasedPuts.Load(),
		KeepAlives: st.keepAlives.Load(), LeaseExpiries: st.leaseExpiries.Load(), Duration: time.Since(start)}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cfg.Workload == WorkloadKubernetes {
		// The next run on this store needs compact_rev_key absent again;
		// nothing is recorded any more.
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		probe.Delete(dctx, CompactRevKey)
		cancel()
	}
	return stats, err
}

// traceHeader is the header of a run's trace: baseCompaction 0 (nothing
// below revision 2 compacted) is recorded as "never compacted" (-1), which
// no read or watch can tell apart.
func traceHeader(cfg Config, tool string, base, baseCompaction int64) traces.Header {
	compacted := baseCompaction
	if compacted == 0 {
		compacted = -1
	}
	return traces.Header{System: cfg.System, SystemVersion: cfg.SystemVersion, Tool: tool, Seed: cfg.Seed,
		Profile: cfg.Profile, UniqueValues: true, BaseRevision: base, BaseCompactRevision: &compacted}
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
	errs := make(chan error, r.cfg.Clients+r.cfg.Watchers+r.cfg.Leases+4)
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
	for i := range r.cfg.Leases {
		spawn(func() error { return r.leaseClient(workCtx, i) })
	}
	if !kube && r.cfg.CatchUpWatches > 0 {
		spawn(func() error { return r.catchUp(workCtx) })
	}
	if (r.cfg.Restart != nil || r.cfg.Disrupt != nil) && r.cfg.RestartEvery > 0 {
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
		st := &r.stats
		r.cfg.Progress("%3.0fs: %d ops (%d unknown), %d watches, %d events, %d compactions, %d restarts, %d kills, revision %d",
			time.Since(start).Seconds(), st.ops.Load(), st.unknown.Load(), st.watches.Load(),
			st.events.Load(), st.compactions.Load(), st.restarts.Load(), st.kills.Load(), r.headRev.Load())
		return nil
	})
}

// do sends one request through c with the run's timeout.
func (r *run) do(ctx context.Context, c *record.Client, req kv.Request) (kv.Response, error) {
	return r.send(ctx, c, req, false)
}

// send sends one request through c with the run's timeout, a range perhaps
// serializable.
func (r *run) send(ctx context.Context, c *record.Client, req kv.Request, serializable bool) (kv.Response, error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	var resp kv.Response
	var err error
	if serializable && req.Range != nil {
		r.stats.serializable.Add(1)
		resp, err = c.ReadSerializable(rctx, *req.Range)
	} else {
		resp, err = c.Do(rctx, req)
	}
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
		r.send(ctx, c, req, req.Range != nil && rng.Float64() < r.cfg.SerializableReads)
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

// compactor compacts every CompactEvery to the head it saw in the previous
// round, as the apiserver does, but not above the catch-up client's pin.
func (r *run) compactor(ctx context.Context) error {
	prev := int64(0)
	return r.everyCompactPeriod(ctx, func(c *record.Client) {
		r.compactMu.Lock()
		defer r.compactMu.Unlock()
		rev := prev
		if r.pin != 0 {
			rev = min(rev, r.pin)
		}
		if rev > r.compactRev.Load() {
			resp, err := r.do(ctx, c, kv.Request{Compact: &kv.CompactRequest{Revision: rev}})
			if err == nil && resp.Err == nil {
				r.compactRev.Store(rev)
				r.stats.compactions.Add(1)
			}
		}
		prev = r.headRev.Load()
	})
}

func (r *run) restarter(ctx context.Context) error {
	return every(ctx, r.cfg.RestartEvery, func() error {
		start := r.rec.Now()
		r.disruptions.Add(1)
		d := Disruption{Text: "the server was restarted on its data directory"}
		var err error
		if r.cfg.Disrupt != nil {
			d, err = r.cfg.Disrupt(ctx)
		} else {
			err = r.cfg.Restart(ctx)
		}
		r.disruptionsDone.Add(1)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("disrupting the server: %v", err)
		}
		tag := "restart"
		if d.Kill {
			tag = "kill"
			r.stats.kills.Add(1)
		} else {
			r.stats.restarts.Add(1)
		}
		r.rec.Annotate(tag, d.Text, start)
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
