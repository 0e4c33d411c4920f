package informer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ResourceEventHandler is told of every change of the informer's cache
// (client-go's ResourceEventHandler, typed).
//
//   - OnAdd: an object entered the cache; isInInitialList marks the adds
//     of the informer's first list, and of the cache's contents given to a
//     handler added after the start.
//   - OnUpdate: an object in the cache changed — or a resync or a relist
//     delivered it again, possibly unchanged (same resourceVersion). A
//     delete and re-create of the name (a new UID) during a disconnection
//     may arrive as one OnUpdate.
//   - OnDelete: an object left the cache; obj is its last known state —
//     from a watch, at the revision of the deletion; with finalStateUnknown
//     the deletion was inferred by a relist and obj is the last state the
//     informer knew, possibly stale (client-go's DeletedFinalStateUnknown).
//
// A handler's calls are sequential and come after the cache was updated
// (more updates may already have happened); per object they follow the
// object's history, though states may be skipped. Handlers must not modify
// the objects.
type ResourceEventHandler interface {
	OnAdd(obj Object, isInInitialList bool)
	OnUpdate(oldObj, newObj Object)
	OnDelete(obj Object, finalStateUnknown bool)
}

// HandlerFuncs adapts functions to a [ResourceEventHandler]; nil ones are
// skipped.
type HandlerFuncs struct {
	AddFunc    func(obj Object, isInInitialList bool)
	UpdateFunc func(oldObj, newObj Object)
	DeleteFunc func(obj Object, finalStateUnknown bool)
}

// OnAdd implements [ResourceEventHandler].
func (h HandlerFuncs) OnAdd(obj Object, initial bool) {
	if h.AddFunc != nil {
		h.AddFunc(obj, initial)
	}
}

// OnUpdate implements [ResourceEventHandler].
func (h HandlerFuncs) OnUpdate(old, new Object) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(old, new)
	}
}

// OnDelete implements [ResourceEventHandler].
func (h HandlerFuncs) OnDelete(obj Object, unknown bool) {
	if h.DeleteFunc != nil {
		h.DeleteFunc(obj, unknown)
	}
}

// Options configure a [SharedInformer].
type Options struct {
	// ResyncPeriod is the default resync period of handlers and the period
	// at which the informer checks whether one is due (0: no resync).
	ResyncPeriod time.Duration
	// Indexers of the cache.
	Indexers Indexers
	// KeyFunc keys objects in the queue and the cache (MetaNamespaceKey).
	KeyFunc KeyFunc
	// DisableWatchList makes the Reflector list instead of streaming the
	// state with a WatchList (client-go: WatchListClient=false, or a
	// ListerWatcher that declares IsWatchListSemanticsUnSupported).
	DisableWatchList bool
	// PageSize, Backoff, Clock and MinWatchTimeout are the Reflector's
	// (see [ReflectorOptions]).
	PageSize        int64
	Backoff         Backoff
	Clock           Clock
	MinWatchTimeout time.Duration
	// ErrorHandler is told of list and watch failures and of errors
	// applying a change to the cache (an index function's); default:
	// nothing.
	ErrorHandler func(error)
	// OnResync, if set, is called when a periodic resync starts, before
	// any of its notifications: for metrics and tests.
	OnResync func()
}

// minimumResyncPeriod is the shortest resync period a handler may ask for.
const minimumResyncPeriod = time.Second

