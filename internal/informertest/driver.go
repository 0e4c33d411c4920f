package informertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// GVR is the resource the driver writes and the informers watch.
var GVR = informer.ConfigMaps

// Subject is an informer implementation under test.
type Subject interface {
	// New returns an informer over lw, not yet running.
	New(lw informer.ListerWatcher, cfg Config) Informer
}

// Config is what the driver draws for an informer.
type Config struct {
	// ResyncPeriod of the informer and its handlers (0: none).
	ResyncPeriod time.Duration
	// WatchList: fetch the state with a WatchList rather than a list.
	WatchList bool
	// PageSize of the Reflector's lists (0: the default).
	PageSize int64
	// OnResync must be called when a periodic resync starts, before its
	// notifications (SPEC §5.7 needs the mark).
	OnResync func()
}

// Informer is one informer under test.
type Informer interface {
	// AddHandler registers a handler whose calls go to sink.
	AddHandler(sink *Sink) (Registration, error)
	// Run runs the informer until ctx is done and it has stopped.
	Run(ctx context.Context)
	HasSynced() bool
	LastSyncResourceVersion() string
	// Cache returns the informer's cache.
	Cache() []k8s.Object
}

// Pausable is an Informer that can wait on a gate before each pop of its
// queue, so that deltas pile up: the "relist while deltas are queued"
// fault. PauseProcessing is called before Run.
type Pausable interface {
	PauseProcessing(g *Gate)
}

// Registration is a registered handler.
type Registration interface{ HasSynced() bool }

// Sink receives a handler's calls: adapters convert each call to a
// k8s.Notification and pass it to Handle.
type Sink struct {
	ID int
	// Resync, when set, is the handler's own resync period (client-go's
	// AddEventHandlerWithResyncPeriod; 0: the handler wants no resync);
	// nil: the informer's default.
	Resync *time.Duration
	h      *Harness
}

// Handle records a call of the handler, after the handler's gate (a slow
// or stalled handler) lets it through.
func (s *Sink) Handle(n k8s.Notification) {
	if g := s.h.gate(s.ID); g.IsClosed() {
		s.h.cov.add(CovStalledHandler, 1)
		g.Wait(nil)
	}
	s.h.observe()
	n.Handler = s.ID
	s.h.Rec.Notify(n)
}

// Options tune Check.
type Options struct {
	// Steps bounds the number of actions of a run (default 150).
	Steps int
	// NoResync, NoWatchList, NoLateHandlers and NoRestart leave those
	// features out of the draws.
	NoResync, NoWatchList, NoLateHandlers, NoRestart bool
	// Coverage, if set, counts the situations the scenarios reached.
	Coverage *Coverage
}

// Check runs one random scenario inside a synctest bubble: writes to a few
// objects in two namespaces, an informer of subject with one or two
// handlers, and faults — watches dropped, watch delivery stalled,
// compaction (so that a watch or a relist is answered 410), handlers
// stalled, the informer's processing paused while deltas pile up (a relist
// with deltas queued, kubernetes#115620), handlers added late, periodic
// resync, informer restarts, bookmarks, and time passing (fake time:
// backoff and resync timers fire). Then writes stop, the run waits until
// the informer agrees with the store (or long enough: 20 minutes of fake
// time), marks quiescence, and every recorded run must pass
// k8s.CheckInformer with no violation.
func Check(t *rapid.T, subject Subject, opts Options) {
	rapid.SyncTest(t, func(t *rapid.T) { run(t, subject, opts) })
}

// TB is what the harness needs of a test: *testing.T and *rapid.T.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Harness runs an informer of a Subject over a fresh reference store in a
// testing/synctest bubble, records it, and injects faults. [Check] drives it
// at random; tests of single scenarios (the mutants) drive it by hand. Its
// methods must be called from the bubble's goroutine.
type Harness struct {
	t       TB
	cov     *Coverage
	subject Subject
	cfg     Config
	ctx     context.Context
	st      *store.Store
	dir     string
	values  int

	// Rec records the runs; LW is the informer's ListWatch (recorded, with
	// its Stall gate and Drop); StoreLW is the store's ListWatch under it.
	Rec     *Recorder
	LW      *ListWatch
	StoreLW *informer.StoreListWatch
	// Processing, while closed, keeps a Pausable informer from popping its
	// queue.
	Processing *Gate

	mu       sync.Mutex
	inf      Informer
	regs     map[int]Registration
	gates    map[int]*Gate
	handlers int
	cancel   context.CancelFunc
	stopped  chan struct{}
}

