package cachertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/watchspec/watchspec/model/k8s"
)

// Config sizes a random run ([Run]).
type Config struct {
	Seed int64
	// Prepopulate writes happen before the cacher starts, so that its
	// first list is not at the start of the history.
	Prepopulate int
	// Writes happen while the clients list and watch; one writer makes
	// them, one at a time, with a compaction every CompactEvery writes
	// (0: never).
	Writes, CompactEvery int
	// Lists are made by one lister, one page at a time (a continuation
	// counts as one list); Watches are opened by one client, each for a
	// request timeout of 2.5–4 s, SlowWatches of them not read until the
	// writer made 3×SlowAfter more writes (the cacher terminates a
	// watcher whose buffer stays full), then resumed from their last
	// resourceVersion as a reflector does.
	Lists, Watches, SlowWatches int
	// Namespaces and Names span the objects: ns0…, p0….
	Namespaces, Names int
}

// Outcome reports what a run did, beyond the recording.
type Outcome struct {
	// Terminated counts the slow watchers the cacher closed.
	Terminated int
	// Gone counts the answers 410 (lists and watches).
	Gone int
	// Inconsistent counts the lists made with the continue token of a 410
	// (the inconsistent continuation, SPEC §4.5).
	Inconsistent int
}

// Run drives the harness with cfg: it starts the cacher after the
// prepopulating writes and returns when every client is done (every watch
// ended and was recorded).
func Run(ctx context.Context, h *Harness, cfg Config) (Outcome, error) {
	var out Outcome
	w := &writer{h: h, rnd: rand.New(rand.NewPCG(uint64(cfg.Seed), 1)), cfg: cfg, present: map[[2]string]bool{}}
	w.cond = sync.NewCond(&w.mu)
	for range cfg.Prepopulate {
		if err := w.write(ctx); err != nil {
			return out, err
		}
	}
	if err := h.StartCacher(ctx); err != nil {
		return out, err
	}
	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	report := func(err error) {
		if err != nil {
			emu.Lock()
			errs = append(errs, err)
			emu.Unlock()
		}
	}
	counts := &outcomeCounter{}
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer w.finish()
		for i := range cfg.Writes {
			if err := w.write(ctx); err != nil {
				report(err)
				return
			}
			if cfg.CompactEvery > 0 && (i+1)%cfg.CompactEvery == 0 {
				if err := w.compact(ctx); err != nil {
					report(err)
					return
				}
			}
			time.Sleep(time.Duration(w.rnd.IntN(3)) * time.Millisecond) // let readers interleave
		}
	}()
	go func() {
		defer wg.Done()
		l := &lister{h: h, w: w, rnd: rand.New(rand.NewPCG(uint64(cfg.Seed), 2)), cfg: cfg, counts: counts}
		report(l.run(ctx))
	}()
	go func() {
		defer wg.Done()
		c := &watcher{h: h, w: w, rnd: rand.New(rand.NewPCG(uint64(cfg.Seed), 3)), cfg: cfg, counts: counts}
		report(c.run(ctx))
	}()
	wg.Wait()
	out.Gone, out.Terminated, out.Inconsistent = counts.get()
	return out, errors.Join(errs...)
}

type outcomeCounter struct {
	mu                             sync.Mutex
	gone, terminated, inconsistent int
}

func (c *outcomeCounter) add(gone, terminated int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone += gone
	c.terminated += terminated
}

func (c *outcomeCounter) addInconsistent() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inconsistent++
}

func (c *outcomeCounter) get() (int, int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone, c.terminated, c.inconsistent
}

// writer makes creates, updates and deletes of random pods, and compactions.
type writer struct {
	h       *Harness
	rnd     *rand.Rand
	cfg     Config
	present map[[2]string]bool

	mu    sync.Mutex
	cond  *sync.Cond
	n     int   // writes made
	head  int64 // the revision of the last write
	done  bool
	lastC int64
}

