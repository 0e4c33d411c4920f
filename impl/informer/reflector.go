package informer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// ReflectorStore is what a Reflector writes into (a [DeltaFIFO], or an
// [Indexer] for a plain cache).
type ReflectorStore interface {
	Add(Object) error
	Update(Object) error
	Delete(Object) error
	// Replace swaps the content for a list at resourceVersion rv.
	Replace(list []Object, rv string) error
	Resync() error
}

// ReflectorOptions configure a [Reflector]. The zero options are
// client-go's defaults but for UseWatchList.
type ReflectorOptions struct {
	// ResyncPeriod, when positive, calls the store's Resync that often
	// while watching, when ShouldResync (if set) agrees.
	ResyncPeriod time.Duration
	ShouldResync func() bool
	// OnResync, if set, is called just before each resync.
	OnResync func()
	// UseWatchList makes the Reflector fetch its state with a WatchList
	// (sendInitialEvents, KEP-3157, client-go's default since 1.35) instead
	// of a list, falling back to a list if that fails.
	UseWatchList bool
	// PageSize is the limit of list pages (client-go's WatchListPageSize).
	// With 0, lists at "" and "0" are paged by 500 and lists at a
	// resourceVersion are not paged (so that they are served NotOlderThan,
	// not Exact).
	PageSize int64
	// Backoff paces the relists after a failure (DefaultBackoff).
	Backoff Backoff
	// Clock times the backoff, resync and watch timeouts (RealClock).
	Clock Clock
	// MinWatchTimeout: each watch asks the server to end it after a random
	// time in [MinWatchTimeout, 2×MinWatchTimeout) (default 5 minutes).
	MinWatchTimeout time.Duration
	// ErrorHandler is told why a list or watch failed (default: nothing).
	ErrorHandler func(error)
}

// Reflector keeps a store in step with a resource: it lists, then watches
// from the list's resourceVersion, and relists when the watch cannot go on
// (client-go tools/cache/reflector.go).
//
// The contract, mirrored from client-go:
//
//   - The first list asks for resourceVersion "0" (any state, served from
//     the API server's cache); a relist asks for the last synced
//     resourceVersion (not older than what was already seen, so one run
//     never goes back in time: kubernetes#67998, fixed by #83520), or for
//     "" (a consistent read) once that revision was answered 410 Expired or
//     "Too large resource version" (kubernetes#91073, #92537).
//   - A list is paged; a continuation that expires is replaced by one
//     unpaged list at the same resourceVersion (client-go's pager,
//     FullListIfExpired).
//   - The watch starts at the list's resourceVersion, with bookmarks. A
//     watch that ends normally is opened again from the last synced
//     resourceVersion without a relist; an ERROR 410 ends the watch and the
//     Reflector relists at the last synced resourceVersion; a watch that
//     ended within a second without an event counts as a failure.
//   - The last synced resourceVersion is taken from lists, bookmarks and
//     watch events, and never decreases. It is never taken from the
//     synthetic ADDED events a watch opens with (kubernetes#136583): a
//     WatchList adopts only its end bookmark's.
//   - With UseWatchList, the state comes from a WatchList (sendInitialEvents,
//     resourceVersionMatch NotOlderThan, the last synced resourceVersion or
//     "" the first time): its ADDED events are collected until the bookmark
//     annotated k8s.io/initial-events-end, then replace the store at the
//     bookmark's resourceVersion, and the same watch goes on. A stream that
//     ends before the bookmark is opened again; any other failure falls
//     back to a list.
//   - Between attempts the Reflector waits an exponential backoff with
//     jitter (DefaultBackoff: 0.8 s doubling to 30 s, reset after 2 min).
//   - A periodic resync only calls the store's Resync; it never talks to
//     the server.
type Reflector struct {
	lw      ListerWatcher
	store   ReflectorStore
	opts    ReflectorOptions
	clock   Clock
	backoff *backoff

	mu sync.RWMutex
	// lastSyncRV is the resourceVersion of the last list, bookmark or
	// change applied to the store.
	lastSyncRV string
	// unavailable: the last list or watch at lastSyncRV was answered 410 or
	// "too large": relist with "".
	unavailable     bool
	paginatedResult bool

	hooks *testHooks
}

