package kuberecord

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform/kube"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/traces"
)

// Options say how to record.
type Options struct {
	// Prefix is the key prefix the informer watches, in the model's keys:
	// k8s.GVR.Prefix(namespace) ("" namespace: every namespace).
	Prefix string
	// Object converts an object client-go delivers (from a list, a watch
	// event, a handler call or the cache) to the model's: its key
	// (Prefix + name, or + namespace/name), its value (what the writer
	// wrote), its resourceVersion and its UID (the revision that created
	// that life of the object). Required.
	Object func(obj runtime.Object) (k8s.Object, error)
	// Revision, if set, returns the revision committed now (the store's
	// head); it bounds every list and watch (see the package doc). nil: the
	// bounds are the header's base revision and the head of the writes.
	Revision func() int64
}

// Recorder records one informer run. Make it with [New]; all its methods
// are safe for concurrent use.
//
// Every record carries its time, nanoseconds since [New], taken under the
// lock that orders the log, so the log's times never decrease
// (docs/TRACE_FORMAT.md, "Order"). Inside a testing/synctest bubble the
// times are the bubble's fake clock.
type Recorder struct {
	opts Options
	t0   time.Time

	mu       sync.Mutex
	run      k8s.Run
	info     traces.K8sInfo
	ended    []bool                     // per watch
	first    map[string]*k8s.ListResult // continue token → its list's first page
	handlers int
	regs     map[int]cache.ResourceEventHandlerRegistration
	inf      cache.SharedIndexInformer
	synced   map[int]bool
	syncedRV int64
	finished bool
	errs     []error // objects Object could not convert, and the like
	wg       sync.WaitGroup
}

// unknownAfter marks a bound to fill in at [Recorder.Trace], with the head
// of the writes.
const unknownAfter = -1

// New returns a Recorder for one informer run, or an error if opts
// cannot make one (Object is required).
func New(opts Options) (*Recorder, error) {
	if opts.Object == nil {
		return nil, errors.New("kuberecord.New: set Options.Object: it maps client-go's objects to the model's key, value, resourceVersion and UID (see the package doc)")
	}
	return &Recorder{opts: opts, t0: time.Now(), run: k8s.Run{Prefix: opts.Prefix},
		first: map[string]*k8s.ListResult{}, regs: map[int]cache.ResourceEventHandlerRegistration{}, synced: map[int]bool{}}, nil
}

// now is the time of a record; the caller holds r.mu.
func (r *Recorder) now() int64 { return int64(time.Since(r.t0)) }

func (r *Recorder) clock() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now()
}

// revision is the revision committed now, or unknownAfter.
func (r *Recorder) revision() int64 {
	if r.opts.Revision == nil {
		return unknownAfter
	}
	return r.opts.Revision()
}

// entry appends e to the log now; the caller holds r.mu.
func (r *Recorder) entry(e k8s.Entry) {
	r.run.Entries = append(r.run.Entries, e)
	r.info.Entries = append(r.info.Entries, traces.K8sEntryInfo{Time: r.now()})
}

// failf keeps an error for [Recorder.Trace]; the caller holds r.mu.
func (r *Recorder) failf(format string, args ...any) {
	if len(r.errs) < 10 {
		r.errs = append(r.errs, fmt.Errorf(format, args...))
	}
}

// object converts obj; the caller holds r.mu.
func (r *Recorder) object(obj any, what string) (*k8s.Object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		r.failf("%s: %T is not a runtime.Object", what, obj)
		return nil, false
	}
	o, err := r.opts.Object(ro)
	if err != nil {
		r.failf("%s: Options.Object: %v", what, err)
		return nil, false
	}
	return &o, true
}

// status is the API status of an error, nil when the error is not an
// answer of the server.
func status(err error) *k8s.Status {
	var s apierrors.APIStatus
	if !errors.As(err, &s) || s.Status().Code == 0 {
		return nil
	}
	st := s.Status()
	return &k8s.Status{Code: int(st.Code), Reason: string(st.Reason), Message: st.Message}
}

