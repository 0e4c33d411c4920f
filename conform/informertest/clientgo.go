package informertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
	harness "github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
)

// ClientGo is client-go's SharedIndexInformer (k8s.io/client-go/tools/cache,
// with its defaults: WatchListClient, InOrderInformers with the atomic
// RealFIFO) as a [Subject], over a cache.ListWatch that serves the
// harness's store as unstructured ConfigMaps.
type ClientGo struct {
	// NewInformer, when set, builds the informer instead of
	// cache.NewSharedIndexInformerWithOptions: your own setup (a transform,
	// indexers, options) over the given ListerWatcher.
	NewInformer func(lw cache.ListerWatcher, example runtime.Object, opts cache.SharedIndexInformerOptions) cache.SharedIndexInformer
	// OverHTTP serves the source over HTTP as the Kubernetes REST API
	// (adversary/listwatch.NewHandler, on in-memory connections that work
	// under testing/synctest) and gives the informer a ListerWatcher of
	// client-go's dynamic client, from a rest.Config pointed at it: then
	// client-go's REST client, watch stream decoding and status handling
	// (ERROR 410 events, the end bookmark of a WatchList through JSON) are
	// under test too, not only the informer above them.
	OverHTTP bool
	// Handler, when set, serves the source over HTTP for OverHTTP instead
	// of listwatch.NewHandler(src, GVR, ""): an adversary's HandlerFor,
	// for instance, which adds the adversary's wire choices.
	Handler func(src informer.ListerWatcher) http.Handler
}

// Known implements the harness's known-bug hook for client-go: a §5.5
// HasSyncedDelivered violation of the shape of docs/FINDINGS.md informer-2
// — a handler's HasSynced turned true between two of its initial-list
// adds, a race in client-go v0.37.2's synctrack.SingleFileTracker that the
// scenarios hit about one run in a hundred on a loaded machine — is logged
// by [TestInformer] and [TestInformerUnderAdversary] instead of failing
// the test. Any other violation fails; the rule is not relaxed (`watchspec
// check` still fails such a trace, as it does the corpus's recording).
func (ClientGo) Known(run k8s.Run, v spec.Violation) string {
	if harness.ClientGoSyncTrackerRace(run, v) {
		return "client-go's HasSynced race (docs/FINDINGS.md informer-2)"
	}
	return ""
}

// ClientGoListerWatcher serves lw — the reference store's list/watch, or
// the informer adversary over it (adversary/listwatch) — to client-go, as
// a cache.ListWatch of unstructured ConfigMaps (data.value holds the
// stored value): build a client-go informer or controller of your own
// over it.
func ClientGoListerWatcher(lw informer.ListerWatcher) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := lw.List(ctx, informer.ListOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch),
				Limit: o.Limit, Continue: o.Continue})
			if err != nil {
				return nil, apiError(err)
			}
			out := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMapList",
				"metadata": map[string]any{"resourceVersion": strconv.FormatInt(l.ResourceVersion, 10), "continue": l.Continue}}}
			for _, o := range l.Items {
				out.Items = append(out.Items, *toUnstructured(o))
			}
			return out, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wo := informer.WatchOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch),
				SendInitialEvents: o.SendInitialEvents, AllowWatchBookmarks: o.AllowWatchBookmarks}
			if o.TimeoutSeconds != nil {
				wo.TimeoutSeconds = *o.TimeoutSeconds
			}
			w, err := lw.Watch(ctx, wo)
			if err != nil {
				return nil, apiError(err)
			}
			cw := &clientGoWatch{in: w, ch: make(chan watch.Event), stop: make(chan struct{})}
			go cw.forward()
			return cw, nil
		},
	}
}

// New builds the informer over lw; the harness runs it.
func (c ClientGo) New(lw informer.ListerWatcher, cfg Config) Informer {
	clw, closeFn := ClientGoListerWatcher(lw), func() {}
	if c.OverHTTP {
		clw, closeFn = overHTTP(lw, c.Handler)
	}
	var src cache.ListerWatcher = clw
	if !cfg.WatchList {
		src = noWatchList{clw}
	}
	newInformer := c.NewInformer
	if newInformer == nil {
		newInformer = cache.NewSharedIndexInformerWithOptions
	}
	inf := newInformer(src, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
		ResyncPeriod: cfg.ResyncPeriod,
		Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	return &clientGoInformer{inf: inf, onResync: cfg.OnResync, close: closeFn}
}

// overHTTP serves lw over HTTP in memory (with handler, or NewHandler) and returns a cache.ListWatch of
// client-go's dynamic client pointed at it, and the function that closes
// the client's connections and the server.
func overHTTP(lw informer.ListerWatcher, handler func(informer.ListerWatcher) http.Handler) (*cache.ListWatch, func()) {
	var hd http.Handler
	if handler != nil {
		hd = handler(lw)
	} else {
		hd = listwatch.NewHandler(lw, GVR, "")
	}
	srv := harness.ServeInMemory(hd)
	cfg := &rest.Config{Host: srv.URL(), Dial: srv.DialContext, QPS: -1} // no client-side rate limit: the tests' time is fake
	failed := func(err error) (*cache.ListWatch, func()) {
		err = fmt.Errorf("informertest: a client of the in-memory server: %w", err)
		return &cache.ListWatch{
			ListWithContextFunc:  func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, err },
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return nil, err },
		}, srv.Close
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return failed(err)
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return failed(err)
	}
	res := dc.Resource(schema.GroupVersionResource{Group: GVR.Group, Version: GVR.Version, Resource: GVR.Resource})
	return &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return res.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return res.Watch(ctx, o)
			},
		}, func() {
			hc.CloseIdleConnections()
			srv.Close()
		}
}

