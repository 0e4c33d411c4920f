// Package listwatch is the legal adversary for Kubernetes informers and
// controllers: a list/watch source (an [informer.ListerWatcher]) over
// watchspec's reference store that, wherever docs/SPEC.md §4 leaves the
// API server a choice, takes a legal but unusual one, drawn from a seed.
// A watch answered 410 Expired as soon as its resourceVersion is older than
// the head, or ended by an ERROR 410 midway, so that the informer must
// relist; bookmarks injected where they are true, or never sent; a list at
// resourceVersion "0" served from an old snapshot; a WatchList whose
// state is older than the revision asked for, caught up by changes before
// its k8s.io/initial-events-end bookmark; watches closed by the server at
// any time; a compaction between the pages of a list. The store stays
// exact and every choice is legal: a recorded run of any informer over it
// passes the checks `watchspec check` runs (k8s.CheckList, CheckWatch,
// CheckInformer); the package's tests prove it over many seeds with
// watchspec's informer and client-go's. An informer that breaks under it
// has a bug, and the seed replays the choices.
//
// From your own go test, over a store you write to:
//
//	lw := listwatch.New(seed, st, informer.ConfigMaps, "", listwatch.Options{})
//	inf := informer.NewSharedInformer(lw, informer.Options{})
//	// … write, wait, and assert what your informer or controller promises;
//	// on failure, t.Log(lw.Report()) says what the adversary did.
//
// Over HTTP, for a client built from a rest.Config (client-go's clientsets,
// dynamic client and informers, unmodified), [ListWatch.Handler] serves
// the adversary as the Kubernetes REST API's list and watch, and adds
// choices only the wire allows (an event cut across chunks, events joined
// in one):
//
//	srv := httptest.NewServer(lw.Handler())
//	cfg := &rest.Config{Host: srv.URL}
//
// conform/informertest.TestInformerUnderAdversary does all of it in one
// call — writes, the informer's run recorded and checked against the
// informer contract (SPEC §5) — for any informer, client-go's included.
// docs/ADVERSARY.md lists the kinds of choice and the SPEC section that
// makes each legal.
package listwatch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/store"
)

// Kind is a kind of choice the adversary makes.
type Kind int

// The kinds of choice, each legal by the SPEC section [Kind.Section] names.
const (
	// Config: the run's probabilities, drawn from the seed, logged once.
	Config Kind = iota
	// ExpireWatch: a watch from a resourceVersion older than the head
	// answered ERROR 410 Expired at once; the server's window of events
	// then starts at the head, and every later watch from below it is
	// answered 410 too (§4.5: a server's window is its own).
	ExpireWatch
	// ExpireOpen: an open watch ended by an ERROR 410 Expired; the window
	// moves to the head as for ExpireWatch (§4.3, §4.5).
	ExpireOpen
	// Close: the server ends a watch normally — at once, or before an
	// event, which the informer then gets from its next watch (§4.3).
	Close
	// Bookmark: a BOOKMARK at the revision of the last change sent (or at
	// the watch's start), before the next change (§4.3, §3.6).
	Bookmark
	// DropBookmark: a bookmark the store offered not sent (§6: progress
	// notifications may never come).
	DropBookmark
	// StaleList: a list at resourceVersion "0" served from an older
	// snapshot — any revision the store still holds (§4.1 Any, §5.8).
	StaleList
	// StaleNotOlderThan: a list NotOlderThan N served at a revision
	// between N and the head rather than at the head (§4.1).
	StaleNotOlderThan
	// StaleWatchState: a watch at resourceVersion "0" opens with the
	// state of an older revision (§4.3 Any).
	StaleWatchState
	// WatchListCatchUp: a WatchList's initial ADDED events are the state
	// of an older revision, followed by the changes that bring it up to
	// the revision asked for, and only then the bookmark annotated
	// k8s.io/initial-events-end (§4.4, KEP-3157 step 2b).
	WatchListCatchUp
	// CompactBehindList: after a page of a limited list, the store is
	// compacted at the head, so that the next page is answered 410 (§4.5);
	// only with [Options.Compact].
	CompactBehindList
	// ShortPage: a page of a limited list holds fewer items than the
	// limit, with a continue token (§4.2 asks only that the pages, one
	// after the other, list every object once).
	ShortPage
	// WireSplit: over HTTP ([ListWatch.Handler]), the bytes of a watch
	// event written and flushed in several chunks, cut anywhere — inside
	// the JSON (§6: chunk boundaries carry nothing).
	WireSplit
	// WireJoin: over HTTP, several watch events that come within a few
	// milliseconds of each other written and flushed as one chunk (§6).
	WireJoin

	numKinds
)