// SharedInformer is client-go's sharedIndexInformer
// (tools/cache/shared_informer.go): one Reflector feeding a DeltaFIFO, one
// goroutine popping it into an Indexer, the cache, and telling every
// registered handler through the handler's own unbounded buffer and
// goroutine.
//
// The contract, mirrored from client-go (and checked by watchspec's model,
// docs/SPEC.md §5):
//
//   - Per object, the states in the cache and those a handler sees are a
//     subsequence of the object's real states, in order; there is no order
//     across objects (kubernetes#77636).
//   - Eventually consistent: when changes stop and the server is
//     reachable, the cache and every handler's view equal the server's
//     state. A relist delivers what the watch missed; an object it does
//     not list is deleted with a tombstone (kubernetes#115620).
//   - A handler registered after the start first gets the cache's contents
//     as initial-list OnAdds, then every later notification — taken under
//     the lock that blocks delta processing, so nothing is missed or
//     doubled (kubernetes#59822).
//   - A registration's HasSynced: the informer synced (its first list's
//     deltas are processed) and every initial-list notification reached
//     the handler (kubernetes#113985, issue #113763).
//   - An update that does not change the resourceVersion (a resync's, or a
//     relist's of an unchanged object) goes only to the handlers whose
//     resync is due (kubernetes#87957); with no resync period, that is
//     every handler.
//   - The handlers' buffers are unbounded: a stalled handler delays only
//     itself, and its backlog grows without limit.
type SharedInformer struct {
	lw      ListerWatcher
	opts    Options
	indexer *Indexer
	proc    *processor

	// blockDeltas is held while deltas are applied and distributed, and
	// while a late handler is given the cache's contents.
	blockDeltas sync.Mutex

	startedMu         sync.Mutex
	started, stopped  bool
	resyncCheckPeriod time.Duration
	fifo              atomic.Pointer[DeltaFIFO]
	reflector         atomic.Pointer[Reflector]

	hooks *testHooks
}

// NewSharedInformer returns an informer over lw; run it with Run.
func NewSharedInformer(lw ListerWatcher, opts Options) *SharedInformer {
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.KeyFunc == nil {
		opts.KeyFunc = MetaNamespaceKey
	}
	if opts.ErrorHandler == nil {
		opts.ErrorHandler = func(error) {}
	}
	s := &SharedInformer{lw: lw, opts: opts, indexer: NewIndexer(opts.KeyFunc, opts.Indexers),
		resyncCheckPeriod: opts.ResyncPeriod}
	s.proc = &processor{listeners: map[*listener]bool{}, clock: opts.Clock}
	return s
}

// Indexer returns the cache (read it; do not write it).
func (s *SharedInformer) Indexer() *Indexer { return s.indexer }

// AddIndexers adds index functions to the cache.
func (s *SharedInformer) AddIndexers(ix Indexers) error {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.stopped {
		return errors.New("informer: the informer has stopped")
	}
	return s.indexer.AddIndexers(ix)
}

// HasSynced reports whether the first list's deltas have been processed.
func (s *SharedInformer) HasSynced() bool {
	f := s.fifo.Load()
	return f != nil && f.HasSynced()
}

// LastSyncResourceVersion returns the Reflector's last synced
// resourceVersion ("" before the start).
func (s *SharedInformer) LastSyncResourceVersion() string {
	r := s.reflector.Load()
	if r == nil {
		return ""
	}
	return r.LastSyncResourceVersion()
}

// Registration is a registered handler.
type Registration struct {
	s *SharedInformer
	l *listener
}

// HasSynced reports whether the informer has synced and every
// initial-list notification reached the handler.
func (r *Registration) HasSynced() bool {
	if !r.s.HasSynced() {
		return false
	}
	return r.l.initialDelivered()
}

// AddEventHandler registers h with the informer's resync period.
func (s *SharedInformer) AddEventHandler(h ResourceEventHandler) (*Registration, error) {
	return s.AddEventHandlerWithResyncPeriod(h, s.opts.ResyncPeriod)
}

