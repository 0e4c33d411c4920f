package cachertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/watchspec/watchspec/model/k8s"
)

// watchListEnabled reports the WatchList feature gate, which the REST
// layer's defaulting and validation of list options depend on.
func watchListEnabled() bool { return utilfeature.DefaultFeatureGate.Enabled(features.WatchList) }

// keyRoot is the storage key of a collection, as the generic registry's
// NamespaceKeyRootFunc builds it.
func keyRoot(ns string) string {
	key := strings.TrimSuffix(resourcePrefix, "/")
	if ns != "" {
		key += "/" + ns
	}
	return key
}

// restOptions defaults and validates list options as the apiserver's REST
// handler does (endpoints/handlers/get.go listOpts): an invalid combination
// is answered 422 Invalid.
func restOptions(o *metainternalversion.ListOptions) *k8s.Status {
	metainternalversion.SetListOptionsDefaults(o, watchListEnabled())
	if errs := metainternalversionvalidation.ValidateListOptions(o, watchListEnabled()); len(errs) > 0 {
		st, _ := statusOf(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs))
		return st
	}
	return nil
}

// statusOf returns the API status of an error, as the REST layer answers it
// (500 for an error that carries none), and the continue token it hands
// out ("" when none: only a 410 to a continuation may, SPEC §4.5).
func statusOf(err error) (*k8s.Status, string) {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		st := s.Status()
		return &k8s.Status{Code: int(st.Code), Reason: string(st.Reason), Message: st.Message}, st.Continue
	}
	return &k8s.Status{Code: 500, Reason: string(metav1.StatusReasonInternalError), Message: err.Error()}, ""
}

// decodeContinue returns the key a continue token's page starts after, as
// the model reads it (the token itself when it does not decode).
func decodeContinue(token, prefix string) string {
	if token == "" {
		return ""
	}
	from, _, err := storage.DecodeContinue(token, prefix)
	if err != nil {
		return token
	}
	return strings.TrimSuffix(from, "\x00")
}

func podObject(p *example.Pod) rawObject {
	rv, _ := k8s.ParseRV(p.ResourceVersion)
	return rawObject{key: GVR.Key(p.Namespace, p.Name), value: p.Spec.NodeName, rv: rv, uid: string(p.UID)}
}

// ListOptions is a list request as a client sends it.
type ListOptions struct {
	// Namespace scopes the list ("" for every namespace).
	Namespace            string
	ResourceVersion      string
	ResourceVersionMatch string
	Limit                int64
	// Continue is a continue token of an earlier page.
	Continue string
}

// ListResult is what a list returned.
type ListResult struct {
	ResourceVersion int64
	Items           int
	Continue        string
	// Status is set when the list was answered with an error.
	Status *k8s.Status
	// Inconsistent is the continue token a 410 to a continuation handed
	// out: the inconsistent continuation (SPEC §4.5).
	Inconsistent string
}

// List lists through the storage as the generic registry's
// Store.ListPredicate does, after the REST layer's defaulting and
// validation, and records the call. It returns an error only when the list
// could not be made or recorded (then nothing is recorded).
func (h *Harness) List(ctx context.Context, o ListOptions) (ListResult, error) {
	res, _, err := h.list(ctx, o)
	return res, err
}