// NewReflector returns a Reflector that keeps store in step with lw.
func NewReflector(lw ListerWatcher, store ReflectorStore, opts ReflectorOptions) *Reflector {
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.MinWatchTimeout <= 0 {
		opts.MinWatchTimeout = 5 * time.Minute
	}
	if opts.ErrorHandler == nil {
		opts.ErrorHandler = func(error) {}
	}
	return &Reflector{lw: lw, store: store, opts: opts, clock: opts.Clock, backoff: newBackoff(opts.Backoff, opts.Clock, nil)}
}

// LastSyncResourceVersion returns the resourceVersion the store is synced
// to ("" before the first list).
func (r *Reflector) LastSyncResourceVersion() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.lastSyncRV
}

// setLastSyncRV adopts rv unless it is older than what is already adopted
// (resourceVersions of one resource are ordered integers).
func (r *Reflector) setLastSyncRV(rv string) {
	n, ok := parseRV(rv)
	if !ok || n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, _ := parseRV(r.lastSyncRV); n < cur && !r.hooks.is(mutantRVFromSyntheticAdded) {
		return
	}
	r.lastSyncRV = rv
}

func (r *Reflector) setUnavailable(v bool) {
	r.mu.Lock()
	r.unavailable = v
	r.mu.Unlock()
}

// relistResourceVersion is the resourceVersion to list at.
func (r *Reflector) relistResourceVersion() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch {
	case r.unavailable:
		return ""
	case r.lastSyncRV == "" || r.hooks.is(mutantRelistAtZero):
		return "0"
	}
	return r.lastSyncRV
}

// rewatchResourceVersion is the resourceVersion a WatchList starts at.
func (r *Reflector) rewatchResourceVersion() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.unavailable {
		return ""
	}
	return r.lastSyncRV
}

// Run lists and watches until ctx is done, waiting the backoff after every
// attempt that ends.
func (r *Reflector) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := r.ListAndWatch(ctx); err != nil {
			r.opts.ErrorHandler(err)
		}
		if !sleep(r.clock, r.backoff.Step(), ctx.Done()) {
			return
		}
	}
}

// ListAndWatch fetches the state (a list, or a WatchList), then watches
// until the watch cannot go on. It returns an error only when it could
// not even start watching.
func (r *Reflector) ListAndWatch(ctx context.Context) error {
	var w Watcher
	fallback := !r.opts.UseWatchList
	if r.opts.UseWatchList {
		var err error
		w, err = r.watchList(ctx)
		if w == nil && err == nil {
			return nil // stopped
		}
		if err != nil {
			r.opts.ErrorHandler(fmt.Errorf("informer: WatchList failed, falling back to a list: %w", err))
			fallback, w = true, nil
		}
	}
	if fallback {
		if err := r.list(ctx); err != nil {
			return err
		}
	}
	return r.watchWithResync(ctx, w)
}

// list lists at relistResourceVersion and replaces the store's content.
func (r *Reflector) list(ctx context.Context) error {
	opts := ListOptions{ResourceVersion: r.relistResourceVersion()}
	pageSize := int64(500) // client-go's pager default
	switch {
	case r.opts.PageSize != 0:
		pageSize = r.opts.PageSize
	case r.paginatedResult:
	case opts.ResourceVersion != "" && opts.ResourceVersion != "0":
		pageSize = 0 // a limit would make it Exact: read NotOlderThan instead
	}
	l, paginated, err := r.pagedList(ctx, opts, pageSize)
	if IsExpired(err) || IsTooLargeResourceVersion(err) {
		// The revision is gone or not reached: relist consistently at once.
		r.setUnavailable(true)
		l, paginated, err = r.pagedList(ctx, ListOptions{ResourceVersion: r.relistResourceVersion()}, pageSize)
	}
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("informer: list: %w", err)
	}
	if opts.ResourceVersion == "0" && paginated {
		r.paginatedResult = true
	}
	r.setUnavailable(false)
	rv := strconv.FormatInt(l.ResourceVersion, 10)
	if err := r.store.Replace(l.Items, rv); err != nil {
		return fmt.Errorf("informer: replacing the store's content: %w", err)
	}
	r.setLastSyncRV(rv)
	return nil
}