// NewHarness opens a store in a temporary directory; Close removes it.
// Call it inside a synctest bubble.
func NewHarness(t TB, subject Subject, cfg Config, watch watchhub.Options) *Harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "informertest")
	if err != nil {
		t.Fatalf("%v", err)
	}
	st, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}, Watch: watch})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("%v", err)
	}
	h := &Harness{t: t, subject: subject, ctx: context.Background(), st: st, dir: dir,
		Processing: &Gate{}, regs: map[int]Registration{}, gates: map[int]*Gate{}}
	h.Rec = NewRecorder(st, GVR.Prefix(""))
	h.StoreLW = informer.NewStoreListWatch(st, GVR, "", informer.StoreOptions{})
	h.LW = h.Rec.ListWatch(h.StoreLW)
	h.LW.Observe = h.observe
	cfg.OnResync = h.Rec.Resync
	h.cfg = cfg
	return h
}

// UseSource makes the informer read through lw instead of the store's own
// ListWatch (StoreLW), still recorded and with the faults of LW: an
// adversarial source (adversary/listwatch). Call it before Start.
func (h *Harness) UseSource(lw informer.ListerWatcher) { h.LW.inner = lw }

// Close stops the informer if it runs and removes the store.
func (h *Harness) Close() {
	if h.inf != nil {
		h.stop()
	}
	h.st.Close()
	os.RemoveAll(h.dir)
}

// Store returns the store.
func (h *Harness) Store() *store.Store { return h.st }

func (h *Harness) gate(id int) *Gate {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gates[id]
	if g == nil {
		g = &Gate{}
		h.gates[id] = g
	}
	return g
}

// HandlerGate returns the gate that stalls handler id while closed.
func (h *Harness) HandlerGate(id int) *Gate { return h.gate(id) }

// observe records what the informer says of itself now.
func (h *Harness) observe() {
	h.mu.Lock()
	inf := h.inf
	regs := make(map[int]Registration, len(h.regs))
	for id, r := range h.regs {
		regs[id] = r
	}
	h.mu.Unlock()
	if inf == nil {
		return
	}
	h.Rec.ObserveSyncedRV(inf.LastSyncResourceVersion)
	h.Rec.ObserveHasSynced(-1, inf.HasSynced())
	for id, r := range regs {
		h.Rec.ObserveHasSynced(id, r.HasSynced())
	}
}

// Put writes object namespace/name with a fresh value (v1, v2, …).
func (h *Harness) Put(namespace, name string) {
	h.t.Helper()
	h.values++
	if _, err := h.Rec.Put(h.ctx, GVR.Key(namespace, name), fmt.Sprintf("v%d", h.values)); err != nil {
		h.t.Fatalf("put: %v", err)
	}
}

// Delete deletes object namespace/name.
func (h *Harness) Delete(namespace, name string) {
	h.t.Helper()
	if _, err := h.Rec.Delete(h.ctx, GVR.Key(namespace, name)); err != nil {
		h.t.Fatalf("delete: %v", err)
	}
}

// Compact compacts the store at rev.
func (h *Harness) Compact(rev int64) {
	h.t.Helper()
	if err := h.Rec.Compact(h.ctx, rev); err != nil {
		h.t.Fatalf("compact: %v", err)
	}
}

// CompactNow compacts the store at its current revision, if it can.
func (h *Harness) CompactNow() {
	if cur := h.st.Revision(); cur > h.Rec.CompactRevision() {
		h.Compact(cur)
	}
}

// Partition: the informer's watch falls behind (its events held back)
// while writes runs and the store is compacted; then the connection breaks.
// The informer's next watch is answered 410, and it relists.
func (h *Harness) Partition(writes func()) {
	h.LW.Stall.Close()
	writes()
	h.CompactNow()
	h.LW.Drop()
	h.LW.Stall.Open()
}