// list is [Harness.List], which also returns the list served (nil when it
// was answered with an error status).
func (h *Harness) list(ctx context.Context, o ListOptions) (ListResult, *example.PodList, error) {
	prefix := GVR.Prefix(o.Namespace)
	rec := &listRec{prefix: prefix, first: -1, compacts: -1, call: h.Rec.clock(),
		opts: k8s.ListOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: o.ResourceVersionMatch, Limit: o.Limit, Continue: decodeContinue(o.Continue, prefix)}}
	if o.Continue != "" {
		rec.first = h.firstPage(o.Continue)
	}
	lo := metainternalversion.ListOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatch(o.ResourceVersionMatch),
		Limit: o.Limit, Continue: o.Continue}
	invalid := restOptions(&lo)

	h.Rec.compactMu.RLock()
	rec.compacts = h.Rec.compactRev
	before, err := h.Head(ctx)
	if err != nil {
		h.Rec.compactMu.RUnlock()
		return ListResult{}, nil, err
	}
	list := &example.PodList{}
	if invalid == nil {
		pred := everything()
		pred.Limit, pred.Continue = lo.Limit, lo.Continue
		err = h.storage().GetList(ctx, keyRoot(o.Namespace), storage.ListOptions{ResourceVersion: lo.ResourceVersion,
			ResourceVersionMatch: lo.ResourceVersionMatch, Predicate: pred, Recursive: true}, list)
		err = storeerr.InterpretListError(err, groupResource)
	}
	after, herr := h.Head(context.WithoutCancel(ctx))
	h.Rec.compactMu.RUnlock()
	if herr != nil {
		return ListResult{}, nil, herr
	}
	if err != nil && ctx.Err() != nil {
		return ListResult{}, nil, err // the client gave up: not an answer
	}
	rec.before, rec.after = before, after
	var res ListResult
	switch {
	case invalid != nil:
		rec.status = invalid
	case err != nil:
		rec.status, res.Inconsistent = statusOf(err)
		rec.status.Continue = decodeContinue(res.Inconsistent, prefix)
	default:
		rv, ok := k8s.ParseRV(list.ResourceVersion)
		if !ok {
			rec.status = &k8s.Status{Code: 500, Message: "list resourceVersion " + list.ResourceVersion}
			break
		}
		rec.rv = rv
		for i := range list.Items {
			rec.items = append(rec.items, podObject(&list.Items[i]))
		}
		rec.cont = decodeContinue(list.Continue, prefix)
		res = ListResult{ResourceVersion: rv, Items: len(list.Items), Continue: list.Continue}
	}
	res.Status = rec.status
	i := h.Rec.addList(rec)
	switch {
	case res.Inconsistent != "":
		// A list with the 410's token is the inconsistent continuation:
		// its "first page" is the 410, which says where it starts.
		h.setFirstPage(res.Inconsistent, i)
	case res.Continue != "":
		// The next page continues at the first page's revision — or, after
		// the inconsistent continuation, at this page's.
		first := rec.first
		if first < 0 || h.Rec.listStatus(first) != nil {
			first = i
		}
		h.setFirstPage(res.Continue, first)
	}
	if res.Status != nil {
		list = nil
	}
	return res, list, nil
}

func (h *Harness) firstPage(token string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, ok := h.firstPages[token]; ok {
		return i
	}
	return -1
}

func (h *Harness) setFirstPage(token string, i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.firstPages == nil {
		h.firstPages = map[string]int{}
	}
	h.firstPages[token] = i
}

// WatchOptions is a watch request as a client sends it.
type WatchOptions struct {
	Namespace            string
	ResourceVersion      string
	ResourceVersionMatch string
	SendInitialEvents    *bool
	AllowWatchBookmarks  bool
	// Timeout is the request's timeout (the REST layer always sets one; 0:
	// none). The cacher sends a bookmark 2 s before it.
	Timeout time.Duration
	// Slow: the client does not read the stream until [Watch.Release].
	Slow bool
	// Forward: the events recorded are also passed on, through
	// [Watch.ResultChan], to a client (a client-go Reflector).
	Forward bool
}

// Watch is an open watch whose events a goroutine records.
type Watch struct {
	h      *Harness
	id     int
	w      watch.Interface
	cancel context.CancelFunc
	gate   chan struct{}
	done   chan struct{}
	out    chan watch.Event // the forwarded events (Forward), closed at the end

	mu       sync.Mutex
	err      error // an event the harness could not read
	events   int
	lastRV   int64 // of the last event other than the initial ADDED ones
	byServer bool  // the server ended the stream
	refused  *k8s.Status
}

// Watch opens a watch through the storage as the generic registry's
// Store.Watch does, after the REST layer's defaulting and validation, and
// records it and every event until [Watch.Stop] or the end of the stream.
func (h *Harness) Watch(ctx context.Context, o WatchOptions) (*Watch, error) {
	prefix := GVR.Prefix(o.Namespace)
	rec := &watchRec{prefix: prefix, call: h.Rec.clock(), opts: k8s.WatchOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: o.ResourceVersionMatch,
		SendInitialEvents: o.SendInitialEvents, AllowWatchBookmarks: o.AllowWatchBookmarks}}
	lo := metainternalversion.ListOptions{Watch: true, ResourceVersion: o.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatch(o.ResourceVersionMatch),
		SendInitialEvents: o.SendInitialEvents, AllowWatchBookmarks: o.AllowWatchBookmarks}
	invalid := restOptions(&lo)
	// The compaction in force while the watch is answered (its initial
	// state is chosen then).
	h.Rec.compactMu.RLock()
	defer h.Rec.compactMu.RUnlock()
	rec.compacts = h.Rec.compactRev
	before, err := h.Head(ctx)
	if err != nil {
		return nil, err
	}
	rec.before, rec.after = before, before
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if o.Timeout > 0 {
		wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), o.Timeout)
	}
	w := &Watch{h: h, cancel: cancel, gate: make(chan struct{}), done: make(chan struct{})}
	if o.Forward {
		w.out = make(chan watch.Event)
	}
	if !o.Slow {
		close(w.gate)
	}
	var wi watch.Interface
	if invalid == nil {
		pred := everything()
		pred.AllowWatchBookmarks = lo.AllowWatchBookmarks
		wi, err = h.storage().Watch(wctx, keyRoot(o.Namespace), storage.ListOptions{ResourceVersion: lo.ResourceVersion, Predicate: pred,
			Recursive: true, SendInitialEvents: lo.SendInitialEvents})
		if err != nil {
			err = storeerr.InterpretWatchError(err, groupResource, "")
		}
	}
	switch {
	case invalid != nil:
		rec.status = invalid
	case err != nil:
		rec.status, _ = statusOf(err)
	}
	if rec.status != nil {
		// Refused: it was answered when the head was at most this.
		if after, herr := h.Head(context.WithoutCancel(ctx)); herr == nil {
			rec.after = after
		}
	}
	w.id = h.Rec.addWatch(rec)
	if rec.status != nil {
		cancel()
		w.refused = rec.status
		close(w.done)
		if w.out != nil {
			close(w.out)
		}
		return w, nil
	}
	w.w = wi
	go w.consume(wctx)
	return w, nil
}