// continueAfter decodes a continue token into the key its page continues
// after, in the model's keys. Tokens of the apiserver's format
// (k8s.io/apiserver pkg/storage/continue.go; watchspec's reference serves
// the same) are decoded by conform/kube, whose recorder reads them too;
// another server's token reads as fallback.
func (r *Recorder) continueAfter(tok, fallback string) string {
	if tok == "" {
		return ""
	}
	key, _, ok := kube.DecodeContinue(tok, r.opts.Prefix)
	if !ok {
		return fallback
	}
	return key
}

// --- the ListerWatcher ---

// NewListerWatcher returns lw recorded: every list and watch it answers is
// recorded, then passed on unchanged. It implements cache.ListerWatcher and
// cache.ListerWatcherWithContext, and says whether lw supports WatchList
// semantics as lw does (client-go's watchlist.DoesClientNotSupportWatchListSemantics).
// Build the informer over it, once per Recorder.
func (r *Recorder) NewListerWatcher(lw cache.ListerWatcher) cache.ListerWatcher {
	return &listerWatcher{r: r, inner: cache.ToListerWatcherWithContext(lw), noWatchList: watchlist.DoesClientNotSupportWatchListSemantics(lw)}
}

type listerWatcher struct {
	r           *Recorder
	inner       cache.ListerWatcherWithContext
	noWatchList bool
}

var _ cache.ListerWatcherWithContext = (*listerWatcher)(nil)

// IsWatchListSemanticsUnSupported says what the wrapped ListerWatcher says.
func (lw *listerWatcher) IsWatchListSemanticsUnSupported() bool { return lw.noWatchList }

// List implements cache.ListerWatcher.
func (lw *listerWatcher) List(o metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), o)
}

// Watch implements cache.ListerWatcher.
func (lw *listerWatcher) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), o)
}

// ListWithContext implements cache.ListerWatcherWithContext.
func (lw *listerWatcher) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	r := lw.r
	call, before := r.clock(), r.revision()
	list, err := lw.inner.ListWithContext(ctx, o)
	after := r.revision()
	st := status(err)
	if err != nil && st == nil {
		return list, err
	}
	r.mu.Lock()
	c := k8s.ListCall{Prefix: r.opts.Prefix, Before: max(before, 0), After: after,
		Options: k8s.ListOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch), Limit: o.Limit,
			Continue: r.continueAfter(o.Continue, o.Continue)}}
	if o.Continue != "" {
		c.First = r.first[o.Continue]
	}
	var next string
	if st != nil {
		c.Result.Status = st
	} else if res, tok, ok := r.listResult(list, c.Options.Continue); ok {
		c.Result, next = res, tok
	} else {
		c.Result.Status = &k8s.Status{Code: 500, Message: fmt.Sprintf("the list's answer is not a list the recorder reads (%T)", list)}
	}
	if next != "" {
		first := c.First
		if first == nil {
			res := c.Result
			first = &res
		}
		r.first[next] = first
	}
	r.run.Lists = append(r.run.Lists, c)
	i := len(r.run.Lists) - 1
	r.entry(k8s.Entry{List: &i})
	r.info.Lists = append(r.info.Lists, traces.K8sListInfo{Call: call, Return: r.info.Entries[len(r.info.Entries)-1].Time})
	r.observe()
	r.mu.Unlock()
	return list, err
}

// listResult reads a list's answer: its result and its continue token.
// The caller holds r.mu.
func (r *Recorder) listResult(list runtime.Object, cont string) (k8s.ListResult, string, bool) {
	la, err := meta.ListAccessor(list)
	if err != nil {
		return k8s.ListResult{}, "", false
	}
	rv, ok := k8s.ParseRV(la.GetResourceVersion())
	if !ok {
		return k8s.ListResult{}, "", false
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return k8s.ListResult{}, "", false
	}
	res := k8s.ListResult{ResourceVersion: rv}
	for i, it := range items {
		if o, ok := r.object(it, fmt.Sprintf("list %d item %d", len(r.run.Lists), i)); ok {
			res.Items = append(res.Items, *o)
		}
	}
	tok := la.GetContinue()
	if tok != "" {
		// Another server's token continues, as far as the recording can
		// tell, after this page's last item.
		fallback := cont
		if n := len(res.Items); n > 0 {
			fallback = res.Items[n-1].Key
		}
		res.Continue = r.continueAfter(tok, fallback)
	}
	return res, tok, true
}

