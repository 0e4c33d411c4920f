package conform

// The watching side of the full workload: watches multiplexed on shared
// clientv3 watch streams, progress requests on those streams, and bursts of
// catch-up watches.
//
// clientv3 puts every watch whose context carries the same outgoing
// metadata on one gRPC stream of its Watcher (client/v3/watch.go,
// streamKeyFromCtx), and hands a progress response of that stream to every
// watch on it. The Kubernetes apiserver's etcd3 watcher adds the same
// metadata (require-leader) to every watch, so all its watches share one
// stream per client; so do ours.

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces/record"
)

// watcher is one watching client: one clientv3 client whose one watch
// stream carries WatchesPerStream watch loops at once, and a loop that asks
// the stream for progress.
func (r *run) watcher(ctx context.Context, i int) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	r.stats.streams.Add(1)
	// Every watch and progress request of this client carries this
	// metadata: one stream.
	stream := clientv3.WithRequireLeader(ctx)
	var wg sync.WaitGroup
	for j := range r.cfg.WatchesPerStream {
		rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(1000+100*i+j)))
		c := r.rec.Client(cli)
		wg.Go(func() { r.watchLoop(stream, cli, c, rng) })
	}
	if r.cfg.ProgressRequestEvery > 0 {
		c := r.rec.Client(cli)
		wg.Go(func() { r.requestProgress(stream, cli, c, r.cfg.ProgressRequestEvery) })
	}
	wg.Wait()
	return nil
}

// requestProgress asks the stream of ctx for progress every period until
// ctx ends.
func (r *run) requestProgress(ctx context.Context, cli *clientv3.Client, c *record.Client, period time.Duration) {
	every(ctx, period, func() error {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if c.RequestProgress(pctx, cli.Watcher) == nil {
			r.stats.progressRequests.Add(1)
		}
		return nil
	})
}

// watchLoop opens watch sessions one after the other until ctx is done.
func (r *run) watchLoop(ctx context.Context, cli *clientv3.Client, c *record.Client, rng *rand.Rand) {
	resumeFrom := int64(0)
	for ctx.Err() == nil {
		req := watch.Request{PrevKV: rng.IntN(2) == 0, ProgressNotify: rng.IntN(2) == 0}
		switch rng.IntN(3) {
		case 0:
			req.Key = r.keys[rng.IntN(len(r.keys))]
		case 1:
			sub := r.prefix + r.watchSubs[rng.IntN(len(r.watchSubs))]
			req.Key, req.RangeEnd = sub, kv.PrefixEnd(sub)
		default:
			req.Key, req.RangeEnd = r.prefix, kv.PrefixEnd(r.prefix)
		}
		if rng.IntN(7) == 0 {
			req.NoPut = rng.IntN(2) == 0
			req.NoDelete = !req.NoPut
		}
		if r.cfg.FragmentWatches > 0 { // no draw otherwise: a seed's workload stays as it was
			req.Fragment = rng.Float64() < r.cfg.FragmentWatches
		}
		head, low := r.headRev.Load(), r.compactRev.Load()
		switch p := rng.IntN(100); {
		case resumeFrom > 0 && p < 25:
			req.StartRevision = resumeFrom // resume where the last session stopped
		case p < 45:
			req.StartRevision = 0 // from now, while writes commit
		case p < 75:
			req.StartRevision = max(1, low+rng.Int64N(max(1, head-low+1))) // from the past
		case p < 88:
			req.StartRevision = head + 1 + rng.Int64N(10) // from the future
		default:
			req.StartRevision = max(1, low-rng.Int64N(5)) // at or below the compaction
		}
		resumeFrom, _ = r.session(ctx, cli, c, rng, req)
	}
}

// watchObserver counts, for Stats, what one watch received.
type watchObserver struct {
	r          *run
	lastHeader int64
	// eventsBefore is the number of disruptions begun when the watch first
	// received events; resumed is set once it received events after a
	// later disruption ended.
	eventsBefore int64
	hadEvents    bool
	resumed      bool
}

