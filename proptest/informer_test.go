package proptest

import (
	"context"
	"errors"
	"flag"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/traces"
)

// SPEC §5 (every rule), held against the real client-go: its
// SharedIndexInformer (k8s.io/client-go v0.37.2, tools/cache, with its
// defaults: WatchListClient, InOrderInformers with the atomic RealFIFO),
// over a cache.ListWatch backed by the reference store, under random writes
// and faults. Every recorded run passes k8s.CheckInformer.
//
// Periodic resync is on in a quarter of the runs, each handler with its own
// period (AddEventHandlerWithResyncPeriod: the informer's, none, or
// another), handlers added late among them; client-go marks each resync
// it starts in its log ("Forcing resync"), which the adapter records.
//
// Left out, and why: pausing the informer's processing (client-go has no
// hook; its RealFIFO is driven by the slow-handler and partition faults
// only); paged lists (the SharedIndexInformer pages by 500, and the
// scenarios hold six objects).
func TestClientGoInformerContract(t *testing.T) {
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	cov := &informertest.Coverage{}
	rapid.Check(t, func(t *rapid.T) {
		informertest.Check(t, clientGo{}, informertest.Options{Coverage: cov})
	})
	t.Logf("coverage:\n%s", cov)
	if missing := cov.Missing(informertest.CovRelist, informertest.CovExpired, informertest.CovTombstone, informertest.CovLateHandler,
		informertest.CovWatchList, informertest.CovBookmark, informertest.CovSameRV, informertest.CovRestart,
		informertest.CovStalledHandler, informertest.CovResync, informertest.CovResyncLateHandler); len(missing) > 0 && !t.Failed() {
		t.Errorf("the scenarios never reached: %v", missing)
	}
}

// clientGo is client-go's SharedIndexInformer as an informertest.Subject.
type clientGo struct{}