var kindNames = [numKinds]string{
	"config", "expire-watch", "expire-open", "close", "bookmark", "drop-bookmark",
	"stale-list", "stale-not-older-than", "stale-watch-state", "watchlist-catch-up", "compact-behind-list", "short-page",
	"wire-split", "wire-join",
}

var kindSections = [numKinds]string{
	"", "§4.5", "§4.3, §4.5", "§4.3", "§4.3, §3.6", "§6",
	"§4.1, §5.8", "§4.1", "§4.3", "§4.4", "§4.5", "§4.2",
	"§6", "§6",
}

// String returns the kind's name as the report shows it.
func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Section returns the docs/SPEC.md sections that make the kind legal.
func (k Kind) Section() string {
	if k < 0 || k >= numKinds {
		return ""
	}
	return kindSections[k]
}

// Wire reports whether the kind is a choice of the HTTP handler
// ([ListWatch.Handler], [ListWatch.HandlerFor]) alone, which an
// in-process client never meets.
func (k Kind) Wire() bool { return k == WireSplit || k == WireJoin }

// Kinds returns every kind of choice, in order.
func Kinds() []Kind {
	out := make([]Kind, numKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

// Choice is one choice the adversary made.
type Choice struct {
	// Seq numbers the choices in the order they were made.
	Seq int64
	// Seed is the adversary's seed: New(Seed, …) makes the same draws.
	Seed int64
	Kind Kind
	// Call is "list N" or "watch N": the Nth list or watch the adversary
	// answered (numbered from 1), or "http watch N": the Nth watch its
	// HTTP handler served; "" for the run's settings.
	Call string
	// Revision is the revision concerned, or 0.
	Revision int64
	// Detail says what was done, for people.
	Detail string
}

// String formats the choice as one log line.
func (c Choice) String() string {
	return fmt.Sprintf("listwatch adversary seed=%d #%d %s (%s) %s rev=%d: %s",
		c.Seed, c.Seq, c.Kind, c.Kind.Section(), c.Call, c.Revision, c.Detail)
}

// Report is what an adversary did: how often it made each kind of choice,
// and the log of them.
type Report struct {
	Seed int64
	// Counts holds how many choices of each kind were made, by kind name
	// (every kind present).
	Counts map[string]int64
	// Choices are the choices made, in order, the first MaxLoggedChoices.
	Choices []Choice
	// Unlogged counts the choices made after those.
	Unlogged int64
}

// MaxLoggedChoices bounds the choices a [Report] keeps; the rest are
// counted.
const MaxLoggedChoices = 20000

// String formats the report as a table: each kind, the SPEC sections that
// make it legal, and how often it was made.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "listwatch adversary seed %d: choices made\n", r.Seed)
	for _, k := range Kinds() {
		fmt.Fprintf(&b, "  %-22s %-12s %8d\n", k, k.Section(), r.Counts[k.String()])
	}
	return b.String()
}

// Options configure [New]. The zero Options are ready to use.
type Options struct {
	// Compact, when set, lets the adversary compact the store at the head
	// between the pages of a list (CompactBehindList). It must compact the
	// store the way the rest of the test's writes go, so that whatever
	// checks the run knows of the compaction (internal/informertest's
	// Recorder.Compact records it in the trace); nil: the adversary never
	// compacts.
	Compact func(ctx context.Context, rev int64) error
	// Log, when set, is called with every choice as it is made.
	Log func(Choice)
	// Store configures the store's own list/watch underneath
	// ([informer.StoreListWatch]): its clock and bookmark interval.
	Store informer.StoreOptions
}

// params are a run's probabilities, drawn from the seed so that seeds
// differ in what they stress.
type params struct {
	pExpireWatch, pExpireOpen   float64
	pCloseAtOpen, pClose        float64
	pBookmark, pDropBookmark    float64
	pStaleList, pStaleNOT       float64
	pStaleWatch, pCatchUp       float64
	pCatchUpMore                float64
	pCompactBehind, pOldestSnap float64
	pShortPage                  float64
	pWireSplit, pWireJoin       float64
}

// ListWatch is the adversarial list/watch source of one resource over a
// store. It is safe for concurrent use; its Report accumulates.
type ListWatch struct {
	st        *store.Store
	inner     *informer.StoreListWatch
	gvr       informer.GVR
	namespace string
	seed      int64
	p         params
	opts      Options

	lists, watches atomic.Int64
	httpWatches    atomic.Int64 // watches served over HTTP, for the wire choices
	// window is the oldest resourceVersion a watch may start from: a
	// watch from below it is answered 410 (it only moves forward).
	window atomic.Int64

	mu       sync.Mutex
	seq      int64
	counts   [numKinds]int64
	log      []Choice
	unlogged int64
}

// New returns an adversarial source of the objects of resource gvr in
// namespace ("" for every namespace) of st, its choices drawn from seed.
func New(seed int64, st *store.Store, gvr informer.GVR, namespace string, opts Options) *ListWatch {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x11a7c4))
	between := func(lo, hi float64) float64 { return lo + rng.Float64()*(hi-lo) }
	a := &ListWatch{st: st, inner: informer.NewStoreListWatch(st, gvr, namespace, opts.Store), gvr: gvr, namespace: namespace, seed: seed, opts: opts,
		p: params{
			pExpireWatch:   between(0.05, 0.4),
			pExpireOpen:    between(0.005, 0.06),
			pCloseAtOpen:   between(0.01, 0.1),
			pClose:         between(0.005, 0.06),
			pBookmark:      between(0.1, 0.6),
			pDropBookmark:  between(0.2, 0.9),
			pStaleList:     between(0.5, 1),
			pStaleNOT:      between(0.2, 0.8),
			pStaleWatch:    between(0.5, 1),
			pCatchUp:       between(0.5, 1),
			pCatchUpMore:   between(0, 0.8),
			pCompactBehind: between(0.1, 0.5),
			pOldestSnap:    between(0.2, 0.8),
			pShortPage:     between(0.1, 0.6),
			pWireSplit:     between(0.05, 0.5), // drawn last: the draws above stay those of earlier versions
			pWireJoin:      between(0.05, 0.5),
		}}
	a.record(Config, "", 0, "expire-watch %.2f expire-open %.3f close-at-open %.2f close %.3f bookmark %.2f drop-bookmark %.2f stale-list %.2f stale-not-older-than %.2f stale-watch-state %.2f catch-up %.2f (more %.2f) compact-behind-list %.2f oldest-snapshot %.2f short-page %.2f wire-split %.2f wire-join %.2f",
		a.p.pExpireWatch, a.p.pExpireOpen, a.p.pCloseAtOpen, a.p.pClose, a.p.pBookmark, a.p.pDropBookmark, a.p.pStaleList,
		a.p.pStaleNOT, a.p.pStaleWatch, a.p.pCatchUp, a.p.pCatchUpMore, a.p.pCompactBehind, a.p.pOldestSnap, a.p.pShortPage,
		a.p.pWireSplit, a.p.pWireJoin)
	return a
}