// pagedList fetches every page of a list; when a continuation expires it
// lists once more, unpaged, at the original resourceVersion.
func (r *Reflector) pagedList(ctx context.Context, opts ListOptions, pageSize int64) (*List, bool, error) {
	opts.Limit = pageSize
	first, err := r.lw.List(ctx, opts)
	if err != nil {
		return nil, false, err
	}
	if first.Continue == "" {
		return first, false, nil
	}
	all := &List{ResourceVersion: first.ResourceVersion, Items: first.Items}
	for tok := first.Continue; tok != ""; {
		page, err := r.lw.List(ctx, ListOptions{Limit: pageSize, Continue: tok})
		if IsExpired(err) {
			opts.Limit = 0
			full, err := r.lw.List(ctx, opts)
			return full, true, err
		}
		if err != nil {
			return nil, true, err
		}
		all.Items = append(all.Items, page.Items...)
		tok = page.Continue
	}
	return all, true, nil
}

// watchList fetches the state with a WatchList and returns the watch, open
// after the initial-events-end bookmark; (nil, nil) when ctx is done.
func (r *Reflector) watchList(ctx context.Context) (Watcher, error) {
	retry := func(err error) bool {
		if IsExpired(err) || IsTooLargeResourceVersion(err) {
			r.setUnavailable(true)
			return true
		}
		return false
	}
	for {
		if ctx.Err() != nil {
			return nil, nil
		}
		temp := newTempStore()
		var rv string
		yes := true
		w, err := r.lw.Watch(ctx, WatchOptions{ResourceVersion: r.rewatchResourceVersion(), ResourceVersionMatch: "NotOlderThan",
			SendInitialEvents: &yes, AllowWatchBookmarks: true, TimeoutSeconds: r.watchTimeout()})
		if err != nil {
			if retry(err) {
				continue
			}
			return nil, err
		}
		start := r.clock.Now()
		got, err := r.handleWatch(ctx, start, w, temp, func(v string, besidesAdded bool) {
			if besidesAdded {
				rv = v
			} else if r.hooks.is(mutantRVFromSyntheticAdded) {
				r.setLastSyncRV(v) // the bug of kubernetes#136583
			}
		}, true, nil)
		if err != nil {
			w.Stop()
			if errors.Is(err, errStopRequested) {
				return nil, nil
			}
			if retry(err) {
				continue
			}
			return nil, err
		}
		if !got {
			continue // the stream ended before the bookmark: open it again
		}
		r.setUnavailable(false)
		if err := r.store.Replace(temp.list(), rv); err != nil {
			w.Stop()
			return nil, fmt.Errorf("informer: replacing the store's content: %w", err)
		}
		r.setLastSyncRV(rv)
		return w, nil
	}
}

func (r *Reflector) watchTimeout() int64 {
	min := r.opts.MinWatchTimeout.Seconds()
	return int64(min + rand.Float64()*min)
}

// watchWithResync watches, resyncing the store periodically meanwhile.
func (r *Reflector) watchWithResync(ctx context.Context, w Watcher) error {
	resyncErr := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	if r.opts.ResyncPeriod > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sleep(r.clock, r.opts.ResyncPeriod, rctx.Done()) {
				if r.opts.ShouldResync == nil || r.opts.ShouldResync() {
					if r.opts.OnResync != nil {
						r.opts.OnResync()
					}
					if err := r.store.Resync(); err != nil {
						resyncErr <- err
						return
					}
				}
			}
		}()
	}
	return r.watch(ctx, w, resyncErr)
}

var errStopRequested = errors.New("informer: stop requested")

// VeryShortWatchError: a watch ended within a second without delivering
// anything — probably a server problem; the Reflector relists after the
// backoff.
type VeryShortWatchError struct{}

func (VeryShortWatchError) Error() string {
	return "informer: very short watch: the watch ended within a second without an event"
}