func (o *watchObserver) observe(resp watch.Response) {
	st := &o.r.stats
	st.responses.Add(1)
	st.events.Add(int64(len(resp.Events)))
	if resp.IsProgressNotify() {
		st.progressNotifies.Add(1)
	}
	if resp.Revision != 0 && resp.Revision < o.lastHeader {
		st.lowered.Add(1)
	}
	o.lastHeader = max(o.lastHeader, resp.Revision)
	if len(resp.Events) > 0 {
		if !o.hadEvents {
			o.hadEvents, o.eventsBefore = true, o.r.disruptions.Load()
		} else if !o.resumed && o.r.disruptionsDone.Load() > o.eventsBefore {
			o.resumed = true
			st.resumed.Add(1)
		}
	}
}

// lowersResume reports whether resp is a progress notification that makes
// clientv3 3.7.3 resume its watch below next, the revision the watch needs
// next: serveSubstream (client/v3/watch.go) sets its resume point to any
// progress notification's revision plus one, and a stream's progress
// answer that etcd computed before the watch was registered is handed to
// the watch too. Should the stream break before the watch's next event,
// clientv3 re-creates it from there: the caller gets events below its
// start revision, or a compaction cancel it never needed (the corpus
// recording clientv3-3.7.3-resume-below-future-start; etcd#20221's
// family). The workload, like a careful user, then ends the watch and
// opens another from next, so that what conform reports is the store's
// doing, not its client library's. (A progress answer above events the
// watch has not received yet — a watch from the past — cannot be told
// apart from a true one on the client; the checker judges what follows.)
func lowersResume(resp watch.Response, next int64) bool {
	return resp.IsProgressNotify() && next > 0 && resp.Revision+1 < next
}