func (clientGo) New(lw informer.ListerWatcher, cfg informertest.Config) informertest.Informer {
	clw := &cache.ListWatch{
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
	var src cache.ListerWatcher = clw
	if !cfg.WatchList {
		src = noWatchList{clw}
	}
	inf := cache.NewSharedIndexInformerWithOptions(src, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
		ResyncPeriod: cfg.ResyncPeriod,
		Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	return &clientGoInformer{inf: inf, onResync: cfg.OnResync}
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
	return &k8s.Object{Key: informertest.GVR.Key(u.GetNamespace(), u.GetName()), Value: value, ResourceVersion: rv, UID: uid}
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
}

func (c *clientGoInformer) AddHandler(sink *informertest.Sink) (informertest.Registration, error) {
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

var recordCorpus = flag.Bool("record-corpus", false, "write the recorded client-go informer trace to traces/corpus (review the diff)")

// TestClientGoCorpusRun records the corpus scenario (internal/informertest)
// with client-go's SharedIndexInformer and its defaults (WatchList on) and
// demands that it passes the informer contract with no allowance (SPEC §5).
// With -record-corpus it writes traces/corpus/informer-client-go-0.37.2.ndjson.
func TestClientGoCorpusRun(t *testing.T) {
	klog.SetLogger(logr.Discard())
	synctest.Test(t, func(t *testing.T) {
		h := informertest.NewHarness(t, clientGo{}, informertest.Config{WatchList: true}, watchhub.Options{ProgressInterval: -1})
		defer h.Close()
		informertest.CorpusScenario(h)
		tr, vs := informertest.CorpusTrace(h, "client-go SharedIndexInformer", "v0.37.2")
		if len(vs) > 0 {
			t.Fatalf("the recorded run breaks the informer contract: %v\n%s", vs, h.Rec.Dump(h.Rec.Runs()[0], "corpus"))
		}
		if *recordCorpus {
			if err := traces.WriteFile("../traces/corpus/informer-client-go-0.37.2.ndjson", tr); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestClientGoBufferedSameRV: a client-go handler still busy with an
// update when a relist (here a WatchList after a 410) delivers the same
// object again unchanged gets both notifications after the relist's mark.
// That is legal: SPEC §5.7 SameRVUpdate counts the refresh from the moment
// the informer first received that state, not from the handler's previous
// notification (handlers are told through buffers). The checker accepts it.
func TestClientGoBufferedSameRV(t *testing.T) {
	klog.SetLogger(logr.Discard())
	synctest.Test(t, func(t *testing.T) {
		h := informertest.NewHarness(t, clientGo{}, informertest.Config{WatchList: true}, watchhub.Options{ProgressInterval: -1})
		defer h.Close()
		h.Put("a", "x")
		h.Put("a", "y")
		h.Start(1)
		h.Settle()
		h.HandlerGate(0).Close()
		h.Put("a", "x") // its update waits in the handler's buffer
		h.Advance(2 * time.Second)
		h.Partition(func() {
			h.Put("b", "x")
			h.Put("b", "y")
		})
		h.Advance(2 * time.Second) // 410, then the WatchList relist: a/x again, unchanged
		h.Quiesce()
		hist, err := h.Rec.History()
		if err != nil {
			t.Fatal(err)
		}
		run := h.Rec.Runs()[0]
		if vs := k8s.CheckInformer(hist, *run); len(vs) > 0 {
			t.Fatalf("a legal client-go run is rejected: %v", vs)
		}
		if !sameRVRepeated(run) {
			t.Fatal("the scenario no longer delivers the same state twice: it tests nothing")
		}
	})
}

// sameRVRepeated reports whether some handler got one state of a key twice.
func sameRVRepeated(run *k8s.Run) bool {
	seen := map[[3]any]bool{}
	for _, e := range run.Entries {
		n := e.Notification
		if n == nil || n.New == nil || n.InInitialList {
			continue
		}
		k := [3]any{n.Handler, n.New.Key, n.New.ResourceVersion}
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

// resyncCorpusFile is the recorded client-go run with resync of docs/CORPUS.md.
const resyncCorpusFile = "../traces/corpus/informer-client-go-0.37.2-resync.ndjson"

// TestClientGoResyncHandlers: client-go v0.37.2's SharedIndexInformer with
// periodic resync on, handlers with different resync periods
// (AddEventHandlerWithResyncPeriod: the informer's 10 s, 30 s, and a handler
// added late that wants none), changes, resyncs, and a relist after a 410,
// passes the informer contract (SPEC §5). client-go sends a resync's
// updates — and a relist's unchanged objects — only to the handlers whose
// resync is due (kubernetes#87957), so the handlers' same-resourceVersion
// updates differ: the run shows it, which the first version of §5.4 (every
// notification compared) rejected. With -record-corpus it writes
// traces/corpus/informer-client-go-0.37.2-resync.ndjson.
func TestClientGoResyncHandlers(t *testing.T) {
	klog.SetLogger(logr.Discard())
	synctest.Test(t, func(t *testing.T) {
		h := informertest.NewHarness(t, clientGo{}, informertest.Config{WatchList: true, ResyncPeriod: 10 * time.Second}, watchhub.Options{ProgressInterval: -1})
		defer h.Close()
		period := func(d time.Duration) *time.Duration { return &d }
		h.Put("a", "x")
		h.Put("a", "y")
		h.Put("b", "x")
		h.StartWithResync(nil, period(30*time.Second))
		h.Settle()
		h.Advance(11 * time.Second) // handler 0's resync is due; handler 1's is not
		h.Put("a", "x")
		h.Delete("b", "x")
		h.Advance(11 * time.Second)
		h.AddHandlerWithResync(period(0)) // late, and wants no resync
		h.Advance(11 * time.Second)       // 33 s: both resync
		h.Put("b", "y")
		h.Partition(func() { // 410, then a WatchList relist: unchanged objects again, to the handlers due
			h.Put("a", "z")
			h.Delete("a", "y")
		})
		h.Advance(2 * time.Second)
		h.Advance(25 * time.Second)
		h.Put("a", "y")
		h.Advance(11 * time.Second)
		h.Quiesce()
		tr, vs := informertest.CorpusTrace(h, "client-go SharedIndexInformer, resync 10 s, handlers 10 s / 30 s / none", "v0.37.2")
		if len(vs) > 0 {
			t.Fatalf("the recorded run breaks the informer contract: %v\n%s", vs, h.Rec.Dump(h.Rec.Runs()[0], "resync"))
		}
		run := tr.K8s
		resyncs, late := 0, false
		for _, e := range run.Entries {
			resyncs += btoi(e.Resync)
			late = late || e.Notification != nil && e.Notification.Handler == 2 && e.Notification.InInitialList
		}
		syncs := sameRVUpdates(run)
		t.Logf("%d entries, %d resyncs, same-resourceVersion updates per handler %v, %d lists, %d watches",
			len(run.Entries), resyncs, syncs, len(run.Lists), len(run.Watches))
		if resyncs < 3 || !late || syncs[0] == syncs[1] || syncs[0] == syncs[2] || syncs[1] == syncs[2] {
			t.Fatalf("the scenario no longer shows handlers resynced at their own periods: %d resyncs, late handler %v, syncs %v", resyncs, late, syncs)
		}
		if *recordCorpus {
			if err := traces.WriteFile(resyncCorpusFile, tr); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sameRVUpdates counts, per handler, the OnUpdates that repeat the state
// the handler held.
func sameRVUpdates(run *k8s.Run) map[int]int {
	held := map[int]map[string]k8s.Object{}
	out := map[int]int{}
	for _, e := range run.Entries {
		n := e.Notification
		if n == nil {
			continue
		}
		if held[n.Handler] == nil {
			held[n.Handler] = map[string]k8s.Object{}
		}
		if n.Type == k8s.OnDelete {
			delete(held[n.Handler], n.Key())
			continue
		}
		if o, ok := held[n.Handler][n.Key()]; ok && n.Type == k8s.OnUpdate && o == *n.New {
			out[n.Handler]++
		}
		held[n.Handler][n.Key()] = *n.New
	}
	return out
}