// Settle waits until every goroutine of the bubble is blocked, then
// observes the informer.
func (h *Harness) Settle() {
	synctest.Wait()
	h.observe()
}

// Advance lets d of fake time pass, then settles.
func (h *Harness) Advance(d time.Duration) {
	time.Sleep(d)
	h.Settle()
}

// AddHandler registers the next handler (before the start, or late), with
// the informer's resync period.
func (h *Harness) AddHandler() { h.AddHandlerWithResync(nil) }

// AddHandlerWithResync registers the next handler with its own resync
// period (nil: the informer's; 0: none).
func (h *Harness) AddHandlerWithResync(period *time.Duration) {
	h.t.Helper()
	h.mu.Lock()
	inf, id := h.inf, h.handlers
	h.handlers++
	h.mu.Unlock()
	h.Rec.HandlerAdded(id)
	reg, err := inf.AddHandler(&Sink{ID: id, Resync: period, h: h})
	if err != nil {
		h.t.Fatalf("AddHandler: %v", err)
	}
	h.mu.Lock()
	h.regs[id] = reg
	h.mu.Unlock()
}

// Start creates an informer with handlers handlers (the informer's resync
// period each) and runs it.
func (h *Harness) Start(handlers int) { h.StartWithResync(make([]*time.Duration, handlers)...) }

// StartWithResync creates an informer with one handler per period (nil:
// the informer's resync period) and runs it.
func (h *Harness) StartWithResync(periods ...*time.Duration) {
	inf := h.subject.New(h.LW, h.cfg)
	if p, ok := inf.(Pausable); ok {
		p.PauseProcessing(h.Processing)
	}
	h.mu.Lock()
	h.inf, h.regs, h.handlers = inf, map[int]Registration{}, 0
	h.mu.Unlock()
	for _, p := range periods {
		h.AddHandlerWithResync(p)
	}
	var rctx context.Context
	rctx, h.cancel = context.WithCancel(h.ctx)
	h.stopped = make(chan struct{})
	h.Rec.Start()
	go func() {
		defer close(h.stopped)
		inf.Run(rctx)
	}()
}

// OpenAll opens every gate: stall, processing, handlers.
func (h *Harness) OpenAll() {
	h.LW.Stall.Open()
	h.Processing.Open()
	h.mu.Lock()
	for _, g := range h.gates {
		g.Open()
	}
	h.mu.Unlock()
}

// stop stops the informer and records its cache. Every buffer drains first:
// an informer that stops drops its handlers' pending notifications, and the
// handlers' streams would end at different points, which SPEC §5.4
// LateHandler (comparing the streams to their end) does not allow for.
func (h *Harness) stop() *k8s.Run {
	h.OpenAll()
	synctest.Wait()
	h.cancel()
	<-h.stopped
	h.LW.wg.Wait() // the recording goroutines of the informer's watches
	h.mu.Lock()
	inf := h.inf
	h.inf = nil
	h.mu.Unlock()
	return h.Rec.Finish(inf.Cache())
}

// Restart stops the informer and starts a new one with a handler per
// period: a new run.
func (h *Harness) Restart(periods ...*time.Duration) {
	h.stop()
	h.Rec.NewRun()
	h.StartWithResync(periods...)
}

// Quiesce opens every gate and waits until the informer agrees with the
// store, or for twenty minutes of fake time; then it marks quiescence and
// stops the informer.
func (h *Harness) Quiesce() {
	h.OpenAll()
	for i := 0; ; i++ {
		h.Settle()
		if h.converged() || i == 25 {
			break
		}
		time.Sleep(min(time.Second<<i, time.Minute))
	}
	h.Rec.Quiesced()
	h.observe()
	h.stop()
}

// Violations checks every recorded run against the store's history and
// returns the violations of each run — but for those the subject knows as
// a reported bug ([KnownBugs]), which it logs.
func (h *Harness) Violations() [][]spec.Violation {
	h.t.Helper()
	hist, err := h.Rec.History()
	if err != nil {
		h.t.Fatalf("history: %v", err)
	}
	var out [][]spec.Violation
	for i, r := range h.Rec.Runs() {
		h.cov.countRun(r)
		vs, excused := known(h.subject, *r, k8s.CheckInformer(hist, *r))
		for _, e := range excused {
			h.t.Logf("run %d: a known bug of the informer, not failed: %s", i+1, e)
		}
		out = append(out, vs)
	}
	return out
}