func (w *writer) write(ctx context.Context) error {
	k := [2]string{fmt.Sprintf("ns%d", w.rnd.IntN(max(w.cfg.Namespaces, 1))), fmt.Sprintf("p%d", w.rnd.IntN(max(w.cfg.Names, 1)))}
	var rev int64
	var err error
	switch {
	case !w.present[k]:
		rev, err = w.h.Create(ctx, k[0], k[1])
		w.present[k] = true
	case w.rnd.IntN(10) < 7:
		rev, err = w.h.Update(ctx, k[0], k[1])
	default:
		rev, err = w.h.Delete(ctx, k[0], k[1])
		delete(w.present, k)
	}
	if err != nil {
		return fmt.Errorf("writing %s/%s: %w", k[0], k[1], err)
	}
	w.mu.Lock()
	w.n++
	w.head = rev
	w.cond.Broadcast()
	w.mu.Unlock()
	return nil
}

// compact compacts at a random revision of the last few.
func (w *writer) compact(ctx context.Context) error {
	w.mu.Lock()
	head, last := w.head, w.lastC
	w.mu.Unlock()
	lo := max(last+1, head-8)
	if lo > head {
		return nil
	}
	rev := lo + w.rnd.Int64N(head-lo+1)
	if err := w.h.Compact(ctx, rev); err != nil {
		return fmt.Errorf("compacting at %d: %w", rev, err)
	}
	w.mu.Lock()
	w.lastC = rev
	w.mu.Unlock()
	return nil
}

func (w *writer) finish() {
	w.mu.Lock()
	w.done = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

// state returns the writes made, the last write's revision and whether the
// writer is done.
func (w *writer) state() (int, int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.head, w.done
}

// waitWrites waits until n writes were made or the writer is done.
func (w *writer) waitWrites(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.n < n && !w.done {
		w.cond.Wait()
	}
}

// rv picks a resourceVersion for a request: mostly recent, sometimes old
// (compacted, or before the cacher's first list), sometimes in the future.
func pickRV(rnd *rand.Rand, head int64) int64 {
	switch r := rnd.IntN(10); {
	case r < 5:
		return max(1, head-rnd.Int64N(4))
	case r < 8:
		return 1 + rnd.Int64N(max(head, 1))
	case r < 9:
		return 1 + rnd.Int64N(3)
	default:
		return head + 1 + rnd.Int64N(3)
	}
}

type lister struct {
	h      *Harness
	w      *writer
	rnd    *rand.Rand
	cfg    Config
	counts *outcomeCounter
}

func (l *lister) run(ctx context.Context) error {
	for i := 0; i < l.cfg.Lists; {
		_, head, _ := l.w.state()
		o := ListOptions{}
		if l.rnd.IntN(4) == 0 {
			o.Namespace = fmt.Sprintf("ns%d", l.rnd.IntN(max(l.cfg.Namespaces, 1)))
		}
		switch l.rnd.IntN(6) {
		case 0: // unset: consistent
		case 1:
			o.ResourceVersion = "0"
		default:
			o.ResourceVersion = k8s.RV(pickRV(l.rnd, head))
		}
		switch r := l.rnd.IntN(10); {
		case r < 3 && o.ResourceVersion != "" && o.ResourceVersion != "0":
			o.ResourceVersionMatch = "Exact"
		case r < 5 && o.ResourceVersion != "":
			o.ResourceVersionMatch = "NotOlderThan"
		case r == 9:
			// An invalid combination now and then: Exact without a
			// resourceVersion or with "0".
			o.ResourceVersionMatch = "Exact"
		}
		if l.rnd.IntN(2) == 0 {
			o.Limit = 1 + l.rnd.Int64N(3)
		}
		res, err := l.h.List(ctx, o)
		if err != nil {
			return err
		}
		i++
		if res.Status != nil && res.Status.Code == k8s.StatusGone {
			l.counts.add(1, 0)
		}
		// Follow the continue tokens, some of them after more writes (and
		// maybe a compaction) — also the token a 410 hands out, the
		// inconsistent continuation (SPEC §4.5).
		for (res.Continue != "" || res.Inconsistent != "") && i < l.cfg.Lists && l.rnd.IntN(5) != 0 {
			token := res.Continue
			if token == "" {
				token = res.Inconsistent
			}
			if l.rnd.IntN(3) == 0 {
				n, _, _ := l.w.state()
				l.w.waitWrites(n + 1 + l.rnd.IntN(l.cfg.CompactEvery+1))
			}
			next := ListOptions{Namespace: o.Namespace, Continue: token, Limit: o.Limit}
			if token == res.Inconsistent {
				l.counts.addInconsistent()
			}
			if res, err = l.h.List(ctx, next); err != nil {
				return err
			}
			i++
			if res.Status != nil && res.Status.Code == k8s.StatusGone {
				l.counts.add(1, 0)
			}
		}
	}
	return nil
}

type watcher struct {
	h      *Harness
	w      *writer
	rnd    *rand.Rand
	cfg    Config
	counts *outcomeCounter
}

func (c *watcher) run(ctx context.Context) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	slow := c.cfg.SlowWatches
	for i := range c.cfg.Watches {
		_, head, _ := c.w.state()
		o := WatchOptions{AllowWatchBookmarks: c.rnd.IntN(4) != 0, Timeout: 2500*time.Millisecond + time.Duration(c.rnd.IntN(1500))*time.Millisecond}
		if c.rnd.IntN(4) == 0 {
			o.Namespace = fmt.Sprintf("ns%d", c.rnd.IntN(max(c.cfg.Namespaces, 1)))
		}
		switch c.rnd.IntN(5) {
		case 0:
		case 1:
			o.ResourceVersion = "0"
		default:
			o.ResourceVersion = k8s.RV(pickRV(c.rnd, head))
		}
		switch r := c.rnd.IntN(10); {
		case r < 4: // a WatchList
			t := true
			o.SendInitialEvents, o.ResourceVersionMatch = &t, "NotOlderThan"
		case r < 5:
			f := false
			o.SendInitialEvents, o.ResourceVersionMatch = &f, "NotOlderThan"
		case r == 9: // invalid: sendInitialEvents without resourceVersionMatch
			t := true
			o.SendInitialEvents = &t
		}
		if slow > 0 && i%max(c.cfg.Watches/max(c.cfg.SlowWatches, 1), 1) == 0 {
			slow--
			o.Slow, o.Timeout, o.SendInitialEvents, o.ResourceVersionMatch = true, time.Minute, nil, ""
			o.ResourceVersion = k8s.RV(head)
		}
		w, err := c.h.Watch(ctx, o)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.follow(ctx, w, o); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
		// Open the next watch after a few writes.
		n, _, _ := c.w.state()
		c.w.waitWrites(n + 1 + c.rnd.IntN(4))
	}
	wg.Wait()
	return errors.Join(errs...)
}

