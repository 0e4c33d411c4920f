package adversary_test

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/adversary"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/impl/store"
)

// A cache of the keys under a prefix, kept by a list and a watch, the way
// a client-side cache or a service-discovery client keeps one. Three
// versions: a correct one, and two with a bug that a quiet server never
// shows.
type cacheKind int

const (
	correctCache cacheKind = iota
	// onePerRevision assumes that each watch response holds one revision:
	// it applies only the events of the first revision of a response.
	// (SPEC §3.4 promises that a revision is not split, not that a
	// response holds one; §3.13.)
	onePerRevision
	// ignoresCompaction stops at a compaction cancel as if the watch had
	// ended normally, and keeps what it has: it never relists (§3.11).
	ignoresCompaction
)

func (k cacheKind) String() string {
	return [...]string{"correct cache", "cache assuming one revision per response", "cache ignoring a compacted cancel"}[k]
}

// runCache keeps a cache of prefix until it has seen revision end (from
// endc) or its watch ended, and returns it.
func runCache(ctx context.Context, cli *clientv3.Client, prefix string, kind cacheKind, started chan<- struct{}, endc <-chan int64, progress *atomic.Int64) (map[string]string, error) {
	cache := map[string]string{}
	list := func() (int64, error) {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return 0, err
		}
		clear(cache)
		for _, kv := range r.Kvs {
			cache[string(kv.Key)] = string(kv.Value)
		}
		return r.Header.Revision, nil
	}
	rev, err := list()
	if err != nil {
		return nil, err
	}
	end := int64(-1)
	seen := rev // the revision the cache is known to reflect at least
	for {
		if end < 0 {
			select {
			case end = <-endc:
			default:
			}
		}
		if end >= 0 && seen >= end {
			return cache, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		wc := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
		relist := false
		for resp := range wc {
			if resp.CompactRevision != 0 {
				if kind == ignoresCompaction {
					cancel()
					return cache, nil // the bug: the cache believes it is done
				}
				relist = true
				break
			}
			if err := resp.Err(); err != nil {
				cancel()
				return nil, err
			}
			if resp.Created && started != nil {
				// The writer starts once the watch is live, so that the
				// adversary meets the same commits in the same order.
				close(started)
				started = nil
			}
			for _, ev := range resp.Events {
				seen = max(seen, ev.Kv.ModRevision)
				if kind == onePerRevision && ev.Kv.ModRevision != resp.Events[0].Kv.ModRevision {
					continue // the bug: "the rest is the next response's"
				}
				if ev.Type == clientv3.EventTypeDelete {
					delete(cache, string(ev.Kv.Key))
				} else {
					cache[string(ev.Kv.Key)] = string(ev.Kv.Value)
				}
				rev = ev.Kv.ModRevision
			}
			progress.Store(seen)
			if end < 0 {
				select {
				case end = <-endc:
				default:
				}
			}
			if end >= 0 && seen >= end {
				cancel()
				return cache, nil
			}
		}
		cancel()
		if !relist {
			return nil, fmt.Errorf("the watch ended without a compaction: %v", ctx.Err())
		}
		if rev, err = list(); err != nil {
			return nil, err
		}
		seen = max(seen, rev)
	}
}

