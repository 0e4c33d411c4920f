package informertest

import (
	"context"
	"sync"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/model/k8s"
)

// Gate blocks whoever waits on it while it is closed. The zero Gate is
// open. It works inside a testing/synctest bubble (a waiter is durably
// blocked).
type Gate struct {
	mu     sync.Mutex
	closed chan struct{} // nil when open; closed (the channel) when the gate opens
}

// Close makes Wait block.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

// Open releases the waiters.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

// IsClosed reports whether Wait would block.
func (g *Gate) IsClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed != nil
}

// waitCh returns a channel closed when the gate opens, or nil if it is open.
func (g *Gate) waitCh() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Wait returns when the gate is open, or when done is closed (then false).
func (g *Gate) Wait(done <-chan struct{}) bool {
	for {
		g.mu.Lock()
		ch := g.closed
		g.mu.Unlock()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// ListWatch is a recorded ListWatch with network faults: it records every
// list and every watch event into the Recorder's current run, and can stall
// the delivery of watch events or drop every open watch.
type ListWatch struct {
	r     *Recorder
	inner informer.ListerWatcher
	// Stall holds back every watch event while closed.
	Stall Gate
	// Observe, if set, is called before each watch event is delivered and
	// after each list: the driver observes the informer there.
	Observe func()
	// OnList, if set, is called at the start of each list.
	OnList func(informer.ListOptions)

	mu     sync.Mutex
	open   map[*watcher]struct{}
	wg     sync.WaitGroup
	passes int           // events let through the closed Stall gate
	wake   chan struct{} // closed when passes are granted
}

// ListWatch wraps inner, recording into r.
func (r *Recorder) ListWatch(inner informer.ListerWatcher) *ListWatch {
	return &ListWatch{r: r, inner: inner, open: map[*watcher]struct{}{}}
}

// List implements informer.ListerWatcher.
func (lw *ListWatch) List(ctx context.Context, o informer.ListOptions) (*informer.List, error) {
	if lw.OnList != nil {
		lw.OnList(o)
	}
	call := lw.r.clock()
	before, compacted := lw.r.st.Revision(), lw.r.st.CompactRevision()
	l, err := lw.inner.List(ctx, o)
	after := lw.r.st.Revision()
	if lw.r.st.CompactRevision() != compacted {
		compacted = 0 // compacted while it was answered: which was in force is unknown
	}
	lw.r.recordList(o, l, err, before, after, compacted, call)
	if lw.Observe != nil {
		lw.Observe()
	}
	return l, err
}

// Watch implements informer.ListerWatcher.
func (lw *ListWatch) Watch(ctx context.Context, o informer.WatchOptions) (informer.Watcher, error) {
	call := lw.r.clock()
	before, compacted := lw.r.st.Revision(), lw.r.st.CompactRevision()
	inner, err := lw.inner.Watch(ctx, o)
	after := lw.r.st.Revision()
	if lw.r.st.CompactRevision() != compacted {
		compacted = 0 // compacted while it was answered: which was in force is unknown
	}
	if err != nil {
		if status(err) != nil {
			lw.r.watchStarted(o, before, after, compacted, call, err)
		}
		return nil, err
	}
	id, run := lw.r.watchStarted(o, before, after, compacted, call, nil)
	w := &watcher{lw: lw, inner: inner, id: id, run: run, ch: make(chan informer.Event), stop: make(chan struct{})}
	lw.mu.Lock()
	lw.open[w] = struct{}{}
	lw.mu.Unlock()
	lw.wg.Add(1)
	go w.forward()
	return w, nil
}

// Pass lets n more watch events through while Stall is closed.
func (lw *ListWatch) Pass(n int) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.passes += n
	if lw.wake != nil {
		close(lw.wake)
		lw.wake = nil
	}
}

// admit waits until a watch event may be delivered: Stall is open, or a
// pass is left; false if stop closes first.
func (lw *ListWatch) admit(stop <-chan struct{}) bool {
	for {
		stalled := lw.Stall.waitCh()
		if stalled == nil {
			return true
		}
		lw.mu.Lock()
		if lw.passes > 0 {
			lw.passes--
			lw.mu.Unlock()
			return true
		}
		if lw.wake == nil {
			lw.wake = make(chan struct{})
		}
		wake := lw.wake
		lw.mu.Unlock()
		select {
		case <-stalled:
		case <-wake:
		case <-stop:
			return false
		}
	}
}

// Drop ends every open watch as a broken connection would: the informer
// sees its result channel close.
func (lw *ListWatch) Drop() {
	lw.mu.Lock()
	ws := make([]*watcher, 0, len(lw.open))
	for w := range lw.open {
		ws = append(ws, w)
	}
	lw.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// Open returns the number of open watches.
func (lw *ListWatch) Open() int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return len(lw.open)
}

type watcher struct {
	lw       *ListWatch
	inner    informer.Watcher
	id       int
	run      *k8s.Run
	ch       chan informer.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *watcher) ResultChan() <-chan informer.Event { return w.ch }

func (w *watcher) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

func forwardDone(w *watcher) { w.lw.wg.Done() }

func (w *watcher) forward() {
	defer forwardDone(w)
	defer func() {
		w.inner.Stop()
		w.lw.r.watchEnded(w.run, w.id)
		w.lw.mu.Lock()
		delete(w.lw.open, w)
		w.lw.mu.Unlock()
		close(w.ch)
	}()
	for {
		var ev informer.Event
		var ok bool
		select {
		case ev, ok = <-w.inner.ResultChan():
			if !ok {
				return
			}
		case <-w.stop:
			return
		}
		if !w.lw.admit(w.stop) {
			return
		}
		select {
		case <-w.stop: // dropped while held back: the event is lost with the connection
			return
		default:
		}
		if w.lw.Observe != nil {
			w.lw.Observe()
		}
		w.lw.r.watchEvent(w.run, w.id, ev)
		select {
		case w.ch <- ev:
		case <-w.stop:
			return
		}
	}
}