// noWatchList declares that the source cannot serve a WatchList, so that
// the Reflector lists and watches (client-go's
// watchlist.DoesClientNotSupportWatchListSemantics).
type noWatchList struct{ *cache.ListWatch }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// apiError turns the store ListWatch's status into client-go's.
func apiError(err error) error {
	var s *informer.StatusError
	if !errors.As(err, &s) {
		return err
	}
	switch {
	case informer.IsExpired(err):
		return apierrors.NewResourceExpired(s.Message)
	case informer.IsTooLargeResourceVersion(err):
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(s.Code), Reason: metav1.StatusReasonTimeout,
			Message: s.Message, Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}}}}
	case informer.IsBadRequest(err):
		return apierrors.NewBadRequest(s.Message)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(s.Code), Reason: metav1.StatusReason(s.Reason), Message: s.Message}}
}

func toUnstructured(o informer.Object) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": o.Name, "namespace": o.Namespace,
			"resourceVersion": strconv.FormatInt(o.ResourceVersion, 10), "uid": strconv.FormatInt(o.UID, 10)},
		"data": map[string]any{"value": o.Value}}}
}

// fromUnstructured is the model's view of an object a handler got.
func fromUnstructured(obj any) *k8s.Object {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	value, _, _ := unstructured.NestedString(u.Object, "data", "value")
	rv, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
	uid, _ := strconv.ParseInt(string(u.GetUID()), 10, 64)
	return &k8s.Object{Key: GVR.Key(u.GetNamespace(), u.GetName()), Value: value, ResourceVersion: rv, UID: uid}
}

// clientGoWatch serves the store ListWatch's watch as a watch.Interface.
type clientGoWatch struct {
	in   informer.Watcher
	ch   chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *clientGoWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *clientGoWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

func (w *clientGoWatch) forward() {
	defer close(w.ch)
	for ev := range w.in.ResultChan() {
		var e watch.Event
		switch ev.Type {
		case informer.Error:
			st := &metav1.Status{Status: metav1.StatusFailure, Code: int32(informer.CodeGone), Reason: metav1.StatusReasonExpired}
			if ev.Err != nil {
				st.Code, st.Reason, st.Message = int32(ev.Err.Code), metav1.StatusReason(ev.Err.Reason), ev.Err.Message
			}
			e = watch.Event{Type: watch.Error, Object: st}
		case informer.Bookmark:
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"resourceVersion": strconv.FormatInt(ev.Object.ResourceVersion, 10)}}}
			if ev.InitialEventsEnd {
				u.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
			}
			e = watch.Event{Type: watch.Bookmark, Object: u}
		default:
			e = watch.Event{Type: watch.EventType(ev.Type), Object: toUnstructured(ev.Object)}
		}
		select {
		case w.ch <- e:
		case <-w.stop:
			return
		}
	}
}

type clientGoInformer struct {
	inf      cache.SharedIndexInformer
	onResync func()
	close    func() // after Run: the HTTP client and server, if any
}

func (c *clientGoInformer) AddHandler(sink *Sink) (Registration, error) {
	h := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			sink.Handle(k8s.Notification{Type: k8s.OnAdd, New: fromUnstructured(obj), InInitialList: initial})
		},
		UpdateFunc: func(old, new any) {
			sink.Handle(k8s.Notification{Type: k8s.OnUpdate, Old: fromUnstructured(old), New: fromUnstructured(new)})
		},
		DeleteFunc: func(obj any) {
			n := k8s.Notification{Type: k8s.OnDelete, Old: fromUnstructured(obj)}
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				n.Old, n.Tombstone = fromUnstructured(d.Obj), true
			}
			sink.Handle(n)
		},
	}
	if sink.Resync != nil {
		return c.inf.AddEventHandlerWithResyncPeriod(h, *sink.Resync)
	}
	return c.inf.AddEventHandler(h)
}

// Run runs the informer with a contextual logger that marks each periodic
// resync: client-go's Reflector logs "Forcing resync" (V(4), reflector.go
// startResync) just before it queues the resync's deltas, and says it
// nowhere else; SPEC §5.7 needs the mark.
func (c *clientGoInformer) Run(ctx context.Context) {
	defer c.close()
	c.inf.RunWithContext(klog.NewContext(ctx, logr.New(resyncMarks{c.onResync})))
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
func (resyncMarks) Error(error, string, ...any)             {}
func (r resyncMarks) WithValues(...any) logr.LogSink        { return r }
func (r resyncMarks) WithName(string) logr.LogSink          { return r }
func (c *clientGoInformer) HasSynced() bool                 { return c.inf.HasSynced() }
func (c *clientGoInformer) LastSyncResourceVersion() string { return c.inf.LastSyncResourceVersion() }

func (c *clientGoInformer) Cache() []k8s.Object {
	var out []k8s.Object
	for _, o := range c.inf.GetStore().List() {
		if x := fromUnstructured(o); x != nil {
			out = append(out, *x)
		}
	}
	return out
}
