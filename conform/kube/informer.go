package kube

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/model/k8s"
)

// informer is client-go's SharedIndexInformer over the run's resource, its
// ListWatch through the recorded client: its lists and watches, every
// handler call, HasSynced, its last-synced resourceVersion, its resyncs
// and its final cache are recorded (docs/SPEC.md §5).
//
// Handler 0 is added before the start, with the informer's resync period;
// handler 1 is added late ([informer.addLateHandler]), with no resync:
// client-go sends a resync's same-resourceVersion updates only to the
// handlers whose resync is due (§5.4, §5.7).
type informer struct {
	c      *client
	inf    cache.SharedIndexInformer
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	regs     []cache.ResourceEventHandlerRegistration
	views    []map[string]rawObject
	synced   map[int]bool
	infSync  bool
	lastRV   string
	watchers []*recordedWatch
}

func newInformer(c *client, example *unstructured.Unstructured, resync time.Duration) *informer {
	in := &informer{c: c, synced: map[int]bool{}}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, st, inconsistent, err := c.list(ctx, o)
			in.observe()
			switch {
			case err != nil:
				return nil, err
			case st != nil:
				return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(st.Code),
					Reason: metav1.StatusReason(st.Reason), Message: st.Message, ListMeta: metav1.ListMeta{Continue: inconsistent}}}
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, st, err := c.watch(ctx, o, in.observe)
			switch {
			case err != nil:
				return nil, err
			case st != nil:
				return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(st.Code),
					Reason: metav1.StatusReason(st.Reason), Message: st.Message}}
			}
			in.mu.Lock()
			in.watchers = append(in.watchers, w)
			in.mu.Unlock()
			return w, nil
		},
	}
	in.inf = cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{ResyncPeriod: resync})
	return in
}

// handler returns the event handler of handler h.
func (in *informer) handler(h int) cache.ResourceEventHandler {
	note := func(n k8s.Notification, old, new any) {
		in.observe()
		var o, nw *rawObject
		if u, ok := old.(*unstructured.Unstructured); ok {
			x := in.c.raw(u)
			o = &x
		}
		if u, ok := new.(*unstructured.Unstructured); ok {
			x := in.c.raw(u)
			nw = &x
		}
		in.mu.Lock()
		view := in.views[h]
		if n.Type == k8s.OnDelete && o != nil {
			delete(view, o.key)
		} else if nw != nil {
			view[nw.key] = *nw
		}
		in.mu.Unlock()
		in.c.rec.notify(n, o, nw)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			note(k8s.Notification{Handler: h, Type: k8s.OnAdd, InInitialList: initial}, nil, obj)
		},
		UpdateFunc: func(old, new any) { note(k8s.Notification{Handler: h, Type: k8s.OnUpdate}, old, new) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				note(k8s.Notification{Handler: h, Type: k8s.OnDelete, Tombstone: true}, d.Obj, nil)
				return
			}
			note(k8s.Notification{Handler: h, Type: k8s.OnDelete}, obj, nil)
		},
	}
}

// addHandler adds the next handler, with resync period resync (−1: the
// informer's).
func (in *informer) addHandler(resync time.Duration) error {
	in.mu.Lock()
	h := len(in.views)
	in.views = append(in.views, map[string]rawObject{})
	in.mu.Unlock()
	in.c.rec.informer(k8s.Entry{HandlerAdded: &h})
	var reg cache.ResourceEventHandlerRegistration
	var err error
	if resync < 0 {
		reg, err = in.inf.AddEventHandler(in.handler(h))
	} else {
		reg, err = in.inf.AddEventHandlerWithResyncPeriod(in.handler(h), resync)
	}
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.regs = append(in.regs, reg)
	in.mu.Unlock()
	in.observe()
	return nil
}

// start runs the informer; head is the revision committed when it starts.
func (in *informer) start(ctx context.Context, head int64) {
	in.c.rec.informer(k8s.Entry{Start: &k8s.StartEntry{Revision: head}})
	rctx, cancel := context.WithCancel(ctx)
	in.cancel, in.done = cancel, make(chan struct{})
	go func() {
		defer close(in.done)
		// client-go's Reflector logs "Forcing resync" (V(4), reflector.go
		// startResync) just before it queues a resync's deltas.
		in.inf.RunWithContext(klog.NewContext(rctx, logr.New(resyncMarks{func() { in.c.rec.informer(k8s.Entry{Resync: true}) }})))
	}()
}

// observe records each handler's HasSynced the first time it is true, and
// the informer's last-synced resourceVersion when it changed.
func (in *informer) observe() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for h, reg := range in.regs {
		if !in.synced[h] && reg.HasSynced() {
			in.synced[h] = true
			h := h
			in.c.rec.informer(k8s.Entry{HasSynced: &h})
		}
	}
	if !in.infSync && in.inf.HasSynced() {
		in.infSync = true
		h := -1
		in.c.rec.informer(k8s.Entry{HasSynced: &h})
	}
	if rv := in.inf.LastSyncResourceVersion(); rv != in.lastRV {
		in.lastRV = rv
		if n, ok := k8s.ParseRV(rv); ok && n > 0 {
			in.c.rec.informer(k8s.Entry{SyncedRV: &n})
		}
	}
}

// hasSynced reports whether the informer and every handler synced.
func (in *informer) hasSynced() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.inf.HasSynced() {
		return false
	}
	for _, reg := range in.regs {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

// agrees reports whether the informer synced and its cache and every
// handler's view hold exactly want.
func (in *informer) agrees(want map[string]rawObject) bool {
	if !in.hasSynced() {
		return false
	}
	in.mu.Lock()
	for _, view := range in.views {
		if len(view) != len(want) {
			in.mu.Unlock()
			return false
		}
		for k, o := range want {
			if view[k] != o {
				in.mu.Unlock()
				return false
			}
		}
	}
	in.mu.Unlock()
	store := in.inf.GetStore().List()
	if len(store) != len(want) {
		return false
	}
	for _, obj := range store {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return false
		}
		if o := in.c.raw(u); want[o.key] != o {
			return false
		}
	}
	return true
}

// stop stops the informer, waits for its watches, and records its cache.
func (in *informer) stop() {
	in.cancel()
	<-in.done
	in.mu.Lock()
	ws := in.watchers
	in.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
	var objs []rawObject
	for _, obj := range in.inf.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			objs = append(objs, in.c.raw(u))
		}
	}
	in.c.rec.setCache(sortedObjects(objs))
}

// resyncMarks is a logr.LogSink that calls mark on client-go's "Forcing
// resync" and discards everything else.
type resyncMarks struct{ mark func() }

func (resyncMarks) Init(logr.RuntimeInfo)  {}
func (resyncMarks) Enabled(level int) bool { return level <= 4 }
func (r resyncMarks) Info(_ int, msg string, _ ...any) {
	if msg == "Forcing resync" && r.mark != nil {
		r.mark()
	}
}
func (resyncMarks) Error(error, string, ...any)      {}
func (r resyncMarks) WithValues(...any) logr.LogSink { return r }
func (r resyncMarks) WithName(string) logr.LogSink   { return r }