// WatchWithContext implements cache.ListerWatcherWithContext.
func (lw *listerWatcher) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	r := lw.r
	call, before := r.clock(), r.revision()
	inner, err := lw.inner.WatchWithContext(ctx, o)
	after := r.revision()
	st := status(err)
	if err != nil && st == nil {
		return inner, err
	}
	r.mu.Lock()
	c := k8s.WatchCall{Prefix: r.opts.Prefix, Before: max(before, 0), After: max(before, 0), Status: st,
		Options: k8s.WatchOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch),
			SendInitialEvents: o.SendInitialEvents, AllowWatchBookmarks: o.AllowWatchBookmarks}}
	wi := traces.K8sWatchInfo{ID: len(r.run.Watches) + 1, Time: call}
	if before == unknownAfter {
		c.After = unknownAfter
	}
	id := len(r.run.Watches)
	if st != nil {
		c.After, wi.End = after, r.now() // refused: it ends where it was answered
	}
	r.run.Watches = append(r.run.Watches, c)
	r.info.Watches = append(r.info.Watches, wi)
	r.ended = append(r.ended, st != nil)
	r.mu.Unlock()
	if err != nil {
		return inner, err
	}
	w := &recordedWatch{r: r, id: id, inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	r.wg.Add(1)
	go w.forward()
	return w, nil
}

// recordedWatch passes a watch's events on, recording each first.
type recordedWatch struct {
	r     *Recorder
	id    int
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func (w *recordedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *recordedWatch) Stop() { w.once.Do(func() { close(w.stop) }) }

func (w *recordedWatch) forward() {
	defer w.r.wg.Done()
	defer close(w.out)
	defer w.r.watchEnded(w.id)
	defer w.inner.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.inner.ResultChan():
			if !ok {
				return
			}
		case <-w.stop:
			return
		}
		w.r.watchEvent(w.id, ev)
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

func (r *Recorder) watchEvent(id int, ev watch.Event) {
	after := r.revision()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := k8s.WatchEvent{Type: k8s.EventType(ev.Type)}
	switch ev.Type {
	case watch.Error:
		e.Status = status(apierrors.FromObject(ev.Object))
		if e.Status == nil {
			e.Status = &k8s.Status{Code: 500, Message: fmt.Sprintf("an ERROR event without a Status: %T", ev.Object)}
		}
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			r.failf("watch %d: a BOOKMARK without metadata: %v", id+1, err)
			return
		}
		rv, _ := k8s.ParseRV(m.GetResourceVersion())
		e.Object = k8s.Object{ResourceVersion: rv}
		e.InitialEventsEnd = m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
	default:
		o, ok := r.object(ev.Object, fmt.Sprintf("watch %d %s event", id+1, ev.Type))
		if !ok {
			return
		}
		e.Object = *o
	}
	c := &r.run.Watches[id]
	c.Events = append(c.Events, e)
	if after != unknownAfter {
		c.After = max(c.After, after)
	}
	r.entry(k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: id, Event: e}})
	r.observe()
}

func (r *Recorder) watchEnded(id int) {
	after := r.revision()
	r.mu.Lock()
	defer r.mu.Unlock()
	if after != unknownAfter {
		r.run.Watches[id].After = max(r.run.Watches[id].After, after)
	}
	r.info.Watches[id].End = r.now()
	r.ended[id] = true
}

// --- the handlers ---

// Handler returns h recorded as the next handler (numbered from 0 in the
// order they are wrapped): each call is recorded, then passed on. Wrap a
// handler just before you register it, since the wrap records the
// registration. With [Recorder.AddEventHandler], the registration's
// HasSynced is recorded too.
func (r *Recorder) Handler(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.handlers
	r.handlers++
	r.entry(k8s.Entry{HandlerAdded: &id})
	return &handler{r: r, id: id, h: h}
}

// AddEventHandler registers h, recorded, with inf (its resync period).
func (r *Recorder) AddEventHandler(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	rh := r.Handler(h).(*handler)
	reg, err := inf.AddEventHandler(rh)
	r.registered(inf, rh.id, reg, err)
	return reg, err
}

