package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The shape of the data every workload writes.
const (
	valueSize     = 128 // bytes per value
	pollValueSize = 32  // bytes per value under the polled prefix
	perStream     = 100 // watches per gRPC stream (etcd's benchmark tool default)
	maxConns      = 10  // client connections the watches are spread over
	writers16     = 16
)

// writeN writes n revisions under prefix (keys cycling over 1,000) with
// `writers` concurrent clients, and returns the elapsed time.
func writeN(ctx context.Context, endpoint, prefix string, n, writers int) (time.Duration, error) {
	clis, err := dialN(endpoint, writers, nil)
	if err != nil {
		return 0, err
	}
	defer closeAll(clis)
	start := time.Now()
	err = putAll(ctx, clis, prefix, n)()
	return time.Since(start), err
}

// putAll starts n puts under prefix (keys cycling over 1,000) spread over
// clis, each client putting as soon as its previous put is acknowledged,
// and returns at once; the function it returns waits until every client is
// done and gives the first error.
func putAll(ctx context.Context, clis []*clientv3.Client, prefix string, n int) (wait func() error) {
	var next atomic.Int64
	errs := make(chan error, len(clis))
	for _, cli := range clis {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					errs <- nil
					return
				}
				if _, err := cli.Put(ctx, fmt.Sprintf("%s%06d", prefix, i%1000), value(i, valueSize)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	return func() error {
		var first error
		for range clis {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// measurePuts: durable puts/s from `writers` clients, each putting as fast
// as its previous put is acknowledged, counted over d after warmup.
// putResult is what measurePuts measured over its window (after the
// warm-up): acknowledged puts per second, and the CPU seconds per put of the
// driver (this process: clientv3 and its connections) and of the server.
type putResult struct{ perSec, driverCPU, serverCPU float64 }

// measureRoundTrip: one client reads one key (a serializable Get, which
// neither server orders through its log) over and over for d after warmup,
// and returns the seconds per round trip — the loopback, gRPC and the
// server's dispatch that every acknowledged put of a single writer waits
// for besides its fdatasync (the physical limits section).
func measureRoundTrip(ctx context.Context, endpoint string, warmup, d time.Duration) (float64, error) {
	clis, err := dialN(endpoint, 1, nil)
	if err != nil {
		return 0, err
	}
	defer closeAll(clis)
	cli := clis[0]
	if _, err := cli.Put(ctx, "bench/rtt", "x"); err != nil {
		return 0, err
	}
	var n int
	var t0 time.Time
	for start := time.Now(); ; n++ {
		now := time.Now()
		switch {
		case t0.IsZero() && now.Sub(start) >= warmup:
			t0, n = now, 0
		case !t0.IsZero() && now.Sub(t0) >= d:
			return now.Sub(t0).Seconds() / float64(max(1, n)), nil
		}
		if _, err := cli.Get(ctx, "bench/rtt", clientv3.WithSerializable()); err != nil {
			return 0, err
		}
	}
}

func measurePuts(ctx context.Context, c *child, writers int, warmup, d time.Duration) (putResult, error) {
	clis, err := dialN(c.endpoint, writers, nil)
	if err != nil {
		return putResult{}, err
	}
	defer closeAll(clis)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	prefix := fmt.Sprintf("bench/put%d/", writers)
	for w, cli := range clis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				_, err := cli.Put(ctx, fmt.Sprintf("%s%06d", prefix, (w*100_003+i)%1000), value(int64(i), valueSize))
				if err != nil {
					if ctx.Err() == nil {
						errMu.Lock()
						firstErr = errors.Join(firstErr, err)
						errMu.Unlock()
						cancel()
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	sleep(ctx, warmup)
	n0, t0, cpu0 := done.Load(), time.Now(), processCPU()
	scpu0, serr0 := c.cpu(ctx)
	sleep(ctx, d)
	n1, t1, cpu1 := done.Load(), time.Now(), processCPU()
	scpu1, serr1 := c.cpu(ctx)
	cancel()
	wg.Wait()
	if firstErr != nil {
		return putResult{}, firstErr
	}
	if err := errors.Join(serr0, serr1); err != nil {
		return putResult{}, err
	}
	n := float64(max(1, n1-n0))
	return putResult{perSec: float64(n1-n0) / t1.Sub(t0).Seconds(), driverCPU: (cpu1 - cpu0).Seconds() / n, serverCPU: (scpu1 - scpu0) / n}, nil
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// watchClients dials the connections n watches are spread over.
func watchClients(endpoint string, n int, counter *byteCounter) ([]*clientv3.Client, error) {
	streams := (n + perStream - 1) / perStream
	return dialN(endpoint, max(1, min(maxConns, streams)), counter)
}

// deliveryResult is what a fan-out or catch-up run delivered.
type deliveryResult struct {
	eventsPerSec float64
	perResponse  float64 // events per response
	clientCPU    float64 // the driver's CPU seconds per delivered event

	// Fan-out only: the writers' acknowledged puts/s over the time they
	// took, and the share of the events delivered when they were done —
	// near 1 when delivery keeps up with the writes and the writers' rate
	// bounds the figure.
	writerRate, deliveredAtWritersDone float64
}

// measureFanout: `watchers` watches on one prefix, all synced; 16 writers
// put `revisions` revisions under it as fast as they can. Events/s: the
// events delivered (watchers × revisions) over the time from the first put
// to the last event received. The driver's CPU includes the writers'.
func measureFanout(ctx context.Context, endpoint, prefix string, watchers, revisions int) (deliveryResult, error) {
	clis, err := watchClients(endpoint, watchers, nil)
	if err != nil {
		return deliveryResult{}, err
	}
	defer closeAll(clis)
	target := int64(watchers) * int64(revisions)
	ws, err := openWatches(ctx, clis, watchers, perStream, prefix, 0, target, nil)
	if err != nil {
		return deliveryResult{}, err
	}
	defer ws.close()
	writers, err := dialN(endpoint, writers16, nil)
	if err != nil {
		return deliveryResult{}, err
	}
	defer closeAll(writers)
	start, cpu0 := time.Now(), processCPU()
	writersDone := putAll(ctx, writers, prefix, revisions)
	type done struct {
		err       error
		took      time.Duration
		delivered int64
	}
	wdone := make(chan done, 1)
	go func() {
		err := writersDone()
		wdone <- done{err, time.Since(start), ws.events.Load()}
	}()
	werr := ws.wait(ctx, 5*time.Minute)
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	wd := <-wdone
	if wd.err != nil && werr == nil {
		werr = wd.err
	}
	if werr != nil {
		return deliveryResult{}, werr
	}
	return deliveryResult{float64(target) / elapsed.Seconds(), perResponse(ws), cpu.Seconds() / float64(target),
		float64(revisions) / wd.took.Seconds(), float64(wd.delivered) / float64(target)}, nil
}

// perResponse returns the events per response a watch set received.
func perResponse(ws *watchSet) float64 {
	return float64(ws.events.Load()) / float64(max(1, ws.responses.Load()))
}

// measureCatchup: `watchers` watches created at revision 1 on the prefix
// that holds every revision of the store, which the caller wrote first
// (writeN on a fresh server). Events/s: watchers × revisions over the time
// from the first creation to the last event received. The driver does
// nothing else meanwhile: its CPU per event is the client's own cost of
// receiving this server's responses.
func measureCatchup(ctx context.Context, endpoint, prefix string, watchers, revisions int) (deliveryResult, error) {
	clis, err := watchClients(endpoint, watchers, nil)
	if err != nil {
		return deliveryResult{}, err
	}
	defer closeAll(clis)
	target := int64(watchers) * int64(revisions)
	start, cpu0 := time.Now(), processCPU()
	ws, err := openWatches(ctx, clis, watchers, perStream, prefix, 1, target, nil)
	if err != nil {
		return deliveryResult{}, err
	}
	defer ws.close()
	if err := ws.wait(ctx, 10*time.Minute); err != nil {
		return deliveryResult{}, err
	}
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	return deliveryResult{eventsPerSec: float64(target) / elapsed.Seconds(), perResponse: perResponse(ws), clientCPU: cpu.Seconds() / float64(target)}, nil
}

// measureStartup starts a server child of the given kind on a fresh
// directory and returns the time from starting its process to its first
// acknowledged put (a client dialled once it serves), and to its ready
// line: what a project that starts the server for each test pays.
func measureStartup(ctx context.Context, argv []string, kind, dir string) (toPut, toReady time.Duration, err error) {
	start := time.Now()
	c, err := startChild(ctx, argv, kind, dir)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		c.stop()
		os.RemoveAll(dir)
	}()
	toReady = time.Since(start)
	cli, err := dial(c.endpoint, nil)
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "bench/startup", "v"); err != nil {
		return 0, 0, err
	}
	return time.Since(start), toReady, nil
}

// measureOverload: the acknowledged writes/s of one writer offering
// OverloadWriteRate puts/s while OverloadClients clients poll
// OverloadKeys keys every OverloadInterval — more reads than two cores
// serve — over OverloadDuration after OverloadWarmup: does the writer
// starve behind the readers?
func measureOverload(ctx context.Context, c *child, s Sizes) (pollResult, error) {
	ps, err := startPollWriter(ctx, c.endpoint, "bench/over/", s.OverloadKeys, s.OverloadWriteRate)
	if err != nil {
		return pollResult{}, err
	}
	p, err := measurePolling(ctx, c, ps, s.OverloadClients, s.OverloadInterval, s.OverloadWarmup, s.OverloadDuration)
	return p, errors.Join(err, ps.stop())
}

// latencyResult is the put→delivery latency distribution.
type latencyResult struct {
	p50, p99 time.Duration
	samples  int
}

// measureLatency: `watchers` synced watches on one prefix; one writer puts
// at `rate` puts/s, each value stamped with the time just before its Put
// was sent; every delivery of every event is a sample (receive time −
// stamp). The first `warm` puts are not sampled.
func measureLatency(ctx context.Context, endpoint, prefix string, watchers, puts, rate int) (latencyResult, error) {
	clis, err := watchClients(endpoint, watchers, nil)
	if err != nil {
		return latencyResult{}, err
	}
	defer closeAll(clis)
	warm := max(5, puts/10)
	var mu sync.Mutex
	samples := make([]time.Duration, 0, watchers*puts)
	onEvents := func(now time.Time, r *pb.WatchResponse) {
		mu.Lock()
		for _, e := range r.Events {
			if s := stampOf(e.Kv.Value); s > 0 {
				samples = append(samples, now.Sub(time.Unix(0, s)))
			}
		}
		mu.Unlock()
	}
	target := int64(watchers) * int64(warm+puts)
	ws, err := openWatches(ctx, clis, watchers, perStream, prefix, 0, target, onEvents)
	if err != nil {
		return latencyResult{}, err
	}
	defer ws.close()
	w, err := dial(endpoint, nil)
	if err != nil {
		return latencyResult{}, err
	}
	defer w.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range warm + puts {
		<-tick.C
		stamp := int64(0)
		if i >= warm {
			stamp = time.Now().UnixNano()
		}
		if _, err := w.Put(ctx, fmt.Sprintf("%s%06d", prefix, i%1000), value(stamp, valueSize)); err != nil {
			return latencyResult{}, err
		}
	}
	if err := ws.wait(ctx, 2*time.Minute); err != nil {
		return latencyResult{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(samples)
	if len(samples) == 0 {
		return latencyResult{}, errors.New("no latency samples")
	}
	q := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	return latencyResult{p50: q(0.50), p99: q(0.99), samples: len(samples)}, nil
}

// measureMemory: the server's heap (after a GC) before and after opening
// `watchers` idle watches on one prefix over their own connections and
// streams; bytes per watch.
func measureMemory(ctx context.Context, c *child, prefix string, watchers int) (perWatcher, stackPerWatcher float64, err error) {
	h0, s0, err := c.heap(ctx)
	if err != nil {
		return 0, 0, err
	}
	clis, err := watchClients(c.endpoint, watchers, nil)
	if err != nil {
		return 0, 0, err
	}
	defer closeAll(clis)
	ws, err := openWatches(ctx, clis, watchers, perStream, prefix, 0, 0, nil)
	if err != nil {
		return 0, 0, err
	}
	defer ws.close()
	sleep(ctx, 200*time.Millisecond) // let the servers' goroutines settle
	h1, s1, err := c.heap(ctx)
	if err != nil {
		return 0, 0, err
	}
	return float64(h1-h0) / float64(watchers), float64(s1-s0) / float64(watchers), nil
}

// pollResult is what one mode of the polling-versus-streaming run cost the
// server per delivered change.
type pollResult struct {
	cpuPerChange   float64 // server CPU seconds
	bytesPerChange float64 // bytes the server sent (read by the clients)
	sentPerChange  float64 // bytes the clients sent
	changesPerSec  float64
	requestsPerSec float64 // polls/s (polling only)
	writesPerSec   float64 // the writer's acknowledged puts/s
}

// pollSetup is the polled prefix: keys pre-created, and a writer changing
// one of them at random `rate` times a second until stop.
type pollSetup struct {
	prefix string
	keys   int
	stop   func() error // stops the writer: its error, if any
	errc   chan error
	writes atomic.Int64 // acknowledged writes
}

func startPollWriter(ctx context.Context, endpoint, prefix string, keys, rate int) (*pollSetup, error) {
	cli, err := dial(endpoint, nil)
	if err != nil {
		return nil, err
	}
	for i := range keys {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s%03d", prefix, i), value(int64(i), pollValueSize)); err != nil {
			cli.Close()
			return nil, err
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	ps := &pollSetup{prefix: prefix, keys: keys, errc: make(chan error, 1)}
	ps.stop = func() error {
		cancel()
		err := <-ps.errc
		cli.Close()
		return err
	}
	go func() {
		// Open loop: rate puts a second whatever their latency (at most
		// 256 in flight), catching up on the ticks a busy machine delays.
		rng := rand.New(rand.NewPCG(1, 2))
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		var wg sync.WaitGroup
		slots := make(chan struct{}, 256)
		var errOnce sync.Once
		var werr error
		start := time.Now()
		for i := int64(0); ; {
			select {
			case <-wctx.Done():
				wg.Wait()
				ps.errc <- werr
				return
			case <-tick.C:
			}
			for due := int64(time.Since(start).Seconds() * float64(rate)); i < due; i++ {
				select {
				case slots <- struct{}{}:
				default:
					continue // 256 puts in flight: skip this one
				}
				key := fmt.Sprintf("%s%03d", prefix, rng.IntN(keys))
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					_, err := cli.Put(wctx, key, value(i, pollValueSize))
					switch {
					case err == nil:
						ps.writes.Add(1)
					case wctx.Err() == nil:
						errOnce.Do(func() { werr = err })
					}
				}()
			}
		}
	}()
	return ps, nil
}

// measurePolling: `clients` pollers, spread over maxConns connections, each
// reading the whole prefix every interval (from a random phase); a change
// is delivered when a poll sees a key's ModRevision differ from its
// previous poll's.
func measurePolling(ctx context.Context, c *child, ps *pollSetup, clients int, interval, warmup, d time.Duration) (pollResult, error) {
	var counter byteCounter
	clis, err := dialN(c.endpoint, maxConns, &counter)
	if err != nil {
		return pollResult{}, err
	}
	defer closeAll(clis)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var changes, polls atomic.Int64
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	for i := range clients {
		cli := clis[i%len(clis)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sleep(ctx, time.Duration(rand.Int64N(int64(interval))))
			tick := time.NewTicker(interval)
			defer tick.Stop()
			seen := make(map[string]int64, ps.keys)
			first := true
			for ctx.Err() == nil {
				resp, err := cli.Get(ctx, ps.prefix, clientv3.WithPrefix())
				if err != nil {
					if ctx.Err() == nil {
						errMu.Lock()
						firstErr = errors.Join(firstErr, err)
						errMu.Unlock()
						cancel()
					}
					return
				}
				n := int64(0)
				for _, kv := range resp.Kvs {
					k := string(kv.Key)
					if seen[k] != kv.ModRevision {
						if !first {
							n++
						}
						seen[k] = kv.ModRevision
					}
				}
				first = false
				changes.Add(n)
				polls.Add(1)
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		}()
	}
	sleep(ctx, warmup)
	res, err := window(ctx, c, ps, &counter, d, func() (int64, int64) { return changes.Load(), polls.Load() })
	cancel()
	wg.Wait()
	if firstErr != nil {
		return pollResult{}, firstErr
	}
	return res, err
}

// measureWatching: `clients` watchers of the prefix, each on its own
// stream, the streams spread over maxConns connections; every event
// received is a delivered change.
func measureWatching(ctx context.Context, c *child, ps *pollSetup, clients int, warmup, d time.Duration) (pollResult, error) {
	var counter byteCounter
	clis, err := dialN(c.endpoint, maxConns, &counter)
	if err != nil {
		return pollResult{}, err
	}
	defer closeAll(clis)
	ws, err := openWatches(ctx, clis, clients, 1, ps.prefix, 0, 0, nil)
	if err != nil {
		return pollResult{}, err
	}
	defer ws.close()
	sleep(ctx, warmup)
	res, err := window(ctx, c, ps, &counter, d, func() (int64, int64) { return ws.events.Load(), 0 })
	if err == nil {
		err = ws.failed()
	}
	return res, err
}

// window measures the server's CPU, the bytes and the changes over d.
func window(ctx context.Context, c *child, ps *pollSetup, counter *byteCounter, d time.Duration, count func() (changes, requests int64)) (pollResult, error) {
	cpu0, err := c.cpu(ctx)
	if err != nil {
		return pollResult{}, err
	}
	counter.reset()
	ch0, rq0 := count()
	w0 := ps.writes.Load()
	t0 := time.Now()
	sleep(ctx, d)
	ch1, rq1 := count()
	w1 := ps.writes.Load()
	read, written := counter.read.Load(), counter.written.Load()
	el := time.Since(t0).Seconds()
	cpu1, err := c.cpu(ctx)
	if err != nil {
		return pollResult{}, err
	}
	n := float64(ch1 - ch0)
	if n == 0 {
		return pollResult{}, errors.New("no change was delivered")
	}
	return pollResult{
		cpuPerChange:   (cpu1 - cpu0) / n,
		bytesPerChange: float64(read) / n,
		sentPerChange:  float64(written) / n,
		changesPerSec:  n / el,
		requestsPerSec: float64(rq1-rq0) / el,
		writesPerSec:   float64(w1-w0) / el,
	}, nil
}