// cacheRun runs one cache against endpoint while a writer puts 60 keys
// (compacting two revisions behind the head every 10), and reports how
// the cache differs from the store at the end ("" when it agrees). With
// lockstep the writer waits, after each put, until the cache has seen it:
// a reader that keeps up, whatever the machine's load (without it, a
// reader the scheduler delays finds several responses queued, which a
// server may legally send as one, §3.13).
func cacheRun(t *testing.T, endpoint string, kind cacheKind, lockstep bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const prefix = "/cache/"
	started, endc := make(chan struct{}), make(chan int64, 1)
	type result struct {
		cache map[string]string
		err   error
	}
	done := make(chan result, 1)
	var progress atomic.Int64
	go func() {
		c, err := runCache(ctx, cli, prefix, kind, started, endc, &progress)
		done <- result{c, err}
	}()
	<-started
	var last int64
	for i := range 60 {
		r, err := cli.Put(ctx, fmt.Sprintf("%sk%02d", prefix, i), fmt.Sprintf("v%d", i))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
		for lockstep && progress.Load() < last && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		if i%10 == 9 {
			if _, err := cli.Compact(ctx, last-2); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The last put's revision is known before it is made: the cache stops
	// once it has seen it.
	endc <- last + 1
	if r, err := cli.Put(ctx, prefix+"end", "end"); err != nil || r.Header.Revision != last+1 {
		t.Fatalf("the last put: revision %v, %v; want %d (nobody else writes)", r, err, last+1)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("%s: %v", kind, res.err)
	}
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, kv := range r.Kvs {
		want[string(kv.Key)] = string(kv.Value)
	}
	if maps.Equal(res.cache, want) {
		return ""
	}
	missing := 0
	for k := range want {
		if _, ok := res.cache[k]; !ok {
			missing++
		}
	}
	return fmt.Sprintf("the cache holds %d keys, the store %d (%d missing)", len(res.cache), len(want), missing)
}

// plainServer starts the reference server without an adversary.
func plainServer(t *testing.T) string {
	t.Helper()
	r, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{Store: storeNoFsync()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.Endpoint()
}

// The seeds of the adversary that catch each buggy cache: the first of
// seeds 1..30 that caught it in each of four searches (TestFindCatchingSeeds,
// with and without -race). A search of 30 seeds caught the cache assuming
// one revision per response with 9-14 of them, the one ignoring a
// compacted cancel with 21-25. The catching choice is drawn from the seed
// at a fixed point of the writer's sequence of commits (the writer starts
// once the watch is live): seed 1 holds the cache's watch at revision 15
// for 2 revisions, which then arrive in one response; seed 2 holds it from
// revision 27 until the writer's compaction at 29 passes it, and the watch
// is cancelled with CompactRevision 29.
var catchingSeeds = map[cacheKind]int64{
	onePerRevision:    1,
	ignoresCompaction: 2,
}

// SPEC §3.4 Atomic, §3.13 Slow watchers, §3.11 CompactedCancel: a cache
// that assumes one revision per watch response, or that ignores a
// compacted cancel, agrees with the store against the plain reference
// server — which, for a reader that keeps up, sends one response per
// revision and never cancels a live watch — and is caught by the
// adversary with the seed in catchingSeeds. The correct cache agrees with
// the store under every one of those seeds: no false alarm.
func TestBuggyCachesAreCaught(t *testing.T) {
	for _, kind := range []cacheKind{onePerRevision, ignoresCompaction} {
		t.Run(kind.String(), func(t *testing.T) {
			if diff := cacheRun(t, plainServer(t), kind, true); diff != "" {
				t.Fatalf("against the plain reference server: %s; want it to agree (the bug hides behind a quiet server)", diff)
			}
			seed := catchingSeeds[kind]
			srv := adversary.Run(t, seed)
			diff := cacheRun(t, srv.Endpoint(), kind, false)
			if diff == "" {
				t.Fatalf("the adversary with seed %d did not catch the %s\n%s", seed, kind, srv.Report())
			}
			t.Logf("caught by seed %d: %s\n%s", seed, diff, srv.Report())
		})
	}
	t.Run(correctCache.String(), func(t *testing.T) {
		for _, seed := range catchingSeeds {
			srv := adversary.Run(t, seed)
			if diff := cacheRun(t, srv.Endpoint(), correctCache, false); diff != "" {
				t.Fatalf("seed %d: %s; a correct cache must agree under a legal adversary\n%s", seed, diff, srv.Report())
			}
		}
	})
}

// TestFindCatchingSeeds searches seeds 1..N (-adversary.search=N) for the
// first that catches each buggy cache, and says how many seeds catch it:
// how catchingSeeds was found.
func TestFindCatchingSeeds(t *testing.T) {
	if *searchFlag == 0 {
		t.Skip("-adversary.search=N searches seeds 1..N")
	}
	for _, kind := range []cacheKind{onePerRevision, ignoresCompaction} {
		var caught []int64
		for seed := int64(1); seed <= int64(*searchFlag); seed++ {
			srv, err := adversary.Start(seed, adversary.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if cacheRun(t, srv.Endpoint(), kind, false) != "" {
				caught = append(caught, seed)
			}
			srv.Close()
		}
		t.Logf("%s: caught by %d of %d seeds: %v", kind, len(caught), *searchFlag, caught)
	}
}

func storeNoFsync() store.Options {
	return store.Options{KV: mvcc.Options{UnsafeNoFsync: true}}
}