// AddEventHandlerWithResyncPeriod registers h, recorded, with inf and its
// own resync period (client-go sends a resync's updates only to the
// handlers whose resync is due: SPEC §5.4, §5.7).
func (r *Recorder) AddEventHandlerWithResyncPeriod(inf cache.SharedIndexInformer, h cache.ResourceEventHandler, period time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	rh := r.Handler(h).(*handler)
	reg, err := inf.AddEventHandlerWithResyncPeriod(rh, period)
	r.registered(inf, rh.id, reg, err)
	return reg, err
}

func (r *Recorder) registered(inf cache.SharedIndexInformer, id int, reg cache.ResourceEventHandlerRegistration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failf("handler %d was not registered: %v", id, err)
		return
	}
	if r.inf == nil {
		r.inf = inf
	}
	r.regs[id] = reg
	r.observe()
}

type handler struct {
	r  *Recorder
	id int
	h  cache.ResourceEventHandler
}

func (h *handler) note(n k8s.Notification, old, new any) {
	r := h.r
	r.mu.Lock()
	defer r.mu.Unlock()
	n.Handler = h.id
	what := fmt.Sprintf("handler %d %s", h.id, n.Type)
	if old != nil {
		o, ok := r.object(old, what)
		if !ok {
			return
		}
		n.Old = o
	}
	if new != nil {
		o, ok := r.object(new, what)
		if !ok {
			return
		}
		n.New = o
	}
	r.entry(k8s.Entry{Notification: &n})
	r.observe()
}

func (h *handler) OnAdd(obj any, isInInitialList bool) {
	h.note(k8s.Notification{Type: k8s.OnAdd, InInitialList: isInInitialList}, nil, obj)
	h.h.OnAdd(obj, isInInitialList)
}

func (h *handler) OnUpdate(old, new any) {
	h.note(k8s.Notification{Type: k8s.OnUpdate}, old, new)
	h.h.OnUpdate(old, new)
}

func (h *handler) OnDelete(obj any) {
	n := k8s.Notification{Type: k8s.OnDelete}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		n.Tombstone = true
		if d.Obj == nil {
			h.note(n, nil, nil)
			h.h.OnDelete(obj)
			return
		}
	}
	h.note(n, obj, nil)
	h.h.OnDelete(obj)
}

// --- the informer ---

// observe records what the informer says of itself: each handler's and
// its HasSynced the first time it is true, and its last-synced
// resourceVersion when it changed. The caller holds r.mu.
func (r *Recorder) observe() {
	if r.inf == nil || r.finished {
		return
	}
	for id := 0; id < r.handlers; id++ {
		if reg := r.regs[id]; reg != nil && !r.synced[id] && reg.HasSynced() {
			r.synced[id] = true
			h := id
			r.entry(k8s.Entry{HasSynced: &h})
		}
	}
	if !r.synced[-1] && r.inf.HasSynced() {
		r.synced[-1] = true
		h := -1
		r.entry(k8s.Entry{HasSynced: &h})
	}
	if n, ok := k8s.ParseRV(r.inf.LastSyncResourceVersion()); ok && n > 0 && n != r.syncedRV {
		r.syncedRV = n
		r.entry(k8s.Entry{SyncedRV: &n})
	}
}

// Run records the informer's start and runs it until ctx is done, as
// inf.RunWithContext does. Its logger is ctx's (klog.FromContext), through
// a sink that also marks each periodic resync: client-go's Reflector logs
// "Forcing resync" (V(4), reflector.go startResync) just before it queues
// a resync's deltas, and SPEC §5.7 needs the mark.
func (r *Recorder) Run(ctx context.Context, inf cache.SharedIndexInformer) {
	rev := r.revision()
	r.mu.Lock()
	r.inf = inf
	r.entry(k8s.Entry{Start: &k8s.StartEntry{Revision: max(rev, 0)}})
	r.mu.Unlock()
	logger := klog.FromContext(ctx)
	inf.RunWithContext(klog.NewContext(ctx, logr.New(resyncMarks{inner: logger.GetSink(), mark: r.resync})))
}

func (r *Recorder) resync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entry(k8s.Entry{Resync: true})
}

// Quiesced records that writes stopped and the informer had time to catch
// up: from here the checker demands that its cache and every handler's
// view equal the store (SPEC §5.2 InformerConverges).
func (r *Recorder) Quiesced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observe()
	r.entry(k8s.Entry{Quiesced: true})
}