func (w *Watch) consume(ctx context.Context) {
	defer close(w.done)
	if w.out != nil {
		defer close(w.out)
	}
	defer func() {
		after, err := w.h.Head(context.Background())
		if err == nil {
			w.h.Rec.endWatch(w.id, after)
		}
	}()
	select {
	case <-w.gate:
	case <-ctx.Done():
		w.w.Stop()
		return
	}
	start, err := k8s.WatchSemantic(w.h.Rec.watchOptions(w.id))
	initial := err == nil && start.InitialState
	for ev := range w.w.ResultChan() {
		e, err := rawEventOf(ev)
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			break
		}
		w.h.Rec.addEvent(w.id, e)
		if w.out != nil {
			select {
			case w.out <- unwrapped(ev):
			case <-ctx.Done():
			}
		}
		w.mu.Lock()
		w.events++
		if e.typ != k8s.Added {
			initial = false
		}
		if !initial && e.typ != k8s.Error {
			w.lastRV = e.obj.rv
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.byServer = ctx.Err() == nil
	w.mu.Unlock()
	w.w.Stop()
}

func rawEventOf(ev watch.Event) (rawEvent, error) {
	e := rawEvent{typ: k8s.EventType(ev.Type)}
	if ev.Type == watch.Error {
		if st, ok := ev.Object.(*metav1.Status); ok {
			e.status = &k8s.Status{Code: int(st.Code), Reason: string(st.Reason), Message: st.Message}
		} else {
			e.status = &k8s.Status{Code: 500, Message: "an ERROR event without a Status"}
		}
		return e, nil
	}
	obj := ev.Object
	if u, ok := obj.(interface{ GetObject() runtime.Object }); ok {
		obj = u.GetObject() // the cacher's cachingObject
	}
	if ev.Type == watch.Bookmark {
		m, err := meta.Accessor(obj)
		if err != nil {
			return e, fmt.Errorf("a bookmark without metadata: %w", err)
		}
		e.obj.rv, _ = k8s.ParseRV(m.GetResourceVersion())
		e.initialEnd = m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		return e, nil
	}
	pod, ok := obj.(*example.Pod)
	if !ok {
		return e, fmt.Errorf("a %s event carries a %T", ev.Type, obj)
	}
	e.obj = podObject(pod)
	return e, nil
}

// unwrapped returns ev with the object the cacher wraps (its
// cachingObject) unwrapped, as the REST layer serializes it.
func unwrapped(ev watch.Event) watch.Event {
	if u, ok := ev.Object.(interface{ GetObject() runtime.Object }); ok {
		ev.Object = u.GetObject()
	}
	return ev
}

// ResultChan returns the forwarded events of a watch made with Forward
// (nil otherwise); it is closed when the stream ends.
func (w *Watch) ResultChan() <-chan watch.Event { return w.out }

// Release lets a slow watch's client start reading.
func (w *Watch) Release() {
	select {
	case <-w.gate:
	default:
		close(w.gate)
	}
}

// Stop ends the watch (the client gives up) and waits for its recorder.
func (w *Watch) Stop() {
	w.cancel()
	w.Release()
	<-w.done
}

// Done is closed when the stream ended and was recorded.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err returns the error of an event the harness could not read (the
// stream was abandoned there).
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Result reports the events received, the resourceVersion of the last
// event after the initial state (0: none), whether the server ended the
// stream, and the refusal, if the watch was refused.
func (w *Watch) Result() (events int, lastRV int64, endedByServer bool, refused *k8s.Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events, w.lastRV, w.byServer, w.refused
}