// session runs one watch on the stream of ctx for a while and returns the
// revision to resume from: after the last one seen, or the compaction
// revision after a compaction cancel (the caller then relists, in
// Kubernetes terms), and whether the watch was cancelled for compaction.
func (r *run) session(ctx context.Context, cli *clientv3.Client, c *record.Client, rng *rand.Rand, req watch.Request) (int64, bool) {
	sctx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(1800))*time.Millisecond)
	defer cancel()
	r.stats.watches.Add(1)
	w := c.Watch(sctx, cli.Watcher, req)
	obs := watchObserver{r: r}
	next := req.StartRevision
	pauseAt := time.Duration(-1)
	if rng.Float64() < r.cfg.SlowReaders {
		pauseAt = time.Duration(rng.IntN(500)) * time.Millisecond
	}
	progressAt := time.Duration(-1)
	if r.cfg.ProgressRequestEvery > 0 && rng.IntN(3) == 0 {
		progressAt = time.Duration(rng.IntN(800)) * time.Millisecond
	}
	start := time.Now()
	for {
		if pauseAt >= 0 && time.Since(start) > pauseAt {
			pauseAt = -1
			select { // a slow reader: stop reading for a while
			case <-sctx.Done():
			case <-time.After(time.Duration(50+rng.IntN(450)) * time.Millisecond):
			}
		}
		if progressAt >= 0 && time.Since(start) > progressAt {
			progressAt = -1 // ask the stream (every watch on it) for progress
			pctx, pcancel := context.WithTimeout(sctx, 500*time.Millisecond)
			if c.RequestProgress(pctx, cli.Watcher) == nil {
				r.stats.progressRequests.Add(1)
			}
			pcancel()
		}
		select {
		case resp, ok := <-w.C:
			if !ok {
				return next, false
			}
			obs.observe(resp)
			switch {
			case resp.CompactRevision != 0:
				return resp.CompactRevision, true
			case len(resp.Events) > 0:
				next = resp.Events[len(resp.Events)-1].KV.ModRevision + 1
			case resp.IsProgressNotify() && resp.Revision >= next:
				next = resp.Revision + 1
			case lowersResume(resp, next):
				return next, false
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// catchUp is a restarting apiserver's watch cache: burst after burst, it
// opens CatchUpWatches watches at once on its one stream, from the head as
// of the end of the previous burst (which the compactor spares meanwhile,
// see pin), and reads them up to the head while asking the stream for
// progress. Replaying that many watches at once fills etcd's
// send buffer of the stream (128 responses), so etcd parks watchers as
// victims and re-sends their batches later, with a header below the one
// they already got when the replay needed several batches of 1000
// revisions (server/storage/mvcc/watchable_store.go).
func (r *run) catchUp(ctx context.Context) error {
	cli, err := dial(r.cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 3000))
	c := r.rec.Client(cli)
	stream := clientv3.WithRequireLeader(ctx)
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// pin spares the history from the head on from the compactor until
	// the next pin, so that the next burst can start there.
	pin := func() int64 {
		r.compactMu.Lock()
		defer r.compactMu.Unlock()
		r.pin = max(1, r.headRev.Load(), r.compactRev.Load())
		return r.pin
	}
	bursts := 0
	if !pause(500 * time.Millisecond) {
		return nil
	}
	from, pinned := pin(), time.Now()
	for {
		// Wait until the burst needs more than one catch-up batch of etcd
		// (1000 revisions), or for at most 1.5 s since the pin.
		for r.headRev.Load()-from < 1500 && time.Since(pinned) < 1500*time.Millisecond && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		if ctx.Err() != nil {
			return nil
		}
		if bursts++; bursts == 1 {
			r.stats.streams.Add(1)
		}
		r.burst(stream, cli, c, rng, from)
		from, pinned = pin(), time.Now()
		if !pause(500 * time.Millisecond) {
			return nil
		}
	}
}

// burst opens CatchUpWatches watches from about revision from on the stream
// of ctx and reads them until each has reached the head as of now (an
// event or a progress notification at or above it), or for at most 10 s.
func (r *run) burst(ctx context.Context, cli *clientv3.Client, c *record.Client, rng *rand.Rand, from int64) {
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	target := r.headRev.Load()
	var readers sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(r.cfg.CatchUpWatches))
	reached := make(chan struct{})
	for i := range r.cfg.CatchUpWatches {
		req := watch.Request{StartRevision: from + rng.Int64N(20), PrevKV: rng.IntN(4) == 0}
		if r.cfg.FragmentWatches > 0 {
			req.Fragment = rng.Float64() < r.cfg.FragmentWatches
		}
		switch {
		case i%10 == 0:
			req.Key, req.RangeEnd = r.prefix, kv.PrefixEnd(r.prefix)
		case i%10 <= 3:
			sub := r.prefix + []string{"a/", "b/"}[rng.IntN(2)]
			req.Key, req.RangeEnd = sub, kv.PrefixEnd(sub)
		default:
			req.Key = r.keys[rng.IntN(len(r.keys))]
		}
		var slow time.Duration // a slow reader's pause after each response
		if rng.Float64() < r.cfg.SlowReaders {
			slow = time.Duration(1+rng.IntN(3)) * time.Millisecond
		}
		r.stats.watches.Add(1)
		r.stats.catchUpWatches.Add(1)
		w := c.Watch(bctx, cli.Watcher, req)
		readers.Go(func() {
			obs := watchObserver{r: r}
			done := false
			for resp := range w.C {
				obs.observe(resp)
				if !done && (resp.Canceled || resp.IsProgressNotify() && resp.Revision >= target ||
					len(resp.Events) > 0 && resp.Events[len(resp.Events)-1].KV.ModRevision >= target) {
					done = true
					if left.Add(-1) == 0 {
						close(reached)
					}
				}
				if !done {
					time.Sleep(slow)
				}
			}
		})
	}
	// Ask for progress until every watch is there: etcd answers when all
	// the stream's watches are synced.
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
loop:
	for {
		select {
		case <-reached:
			break loop
		case <-bctx.Done():
			break loop
		case <-t.C:
			pctx, pcancel := context.WithTimeout(bctx, 500*time.Millisecond)
			if c.RequestProgress(pctx, cli.Watcher) == nil {
				r.stats.progressRequests.Add(1)
			}
			pcancel()
		}
	}
	cancel()
	readers.Wait()
}