// converged reports whether the informer synced, every handler synced,
// and the cache and every handler's view equal the store.
func (h *Harness) converged() bool {
	h.mu.Lock()
	inf := h.inf
	regs := h.regs
	h.mu.Unlock()
	if !inf.HasSynced() {
		return false
	}
	for _, r := range regs {
		if !r.HasSynced() {
			return false
		}
	}
	want := h.Rec.Objects()
	cache := map[string]k8s.Object{}
	for _, o := range inf.Cache() {
		cache[o.Key] = o
	}
	if !sameObjects(want, cache) {
		return false
	}
	for _, id := range h.Rec.Handlers() {
		if !sameObjects(want, h.Rec.View(id)) {
			return false
		}
	}
	return true
}

var (
	namespaces = []string{"a", "b"}
	names      = []string{"x", "y", "z"}
)

func run(t *rapid.T, subject Subject, opts Options) {
	rec, cfg, runs := explore(t, subject, opts)
	for i, vs := range runs {
		if len(vs) > 0 {
			t.Fatalf("run %d of %d (config %+v) broke the informer contract:\n%s\n%s", i+1, len(runs), cfg, describe(vs), rec.Dump(rec.Runs()[i], "failing"))
		}
	}
}

// Explore runs one random scenario like Check, inside a synctest bubble,
// and returns the violations of each recorded run instead of failing: for
// showing that the scenarios find a broken informer.
func Explore(t *rapid.T, subject Subject, opts Options) [][]spec.Violation {
	var out [][]spec.Violation
	rapid.SyncTest(t, func(t *rapid.T) { _, _, out = explore(t, subject, opts) })
	return out
}