// AddEventHandlerWithResyncPeriod registers h with its own resync period
// (at least one second; rounded up to the informer's check period once
// started).
func (s *SharedInformer) AddEventHandlerWithResyncPeriod(h ResourceEventHandler, period time.Duration) (*Registration, error) {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.stopped {
		return nil, errors.New("informer: handler not added: the informer has stopped")
	}
	if period > 0 {
		period = max(period, minimumResyncPeriod)
		if period < s.resyncCheckPeriod {
			if s.started {
				period = s.resyncCheckPeriod
			} else {
				s.resyncCheckPeriod = period
			}
		}
	}
	resync := period
	if s.resyncCheckPeriod == 0 {
		resync = 0 // this informer does not resync
	}
	l := newListener(h, resync, s.opts.Clock.Now())
	reg := &Registration{s: s, l: l}
	if !s.started {
		s.proc.add(l)
		return reg, nil
	}
	// Started: give the handler the cache's contents and then everything
	// after, with no delta processed in between.
	s.blockDeltas.Lock()
	defer s.blockDeltas.Unlock()
	s.proc.add(l)
	for _, o := range s.indexer.List() {
		l.add(notification{kind: notifyAdd, new: o, initial: true})
	}
	return reg, nil
}

// RemoveEventHandler unregisters a handler; its pending notifications are
// dropped.
func (s *SharedInformer) RemoveEventHandler(r *Registration) error {
	s.blockDeltas.Lock()
	defer s.blockDeltas.Unlock()
	if !s.proc.remove(r.l) {
		return errors.New("informer: handler not registered")
	}
	return nil
}

// Run runs the informer until ctx is done, then stops it: the Reflector,
// the queue and every handler's goroutine (their pending notifications
// are dropped). An informer runs once.
func (s *SharedInformer) Run(ctx context.Context) {
	s.startedMu.Lock()
	if s.started || s.stopped {
		s.startedMu.Unlock()
		return
	}
	fifo := NewDeltaFIFO(s.opts.KeyFunc, s.indexer)
	if s.hooks != nil {
		fifo.noTombstones = s.hooks.is(mutantNoTombstones)
		fifo.reversePop = s.hooks.is(mutantReorderDeltas)
	}
	reflector := NewReflector(s.lw, fifo, ReflectorOptions{
		ResyncPeriod: s.resyncCheckPeriod, ShouldResync: s.proc.shouldResync, OnResync: s.opts.OnResync,
		UseWatchList: !s.opts.DisableWatchList, PageSize: s.opts.PageSize, Backoff: s.opts.Backoff,
		Clock: s.opts.Clock, MinWatchTimeout: s.opts.MinWatchTimeout, ErrorHandler: s.opts.ErrorHandler,
	})
	reflector.hooks = s.hooks
	s.fifo.Store(fifo)
	s.reflector.Store(reflector)
	s.started = true
	s.proc.start()
	s.startedMu.Unlock()

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		reflector.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		fifo.Close()
	}()
	go func() {
		defer wg.Done()
		s.processLoop(fifo)
	}()
	wg.Wait()

	s.startedMu.Lock()
	s.stopped = true
	s.startedMu.Unlock()
	s.proc.stop()
}

// processLoop pops the queue into the cache and the handlers.
func (s *SharedInformer) processLoop(fifo *DeltaFIFO) {
	for {
		if s.hooks != nil && s.hooks.beforePop != nil {
			fifo.waitForItem()
			s.hooks.beforePop()
		}
		_, err := fifo.Pop(s.handleDeltas)
		if errors.Is(err, ErrFIFOClosed) {
			return
		}
		if err != nil {
			s.opts.ErrorHandler(err)
		}
	}
}

// handleDeltas applies one key's deltas to the cache and tells the
// handlers (client-go's processDeltas): the cache is updated before the
// handlers are told.
func (s *SharedInformer) handleDeltas(ds Deltas, isInInitialList bool) error {
	s.blockDeltas.Lock()
	defer s.blockDeltas.Unlock()
	for _, d := range ds {
		switch d.Type {
		case DeltaSync, DeltaReplaced, DeltaAdded, DeltaUpdated:
			if old, ok := s.indexer.Get(d.Object); ok {
				if err := s.indexer.Update(d.Object); err != nil {
					return err
				}
				// An unchanged resourceVersion is a resync: only to the
				// handlers whose resync is due (kubernetes#87957).
				s.proc.distribute(notification{kind: notifyUpdate, old: old, new: d.Object}, old.ResourceVersion == d.Object.ResourceVersion)
			} else {
				if err := s.indexer.Add(d.Object); err != nil {
					return err
				}
				s.proc.distribute(notification{kind: notifyAdd, new: d.Object, initial: isInInitialList}, false)
			}
		case DeltaDeleted:
			if err := s.indexer.Delete(d.Object); err != nil {
				return err
			}
			s.proc.distribute(notification{kind: notifyDelete, old: d.Object, unknown: d.FinalStateUnknown}, false)
		}
	}
	return nil
}