// Seed returns the seed the adversary draws from.
func (a *ListWatch) Seed() int64 { return a.seed }

// StoreListWatch returns the store's own list/watch underneath, for its
// RequestBookmarks and DropWatches.
func (a *ListWatch) StoreListWatch() *informer.StoreListWatch { return a.inner }

// Report returns the choices made so far.
func (a *ListWatch) Report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := Report{Seed: a.seed, Counts: make(map[string]int64, numKinds), Choices: append([]Choice(nil), a.log...), Unlogged: a.unlogged}
	for k, n := range a.counts {
		r.Counts[Kind(k).String()] = n
	}
	return r
}

func (a *ListWatch) record(kind Kind, call string, rev int64, format string, args ...any) {
	c := Choice{Seed: a.seed, Kind: kind, Call: call, Revision: rev, Detail: fmt.Sprintf(format, args...)}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	c.Seq = a.seq
	a.counts[kind]++
	if len(a.log) < MaxLoggedChoices {
		a.log = append(a.log, c)
	} else {
		a.unlogged++
	}
	if a.opts.Log != nil {
		a.opts.Log(c) // under a.mu: one at a time, in Seq order
	}
}

// rng returns the generator of the nth call of a kind: the draws of one
// list or watch depend on the seed and its number only.
func (a *ListWatch) rng(stream uint64, n int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(a.seed), stream<<56^uint64(n)))
}

// oldest returns the oldest revision the store can still serve a read at.
func (a *ListWatch) oldest() int64 { return max(a.st.CompactRevision(), 1) }