// watch watches from the last synced resourceVersion (or goes on with w),
// opening the watch again whenever it ends normally.
func (r *Reflector) watch(ctx context.Context, w Watcher, resyncErr chan error) error {
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		start := r.clock.Now()
		// A watch already open is past any synthetic ADDED events; one
		// opened at "" or "0" begins with them, and their resourceVersions
		// are not ordered (kubernetes#136583).
		propagate := true
		if w == nil {
			rv := r.LastSyncResourceVersion()
			propagate = rv != "" && rv != "0"
			var err error
			w, err = r.lw.Watch(ctx, WatchOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: r.watchTimeout()})
			if err != nil {
				return err
			}
		}
		_, err := r.handleWatch(ctx, start, w, r.store, func(rv string, besidesAdded bool) {
			if propagate || besidesAdded {
				r.setLastSyncRV(rv)
			}
		}, false, resyncErr)
		w.Stop()
		w = nil
		switch {
		case err == nil:
			continue // a normal end: watch again from the last synced resourceVersion
		case errors.Is(err, errStopRequested):
		case IsExpired(err):
			// Relist at the last synced resourceVersion, which is "at
			// least as fresh"; unavailable stays false (client-go).
			if r.hooks.is(mutantSkipRelistOn410) {
				if !sleep(r.clock, r.backoff.Step(), ctx.Done()) {
					return nil
				}
				continue // the bug: watch again from the same, compacted, resourceVersion
			}
		default:
			r.opts.ErrorHandler(err)
		}
		return nil
	}
}

// handleWatch applies the events of w to store until w ends (or, with
// exitOnBookmark, until the initial-events-end bookmark, leaving w open).
// setRV is told each event's resourceVersion and whether a non-ADDED event
// was seen. It reports whether the initial-events-end bookmark came.
func (r *Reflector) handleWatch(ctx context.Context, start time.Time, w Watcher, store ReflectorStore,
	setRV func(rv string, besidesAdded bool), exitOnBookmark bool, resyncErr chan error) (bool, error) {
	got, besidesAdded, n := false, false, 0
	for {
		select {
		case <-ctx.Done():
			return got, errStopRequested
		case err := <-resyncErr:
			return got, err
		case ev, ok := <-w.ResultChan():
			if !ok {
				if n == 0 && r.clock.Now().Sub(start) < time.Second {
					return got, VeryShortWatchError{}
				}
				return got, nil
			}
			var err error
			switch ev.Type {
			case Error:
				if ev.Err == nil {
					return got, errors.New("informer: watch error event without a status")
				}
				return got, ev.Err
			case Added:
				err = store.Add(ev.Object)
			case Modified:
				besidesAdded = true
				if !(exitOnBookmark && r.hooks.is(mutantWatchListIgnoresCatchUp)) {
					err = store.Update(ev.Object)
				}
			case Deleted:
				besidesAdded = true
				if !(exitOnBookmark && r.hooks.is(mutantWatchListIgnoresCatchUp)) {
					err = store.Delete(ev.Object)
				}
			case Bookmark:
				besidesAdded = true
				got = got || ev.InitialEventsEnd
			default:
				err = fmt.Errorf("informer: watch event of unknown type %q", ev.Type)
			}
			if err != nil {
				r.opts.ErrorHandler(err)
			}
			setRV(strconv.FormatInt(ev.Object.ResourceVersion, 10), besidesAdded)
			n++
			if exitOnBookmark && got {
				return true, nil
			}
		}
	}
}

// tempStore collects a WatchList's initial events.
type tempStore struct {
	keys  []string
	items map[string]Object
}

func newTempStore() *tempStore { return &tempStore{items: map[string]Object{}} }

func (t *tempStore) Add(o Object) error {
	if _, ok := t.items[o.Key]; !ok {
		t.keys = append(t.keys, o.Key)
	}
	t.items[o.Key] = o
	return nil
}
func (t *tempStore) Update(o Object) error          { return t.Add(o) }
func (t *tempStore) Delete(o Object) error          { delete(t.items, o.Key); return nil }
func (t *tempStore) Replace([]Object, string) error { return nil }
func (t *tempStore) Resync() error                  { return nil }

func (t *tempStore) list() []Object {
	out := make([]Object, 0, len(t.items))
	for _, k := range t.keys {
		if o, ok := t.items[k]; ok {
			out = append(out, o)
			delete(t.items, k) // a key deleted and added again is listed once
		}
	}
	return out
}