// Finish records inf's final cache; call it after the informer stopped
// (the context given to [Recorder.Run] ended and Run returned). It waits
// until every watch the informer opened has ended.
func (r *Recorder) Finish(inf cache.SharedIndexInformer) {
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = true
	r.run.Cache = []k8s.Object{}
	for i, obj := range inf.GetStore().List() {
		if o, ok := r.object(obj, fmt.Sprintf("cache item %d", i)); ok {
			r.run.Cache = append(r.run.Cache, *o)
		}
	}
	sort.Slice(r.run.Cache, func(i, j int) bool { return r.run.Cache[i].Key < r.run.Cache[j].Key })
	r.info.Cache = traces.K8sEntryInfo{Time: r.now()}
}

// Trace returns the recording, with the writes of the store (every write
// since hdr.BaseRevision, see the package doc), as a trace for
// traces.WriteFile and linearizability.Check. hdr is the header to write:
// Start and Tool are filled in when empty; the caller sets BaseRevision,
// BaseCompactRevision and UniqueValues as they are true of the store.
// Call it after [Recorder.Finish]. It returns an error if an object could
// not be converted, or the run was not finished.
func (r *Recorder) Trace(hdr traces.Header, writes []traces.Op) (*traces.Trace, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.finished {
		return nil, errors.New("kuberecord: Trace before Finish: stop the informer and call Finish first, so that its cache is recorded")
	}
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("kuberecord: the recording is incomplete: %w", errors.Join(r.errs...))
	}
	head := max(hdr.BaseRevision, 1)
	for _, op := range writes {
		if op.Response != nil {
			head = max(head, op.Response.Revision)
		}
	}
	run := r.run
	run.Lists = append([]k8s.ListCall(nil), r.run.Lists...)
	run.Watches = append([]k8s.WatchCall(nil), r.run.Watches...)
	run.Entries = append([]k8s.Entry(nil), r.run.Entries...)
	for i := range run.Lists {
		if run.Lists[i].After == unknownAfter {
			run.Lists[i].After = head
		}
	}
	for i := range run.Watches {
		if run.Watches[i].After == unknownAfter || !r.ended[i] {
			run.Watches[i].After = head
		}
	}
	// A list's First is its first page's result: keep them pointing into
	// the copy's own lists.
	info := r.info
	info.Lists = append([]traces.K8sListInfo(nil), r.info.Lists...)
	info.Watches = append([]traces.K8sWatchInfo(nil), r.info.Watches...)
	info.Entries = append([]traces.K8sEntryInfo(nil), r.info.Entries...)
	for i := range info.Watches {
		if !r.ended[i] {
			info.Watches[i].End = r.now()
		}
	}
	if hdr.Start == "" {
		hdr.Start = r.t0.UTC().Format(time.RFC3339Nano)
	}
	if hdr.Tool == "" {
		hdr.Tool = "traces/record/kuberecord"
	}
	return &traces.Trace{Header: hdr, Ops: append([]traces.Op(nil), writes...), K8s: &run, K8sInfo: &info}, nil
}

// resyncMarks is a logr.LogSink that calls mark on client-go's "Forcing
// resync" and passes everything to inner (nil: discards).
type resyncMarks struct {
	inner logr.LogSink
	mark  func()
}

func (s resyncMarks) Init(ri logr.RuntimeInfo) {
	if s.inner != nil {
		s.inner.Init(ri)
	}
}

func (s resyncMarks) Enabled(level int) bool {
	return level <= 4 || (s.inner != nil && s.inner.Enabled(level))
}

func (s resyncMarks) Info(level int, msg string, kv ...any) {
	if msg == "Forcing resync" {
		s.mark()
	}
	if s.inner != nil && s.inner.Enabled(level) {
		s.inner.Info(level, msg, kv...)
	}
}

func (s resyncMarks) Error(err error, msg string, kv ...any) {
	if s.inner != nil {
		s.inner.Error(err, msg, kv...)
	}
}

func (s resyncMarks) WithValues(kv ...any) logr.LogSink {
	if s.inner != nil {
		s.inner = s.inner.WithValues(kv...)
	}
	return s
}

func (s resyncMarks) WithName(name string) logr.LogSink {
	if s.inner != nil {
		s.inner = s.inner.WithName(name)
	}
	return s
}