// snapshot draws a revision in [lo, head]: the oldest with probability
// pOldestSnap, else any.
func (a *ListWatch) snapshot(rng *rand.Rand, lo, head int64) int64 {
	if lo >= head {
		return head
	}
	if rng.Float64() < a.p.pOldestSnap {
		return lo
	}
	return lo + rng.Int64N(head-lo+1)
}

// exactly lists at exactly rev, page by page as o asks.
func exactly(o informer.ListOptions, rev int64) informer.ListOptions {
	return informer.ListOptions{ResourceVersion: informer.RV(rev), ResourceVersionMatch: "Exact", Limit: o.Limit}
}

// List implements [informer.ListerWatcher]: the store's answer, or — for
// a list at "0" or NotOlderThan N — the store's answer at an older
// revision the semantic allows; after a page with a continue token, maybe
// a compaction at the head.
func (a *ListWatch) List(ctx context.Context, o informer.ListOptions) (*informer.List, error) {
	n := a.lists.Add(1)
	call := fmt.Sprintf("list %d", n)
	rng := a.rng(1, n)
	limit := o.Limit
	if o.Limit > 1 && rng.Float64() < a.p.pShortPage {
		o.Limit = 1 + rng.Int64N(min(o.Limit-1, 3))
	}
	l, err := a.list(ctx, o, rng, call)
	if err == nil && o.Limit < limit && l.Continue != "" {
		a.record(ShortPage, call, l.ResourceVersion, "a page of %d items at revision %d, for a limit of %d", len(l.Items), l.ResourceVersion, limit)
	}
	if err == nil && l.Continue != "" && a.opts.Compact != nil && rng.Float64() < a.p.pCompactBehind {
		if head := a.st.Revision(); head > l.ResourceVersion && head > a.st.CompactRevision() {
			if cerr := a.opts.Compact(ctx, head); cerr == nil {
				a.record(CompactBehindList, call, head, "compacted at the head %d behind a page at revision %d: the next page is answered 410", head, l.ResourceVersion)
			}
		}
	}
	return l, err
}

func (a *ListWatch) list(ctx context.Context, o informer.ListOptions, rng *rand.Rand, call string) (*informer.List, error) {
	if o.Continue != "" || o.ResourceVersionMatch == "Exact" {
		return a.inner.List(ctx, o)
	}
	head := a.st.Revision()
	switch {
	case o.ResourceVersion == "0" && rng.Float64() < a.p.pStaleList:
		at := a.snapshot(rng, a.oldest(), head)
		if l, err := a.inner.List(ctx, exactly(o, at)); err == nil {
			if at < head {
				a.record(StaleList, call, at, "a list at \"0\" served at revision %d; the head is %d", at, head)
			}
			return l, nil
		}
	case o.ResourceVersion != "" && o.ResourceVersion != "0" && (o.Limit == 0 || o.ResourceVersionMatch == "NotOlderThan") && rng.Float64() < a.p.pStaleNOT:
		rv, ok := parseRV(o.ResourceVersion)
		if !ok || rv > head || rv < a.oldest() {
			break
		}
		at := a.snapshot(rng, rv, head)
		if l, err := a.inner.List(ctx, exactly(o, at)); err == nil {
			if at < head {
				a.record(StaleNotOlderThan, call, at, "a list not older than %d served at revision %d; the head is %d", rv, at, head)
			}
			return l, nil
		}
	}
	return a.inner.List(ctx, o) // the store's own answer (a compaction raced a stale read)
}