// follow waits for a watch to end; a slow one is released only after many
// more writes, and resumed from its last resourceVersion when the server
// ended it.
func (c *watcher) follow(ctx context.Context, w *Watch, o WatchOptions) error {
	if o.Slow {
		n, _, _ := c.w.state()
		c.w.waitWrites(n + 3*slowAfter)
		w.Release()
		// The cacher closes a terminated watcher's stream once the client
		// has drained what was buffered; a watcher that was not terminated
		// (the writer finished first) ends at the client's give-up.
		if _, _, done := c.w.state(); done {
			time.AfterFunc(time.Second, w.Stop)
		}
		select {
		case <-w.Done():
		case <-ctx.Done():
			w.Stop()
			return ctx.Err()
		}
	}
	<-w.Done()
	if err := w.Err(); err != nil {
		return err
	}
	_, lastRV, byServer, refused := w.Result()
	if refused != nil && refused.Code == k8s.StatusGone {
		c.counts.add(1, 0)
	}
	if !o.Slow || !byServer {
		if o.Slow {
			w.Stop()
		}
		return nil
	}
	c.counts.add(0, 1)
	// Resume as a reflector would: from the last resourceVersion received.
	r := WatchOptions{Namespace: o.Namespace, ResourceVersion: k8s.RV(lastRV), AllowWatchBookmarks: true, Timeout: 2 * time.Second}
	if lastRV == 0 {
		r.ResourceVersion = o.ResourceVersion
	}
	rw, err := c.h.Watch(ctx, r)
	if err != nil {
		return err
	}
	<-rw.Done()
	return rw.Err()
}

// slowAfter is how many events overflow a slow watcher: the cacher's
// watcher buffers (input and result channels of 10 each for a history of
// 100 events, cacher.suggestedWatchChannelSize) and the dispatch slack.
const slowAfter = 25
