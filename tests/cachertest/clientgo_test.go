package cachertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// clientGoFile is the recorded client-go run over the watch cache of docs/CORPUS.md.
const clientGoFile = "../../traces/corpus/informer-client-go-0.37.2-cacher.ndjson.gz"

// SPEC §5.8 FreshStart: client-go v0.37.2's SharedIndexInformer with
// WatchList off (the default before Kubernetes 1.35, and client-go's
// fallback after any WatchList failure) makes its first list at
// resourceVersion "0" (reflector.go relistResourceVersion), which the real
// apiserver answers from its watch cache (k8s.io/apiserver v0.37.2 over
// etcd 3.7.3). Here the cache lags etcd — its own etcd connection is held
// back while writes go on, as for an apiserver cut off from etcd
// (kubernetes#59848) — so the first list is older than what was committed
// before the informer started; then the cache catches up and the informer
// converges. The API allows that ("0" is Any; kubernetes#59848 is open):
// the run passes by default, and only the strict profile's
// StrictFreshStart names it. The first version of §5.8 failed this
// recording. With -record-corpus it writes
// traces/corpus/informer-client-go-0.37.2-cacher.ndjson.gz.
func TestClientGoOverCacherFirstList(t *testing.T) {
	klog.SetLogger(logr.Discard())
	tr := recordClientGoOverCacher(t)
	start, first := firstSync(tr.K8s)
	if first < 0 || first >= start {
		t.Fatalf("the informer started when revision %d was committed, and its first list read revision %d: the cache did not lag", start, first)
	}
	t.Logf("the informer started when revision %d was committed; its first list, at \"0\", read revision %d; %d entries, %d lists, %d watches",
		start, first, len(tr.K8s.Entries), len(tr.K8s.Lists), len(tr.K8s.Watches))
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != linearizability.Linearizable || len(res.Violations) > 0 {
		t.Errorf("by default: %s %v", res.Verdict, res.Violations)
	}
	strict, err := linearizability.ProfileOption("strict")
	if err != nil {
		t.Fatal(err)
	}
	res, err = linearizability.Check(tr, linearizability.Options{Profile: strict})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 1 || res.Violations[0].Property != spec.FreshStart {
		t.Errorf("under the strict profile: %v, want FAIL FreshStart alone", res.Violations)
	}
	if *recordCorpus {
		if err := traces.WriteFile(clientGoFile, tr); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", clientGoFile)
	}
}

// firstSync returns the revision an informer run started at and that of
// its first list.
func firstSync(run *k8s.Run) (start, first int64) {
	for _, e := range run.Entries {
		switch {
		case e.Start != nil:
			start = e.Start.Revision
		case e.List != nil && run.Lists[*e.List].Result.Status == nil:
			return start, run.Lists[*e.List].Result.ResourceVersion
		}
	}
	return start, -1
}