func parseRV(s string) (int64, bool) {
	var n int64
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' || n > (1<<62)/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// Watch implements [informer.ListerWatcher]: the store's watch, with the
// adversary's choices in how it opens, what it sends and when it ends.
func (a *ListWatch) Watch(ctx context.Context, o informer.WatchOptions) (informer.Watcher, error) {
	n := a.watches.Add(1)
	call := fmt.Sprintf("watch %d", n)
	rng := a.rng(2, n)
	head := a.st.Revision()
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{a: a, call: call, rng: rng, ctx: wctx, cancel: cancel, out: make(chan informer.Event), bookmarks: o.AllowWatchBookmarks}

	rv, plain := parseRV(o.ResourceVersion)
	plain = plain && (o.SendInitialEvents == nil || !*o.SendInitialEvents)
	watchList := o.SendInitialEvents != nil && *o.SendInitialEvents && o.AllowWatchBookmarks && o.ResourceVersionMatch == "NotOlderThan"
	legacyAny := o.ResourceVersion == "0" && o.SendInitialEvents == nil && o.ResourceVersionMatch == ""
	switch {
	case plain && rv < head && rv < a.window.Load():
		a.record(ExpireWatch, call, rv, "a watch from %d, below the window that starts at %d: 410", rv, a.window.Load())
		w.expire(rv)
	case plain && rv < head && rng.Float64() < a.p.pExpireWatch:
		a.advanceWindow(head)
		a.record(ExpireWatch, call, rv, "a watch from %d, older than the head %d: 410; the window now starts at %d", rv, head, head)
		w.expire(rv)
	case watchList && rng.Float64() < a.p.pCatchUp:
		minRV := int64(0)
		if o.ResourceVersion != "" {
			minRV, _ = parseRV(o.ResourceVersion)
		}
		if minRV > head || !w.openWithState(o, a.snapshot(rng, a.oldest(), head), max(minRV, head), true) {
			break
		}
		if w.stateRev < w.endAtLeast {
			a.record(WatchListCatchUp, call, w.stateRev, "a WatchList (resourceVersion %q) opens with the state at %d, %d objects, and catches up to %d or later before its end bookmark", o.ResourceVersion, w.stateRev, len(w.pre), w.endAtLeast)
		}
	case legacyAny && rng.Float64() < a.p.pStaleWatch:
		if w.openWithState(o, a.snapshot(rng, a.oldest(), head), 0, false) && w.stateRev < head {
			a.record(StaleWatchState, call, w.stateRev, "a watch at \"0\" opens with the state at %d, %d objects; the head is %d", w.stateRev, len(w.pre), head)
		}
	}
	if w.inner == nil && !w.expired {
		in, err := a.inner.Watch(wctx, o)
		if err != nil {
			cancel()
			return nil, err
		}
		w.inner = in
		if plain {
			w.choosing, w.lastRev = true, rv
		}
		if rng.Float64() < a.p.pCloseAtOpen {
			a.record(Close, call, rv, "the watch is closed at once")
			w.closeNow = true
		}
	}
	go w.run()
	return w, nil
}

// advanceWindow moves the window of watchable history up to rev.
func (a *ListWatch) advanceWindow(rev int64) {
	for {
		cur := a.window.Load()
		if rev <= cur || a.window.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func expiredStatus(rv, window int64) *informer.StatusError {
	return &informer.StatusError{Code: informer.CodeGone, Reason: informer.ReasonExpired,
		Message: fmt.Sprintf("too old resource version: %d (%d)", rv, window)}
}

// watcher is one watch of the adversary.
type watcher struct {
	a         *ListWatch
	call      string
	rng       *rand.Rand
	ctx       context.Context
	cancel    context.CancelFunc
	out       chan informer.Event
	inner     informer.Watcher
	bookmarks bool

	pre      []informer.Event // sent first: the state's ADDED events, or an ERROR
	expired  bool             // pre is an ERROR: nothing follows
	closeNow bool             // closed after pre
	stateRev int64            // the revision of the state it opened with
	// endPending: a WatchList's end bookmark is due, at a revision ≥
	// endAtLeast, once every change up to it has been sent.
	endPending bool
	endAtLeast int64
	// choosing: the watch is past any initial state; the adversary may
	// end it or add bookmarks. lastRev is then the revision of the last
	// change sent (or the revision the watch started at): a bookmark there
	// is true.
	choosing bool
	lastRev  int64
}

func (w *watcher) ResultChan() <-chan informer.Event { return w.out }

func (w *watcher) Stop() { w.cancel() }

// expire makes the watch answer ERROR 410 and end.
func (w *watcher) expire(rv int64) {
	w.pre = []informer.Event{{Type: informer.Error, Err: expiredStatus(rv, w.a.window.Load())}}
	w.expired = true
}

// openWithState opens the store's watch from rev (a revision the store
// still has) and reads the state there; with end, the watch is a WatchList
// whose end bookmark must come at endAtLeast or later. It reports false —
// and leaves the watch to the store — when compaction overtook rev.
func (w *watcher) openWithState(o informer.WatchOptions, rev, endAtLeast int64, end bool) bool {
	in, err := w.a.inner.Watch(w.ctx, informer.WatchOptions{ResourceVersion: informer.RV(rev), AllowWatchBookmarks: o.AllowWatchBookmarks || end,
		TimeoutSeconds: o.TimeoutSeconds})
	if err != nil {
		return false
	}
	l, err := w.a.inner.List(w.ctx, informer.ListOptions{ResourceVersion: informer.RV(rev), ResourceVersionMatch: "Exact"})
	if err != nil {
		in.Stop()
		return false
	}
	w.inner, w.stateRev, w.lastRev, w.choosing = in, rev, rev, true
	for _, it := range l.Items {
		w.pre = append(w.pre, informer.Event{Type: informer.Added, Object: it})
	}
	if end {
		w.endPending, w.endAtLeast = true, endAtLeast
		if w.endAtLeast <= rev {
			w.pre = append(w.pre, w.endBookmark(rev))
		} else {
			// The store's progress notification says how far the changes
			// go when none come: ask for one.
			w.a.inner.RequestBookmarks()
		}
	}
	return true
}

func (w *watcher) endBookmark(rev int64) informer.Event {
	w.endPending = false
	w.lastRev = max(w.lastRev, rev)
	return informer.Event{Type: informer.Bookmark, Object: informer.Object{ResourceVersion: rev}, InitialEventsEnd: true}
}

func (w *watcher) send(e informer.Event) bool {
	select {
	case w.out <- e:
		return true
	case <-w.ctx.Done():
		return false
	}
}

func (w *watcher) run() {
	defer func() {
		w.cancel()
		if w.inner != nil {
			w.inner.Stop()
		}
		close(w.out)
	}()
	for _, e := range w.pre {
		if !w.send(e) {
			return
		}
	}
	if w.expired || w.closeNow {
		return
	}
	for {
		var ev informer.Event
		var ok bool
		select {
		case ev, ok = <-w.inner.ResultChan():
			if !ok {
				return
			}
		case <-w.ctx.Done():
			return
		}
		switch ev.Type {
		case informer.Error:
			if w.endPending {
				// An error inside a WatchList's initial events: end the
				// stream without it (§4.4 wants the end bookmark next).
				return
			}
		case informer.Bookmark:
			rev := ev.Object.ResourceVersion
			switch {
			case ev.InitialEventsEnd:
				// The store's own WatchList is synced: choices may follow.
				w.choosing, w.lastRev = true, max(w.lastRev, rev)
			case w.endPending && rev >= w.endAtLeast:
				ev = w.endBookmark(rev)
			case w.endPending:
				// No plain bookmark may come before the end bookmark
				// (§4.4): not a choice. Ask again.
				w.a.inner.RequestBookmarks()
				continue
			case !w.bookmarks:
				continue
			case w.rng.Float64() < w.a.p.pDropBookmark:
				w.a.record(DropBookmark, w.call, rev, "a bookmark at %d not sent", rev)
				continue
			default:
				w.lastRev = max(w.lastRev, rev)
			}
		case informer.Added, informer.Modified, informer.Deleted:
			rev := ev.Object.ResourceVersion
			if w.endPending {
				if rev > w.endAtLeast && rev > w.lastRev && w.rng.Float64() >= w.a.p.pCatchUpMore {
					// A new revision: every change up to rev−1 ≥ endAtLeast
					// has been sent (a revision's changes are never split).
					if !w.send(w.endBookmark(rev - 1)) {
						return
					}
				}
			} else if w.choosing && rev > w.lastRev {
				// A new revision: what came before may end the stream, or
				// be confirmed by a bookmark.
				switch x := w.rng.Float64(); {
				case x < w.a.p.pExpireOpen:
					head := w.a.st.Revision()
					w.a.advanceWindow(head)
					w.a.record(ExpireOpen, w.call, rev, "ERROR 410 before the change at %d; the window now starts at %d", rev, head)
					w.send(informer.Event{Type: informer.Error, Err: expiredStatus(w.lastRev, head)})
					return
				case x < w.a.p.pExpireOpen+w.a.p.pClose:
					w.a.record(Close, w.call, rev, "the watch is closed before the change at %d", rev)
					return
				case w.bookmarks && x < w.a.p.pExpireOpen+w.a.p.pClose+w.a.p.pBookmark:
					w.a.record(Bookmark, w.call, w.lastRev, "a bookmark at %d before the change at %d", w.lastRev, rev)
					if !w.send(informer.Event{Type: informer.Bookmark, Object: informer.Object{ResourceVersion: w.lastRev}}) {
						return
					}
				}
			}
			if w.choosing || w.endPending {
				w.lastRev = max(w.lastRev, rev)
			}
		}
		if !w.send(ev) {
			return
		}
	}
}