func explore(t *rapid.T, subject Subject, opts Options) (*Recorder, Config, [][]spec.Violation) {
	if opts.Steps == 0 {
		opts.Steps = 150
	}
	cfg := Config{PageSize: rapid.SampledFrom([]int64{0, 0, 1, 2}).Draw(t, "pageSize")}
	if !opts.NoResync && rapid.IntRange(0, 3).Draw(t, "resync") == 0 {
		cfg.ResyncPeriod = rapid.SampledFrom([]time.Duration{10 * time.Second, time.Minute}).Draw(t, "resyncPeriod")
	}
	if !opts.NoWatchList {
		cfg.WatchList = rapid.Bool().Draw(t, "watchList")
	}
	h := NewHarness(t, subject, cfg, watchhub.Options{
		StreamCapacity:   rapid.SampledFrom([]int{1, 4, 128}).Draw(t, "streamCapacity"),
		ProgressInterval: rapid.SampledFrom([]time.Duration{-1, 10 * time.Second}).Draw(t, "progressInterval"),
	})
	defer h.Close()
	h.cov = opts.Coverage
	rec := h.Rec

	write := func() {
		ns := rapid.SampledFrom(namespaces).Draw(t, "namespace")
		name := rapid.SampledFrom(names).Draw(t, "name")
		if _, exists := rec.Objects()[GVR.Key(ns, name)]; exists && rapid.IntRange(0, 2).Draw(t, "delete") == 0 {
			h.Delete(ns, name)
		} else {
			h.Put(ns, name)
		}
	}
	for n := rapid.IntRange(0, 4).Draw(t, "initialWrites"); n > 0; n-- {
		write()
	}
	// With resync on, each handler draws its own period
	// (AddEventHandlerWithResyncPeriod): the informer's, none, or another.
	drawPeriod := func() *time.Duration {
		if cfg.ResyncPeriod == 0 {
			return nil
		}
		switch rapid.IntRange(0, 3).Draw(t, "handlerResync") {
		case 0:
			return nil
		case 1:
			p := time.Duration(0)
			return &p
		}
		p := rapid.SampledFrom([]time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute}).Draw(t, "handlerResyncPeriod")
		return &p
	}
	var periods []*time.Duration
	for n := rapid.IntRange(1, 2).Draw(t, "handlers"); n > 0; n-- {
		periods = append(periods, drawPeriod())
	}
	h.LW.OnList = func(o informer.ListOptions) {
		h.mu.Lock()
		_, pausable := h.inf.(Pausable)
		h.mu.Unlock()
		if pausable && h.Processing.IsClosed() && o.Continue == "" {
			opts.Coverage.add(CovRelistWhilePaused, 1)
		}
	}
	h.StartWithResync(periods...)
	writes := func(label string) func() {
		return func() {
			for n := rapid.IntRange(1, 3).Draw(t, label); n > 0; n-- {
				write()
			}
		}
	}

	steps := rapid.IntRange(0, opts.Steps).Draw(t, "steps")
	for range steps {
		switch a := rapid.IntRange(0, 21).Draw(t, "action"); {
		case a < 7:
			write()
		case a == 7:
			h.LW.Drop()
		case a == 8:
			toggle(&h.LW.Stall)
		case a == 9:
			if cur := h.st.Revision(); cur > rec.CompactRevision() {
				h.Compact(rapid.Int64Range(max(rec.CompactRevision()+1, 1), cur).Draw(t, "compact"))
			}
		case a == 10:
			toggle(h.gate(rapid.IntRange(0, h.handlers-1).Draw(t, "handler")))
		case a == 11:
			toggle(h.Processing)
		case a == 12:
			// With resync on, handlers resync at their own times and get
			// different same-resourceVersion updates (client-go sends them
			// only to the handlers whose resync is due, kubernetes#87957):
			// SPEC §5.4 compares their other notifications.
			if !opts.NoLateHandlers && h.handlers < 3 {
				h.AddHandlerWithResync(drawPeriod())
			}
		case a == 13 || a == 14:
			time.Sleep(rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Second, 5 * time.Second, 40 * time.Second, 3 * time.Minute}).Draw(t, "advance"))
		case a == 15:
			synctest.Wait()
		case a == 16:
			h.StoreLW.RequestBookmarks()
		case a == 17:
			if !opts.NoRestart && rapid.IntRange(0, 3).Draw(t, "restart") == 0 {
				h.Restart(periods...)
				opts.Coverage.add(CovRestart, 1)
			}
		case a == 18:
			h.Partition(writes("partitionWrites"))
		case a == 19:
			// A relist while deltas are queued (kubernetes#115620): the
			// informer stops processing, changes reach its queue, then a
			// partition makes it relist — when processing resumes, the
			// queue holds deltas older than the relist.
			h.Processing.Close()
			writes("queuedWrites")()
			synctest.Wait()
			h.Partition(writes("partitionWrites"))
			time.Sleep(rapid.SampledFrom([]time.Duration{2 * time.Second, 40 * time.Second}).Draw(t, "relistAfter"))
			synctest.Wait()
			h.Processing.Open()
		default:
			write()
		}
		h.observe()
	}
	h.Quiesce()
	return rec, cfg, h.Violations()
}

func toggle(g *Gate) {
	if g.IsClosed() {
		g.Open()
	} else {
		g.Close()
	}
}

func sameObjects(a, b map[string]k8s.Object) bool {
	if len(a) != len(b) {
		return false
	}
	for k, o := range a {
		if b[k] != o {
			return false
		}
	}
	return true
}

func describe(vs []spec.Violation) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

// Dump writes run as a trace file in the temporary directory and says
// where, for `watchspec check` and for reading.
func (r *Recorder) Dump(run *k8s.Run, what string) string {
	tr := r.TraceOf(run, "informertest", "")
	f, err := os.CreateTemp("", "informer-"+what+"-*.ndjson")
	if err != nil {
		return "(could not write the trace: " + err.Error() + ")"
	}
	defer f.Close()
	if err := traces.Write(f, tr); err != nil {
		return "(could not write the trace: " + err.Error() + ")"
	}
	return "the run is in " + filepath.Clean(f.Name()) + " (watchspec check it)"
}

// Properties returns the distinct properties of vs, sorted.
func Properties(vs []spec.Violation) []spec.Property {
	seen := map[spec.Property]bool{}
	var out []spec.Property
	for _, v := range vs {
		if !seen[v.Property] {
			seen[v.Property] = true
			out = append(out, v.Property)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