type notifyKind uint8

const (
	notifyAdd notifyKind = iota
	notifyUpdate
	notifyDelete
)

type notification struct {
	kind     notifyKind
	old, new Object
	initial  bool // an initial-list add
	unknown  bool // a tombstone deletion
}

// processor distributes notifications to the listeners.
type processor struct {
	mu        sync.RWMutex
	listeners map[*listener]bool // → resyncing now
	started   bool
	clock     Clock
	wg        sync.WaitGroup
}

func (p *processor) add(l *listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listeners[l] = true
	if p.started {
		p.wg.Add(1)
		go l.run(&p.wg)
	}
}

func (p *processor) remove(l *listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.listeners[l]; !ok {
		return false
	}
	delete(p.listeners, l)
	l.close()
	return true
}

func (p *processor) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
	for l := range p.listeners {
		p.wg.Add(1)
		go l.run(&p.wg)
	}
}

func (p *processor) stop() {
	p.mu.Lock()
	for l := range p.listeners {
		l.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// distribute hands n to every listener, or, for a resync, to those whose
// resync is due.
func (p *processor) distribute(n notification, sync bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for l, resyncing := range p.listeners {
		if !sync || resyncing {
			l.add(n)
		}
	}
}

// shouldResync marks the listeners whose resync is due and reports whether
// any is.
func (p *processor) shouldResync() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	any := false
	for l := range p.listeners {
		due := l.resyncPeriod > 0 && !now.Before(l.nextResync)
		p.listeners[l] = due
		if due {
			any = true
			l.nextResync = now.Add(l.resyncPeriod)
		}
	}
	return any
}

// listener is one handler with its unbounded buffer and goroutine.
type listener struct {
	handler      ResourceEventHandler
	resyncPeriod time.Duration
	nextResync   time.Time // guarded by processor.mu

	mu      sync.Mutex
	cond    *sync.Cond
	buf     []notification
	head    int
	closed  bool
	pending int // initial-list adds not yet delivered
}

func newListener(h ResourceEventHandler, resync time.Duration, now time.Time) *listener {
	l := &listener{handler: h, resyncPeriod: resync, nextResync: now.Add(resync)}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *listener) add(n notification) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if n.initial {
		l.pending++
	}
	l.buf = append(l.buf, n)
	l.cond.Signal()
}

func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *listener) initialDelivered() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending == 0
}

func (l *listener) run(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		l.mu.Lock()
		for l.head == len(l.buf) && !l.closed {
			l.cond.Wait()
		}
		if l.closed {
			l.mu.Unlock()
			return
		}
		n := l.buf[l.head]
		l.buf[l.head] = notification{}
		l.head++
		if l.head == len(l.buf) {
			l.buf, l.head = l.buf[:0], 0
		} else if l.head >= 1024 && l.head*2 >= len(l.buf) {
			l.buf, l.head = append([]notification(nil), l.buf[l.head:]...), 0
		}
		l.mu.Unlock()
		switch n.kind {
		case notifyAdd:
			l.handler.OnAdd(n.new, n.initial)
		case notifyUpdate:
			l.handler.OnUpdate(n.old, n.new)
		case notifyDelete:
			l.handler.OnDelete(n.old, n.unknown)
		}
		if n.initial {
			l.mu.Lock()
			l.pending--
			l.mu.Unlock()
		}
	}
}