// recordClientGoOverCacher runs a client-go informer with WatchList off
// over the watch cache, which lags etcd while the informer makes its first
// list, then lets it converge.
func recordClientGoOverCacher(t *testing.T) *traces.Trace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := StartWith(ctx, Options{LaggingCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	write := func(create bool, i int) {
		t.Helper()
		f := h.Update
		if create {
			f = h.Create
		}
		if _, err := f(ctx, fmt.Sprintf("ns%d", i%2), fmt.Sprintf("p%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		write(true, i)
	}
	if err := h.StartCacher(ctx); err != nil {
		t.Fatal(err)
	}
	write(false, 0)
	// The cache falls behind: what etcd sends it is held back while
	// objects are created and changed.
	h.PauseCache()
	for i := range 4 {
		write(false, i+1)
		write(true, 6+i)
	}
	head, err := h.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inf := &cgInformer{h: h}
	h.Rec.Informer(k8s.Entry{HandlerAdded: ptrTo(0)})
	inf.start(ctx, head)
	for h.Rec.Stats().Lists == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the informer never listed")
		case <-time.After(10 * time.Millisecond):
		}
	}
	h.ResumeCache()
	for i := range 3 {
		write(false, 2*i)
	}
	// Quiescence: the informer's cache and its handler agree with etcd.
	want, err := h.etcdPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for !inf.agrees(want) {
		select {
		case <-ctx.Done():
			t.Fatalf("the informer never converged")
		case <-time.After(20 * time.Millisecond):
		}
	}
	inf.observe()
	h.Rec.Informer(k8s.Entry{Quiesced: true})
	inf.stop()
	tr, err := h.Trace(ctx, "client-go SharedIndexInformer v0.37.2 (WatchList off) over k8s.io/apiserver v0.37.2 watch cache over etcd 3.7.3")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// etcdPods returns the pods etcd holds now, as the informer should see them.
func (h *Harness) etcdPods(ctx context.Context) (map[string]rawObject, error) {
	list := &example.PodList{}
	if err := h.etcd3.GetList(ctx, keyRoot(""), storage.ListOptions{Predicate: everything(), Recursive: true}, list); err != nil {
		return nil, err
	}
	out := map[string]rawObject{}
	for i := range list.Items {
		o := podObject(&list.Items[i])
		out[o.key] = o
	}
	return out, nil
}

// cgInformer is a client-go SharedIndexInformer over the harness, recorded:
// its lists and watches through the harness, its handler's calls, its
// HasSynced and last-synced resourceVersion, its final cache.
type cgInformer struct {
	h      *Harness
	inf    cache.SharedIndexInformer
	reg    cache.ResourceEventHandlerRegistration
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	view     map[string]rawObject // the handler's view
	synced   bool
	lastRV   string
	watchers []*Watch
}

func (c *cgInformer) start(ctx context.Context, head int64) {
	c.view = map[string]rawObject{}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			res, list, err := c.h.list(ctx, ListOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch), Limit: o.Limit, Continue: o.Continue})
			c.observe()
			switch {
			case err != nil:
				return nil, err
			case res.Status != nil:
				return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(res.Status.Code),
					Reason: metav1.StatusReason(res.Status.Reason), Message: res.Status.Message, ListMeta: metav1.ListMeta{Continue: res.Inconsistent}}}
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wo := WatchOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch),
				SendInitialEvents: o.SendInitialEvents, AllowWatchBookmarks: o.AllowWatchBookmarks, Forward: true}
			if o.TimeoutSeconds != nil {
				wo.Timeout = time.Duration(*o.TimeoutSeconds) * time.Second
			}
			w, err := c.h.Watch(ctx, wo)
			if err != nil {
				return nil, err
			}
			if _, _, _, refused := w.Result(); refused != nil {
				return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(refused.Code),
					Reason: metav1.StatusReason(refused.Reason), Message: refused.Message}}
			}
			c.mu.Lock()
			c.watchers = append(c.watchers, w)
			c.mu.Unlock()
			return newCGWatch(w, c.observe), nil
		},
	}
	c.inf = cache.NewSharedIndexInformerWithOptions(noWatchList{lw}, &example.Pod{}, cache.SharedIndexInformerOptions{})
	note := func(n k8s.Notification, old, new any) {
		c.observe()
		var o, nw *rawObject
		if p, ok := old.(*example.Pod); ok {
			x := podObject(p)
			o = &x
		}
		if p, ok := new.(*example.Pod); ok {
			x := podObject(p)
			nw = &x
		}
		c.mu.Lock()
		if n.Type == k8s.OnDelete && o != nil {
			delete(c.view, o.key)
		} else if nw != nil {
			c.view[nw.key] = *nw
		}
		c.mu.Unlock()
		c.h.Rec.Notify(n, o, nw)
	}
	reg, err := c.inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			note(k8s.Notification{Handler: 0, Type: k8s.OnAdd, InInitialList: initial}, nil, obj)
		},
		UpdateFunc: func(old, new any) { note(k8s.Notification{Handler: 0, Type: k8s.OnUpdate}, old, new) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				note(k8s.Notification{Handler: 0, Type: k8s.OnDelete, Tombstone: true}, d.Obj, nil)
				return
			}
			note(k8s.Notification{Handler: 0, Type: k8s.OnDelete}, obj, nil)
		},
	})
	if err != nil {
		panic(err) // a fresh informer takes a handler
	}
	c.reg = reg
	rctx, cancel := context.WithCancel(ctx)
	c.cancel, c.done = cancel, make(chan struct{})
	c.h.Rec.Start(head)
	go func() {
		defer close(c.done)
		c.inf.RunWithContext(rctx)
	}()
}

// observe records the handler's HasSynced the first time it is true, and
// the informer's last-synced resourceVersion when it changed.
func (c *cgInformer) observe() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inf == nil {
		return
	}
	if !c.synced && c.reg.HasSynced() {
		c.synced = true
		c.h.Rec.Informer(k8s.Entry{HasSynced: ptrTo(0)})
	}
	if rv := c.inf.LastSyncResourceVersion(); rv != c.lastRV {
		c.lastRV = rv
		if n, ok := k8s.ParseRV(rv); ok && n > 0 {
			c.h.Rec.Informer(k8s.Entry{SyncedRV: &n})
		}
	}
}

// agrees reports whether the informer synced and its cache and its
// handler's view are want.
func (c *cgInformer) agrees(want map[string]rawObject) bool {
	if !c.inf.HasSynced() || !c.reg.HasSynced() {
		return false
	}
	c.mu.Lock()
	view := len(c.view) == len(want)
	for k, o := range want {
		view = view && c.view[k] == o
	}
	c.mu.Unlock()
	store := c.inf.GetStore().List()
	if !view || len(store) != len(want) {
		return false
	}
	for _, obj := range store {
		if o := podObject(obj.(*example.Pod)); want[o.key] != o {
			return false
		}
	}
	return true
}

// stop stops the informer, waits for its watches' recorders, and records
// its final cache.
func (c *cgInformer) stop() {
	c.cancel()
	<-c.done
	c.mu.Lock()
	ws := c.watchers
	c.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
	var objs []rawObject
	for _, obj := range c.inf.GetStore().List() {
		objs = append(objs, podObject(obj.(*example.Pod)))
	}
	c.h.Rec.SetCache(objs)
}

// cgWatch is a harness watch as client-go's watch.Interface; observe runs
// before each event is handed over.
type cgWatch struct {
	w         *Watch
	observe   func()
	once, end sync.Once
	ch        chan watch.Event
	stopped   chan struct{}
}

func newCGWatch(w *Watch, observe func()) *cgWatch {
	c := &cgWatch{w: w, observe: observe, ch: make(chan watch.Event), stopped: make(chan struct{})}
	go func() {
		defer close(c.ch)
		for ev := range w.ResultChan() {
			c.observe()
			select {
			case c.ch <- ev:
			case <-c.stopped:
				return
			}
		}
	}()
	return c
}

func (w *cgWatch) Stop() {
	w.end.Do(func() {
		close(w.stopped)
		go w.w.Stop()
	})
}

func (w *cgWatch) ResultChan() <-chan watch.Event { return w.ch }

// noWatchList declares that the source serves no WatchList, so that the
// Reflector lists and watches (client-go util/watchlist
// DoesClientNotSupportWatchListSemantics), as with WatchList off.
type noWatchList struct{ *cache.ListWatch }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }
