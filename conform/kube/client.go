package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/watchspec/watchspec/model/k8s"
)

// ValueAnnotation carries the value the run writes in each object: a
// string never written before, which is the object's value in the model
// (docs/SPEC.md §4) and lets the checker recognise a write wherever it
// shows.
const ValueAnnotation = "watchspec.io/value"

// client makes recorded requests through the dynamic client.
type client struct {
	rec *recorder
	res dynamic.ResourceInterface
	ns  string
	gvr schema.GroupVersionResource
	// http and host make the requests the dynamic client cannot (a delete
	// whose answer is read).
	http *http.Client
	host string
	// newObject builds the object of a create or an update.
	newObject func(name, value string) *unstructured.Unstructured
}

// raw returns the object as the model sees it.
func (c *client) raw(o *unstructured.Unstructured) rawObject {
	rv, _ := k8s.ParseRV(o.GetResourceVersion())
	return rawObject{key: c.rec.gvr.Key(c.ns, o.GetName()), value: o.GetAnnotations()[ValueAnnotation], rv: rv, uid: string(o.GetUID())}
}

// statusOf returns the API status of an error (nil when the error is not
// an answer of the server: the request failed on its way) and the continue
// token it hands out.
func statusOf(err error) (*k8s.Status, string) {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		st := s.Status()
		if st.Code == 0 {
			return nil, ""
		}
		return &k8s.Status{Code: int(st.Code), Reason: string(st.Reason), Message: st.Message}, st.Continue
	}
	return nil, ""
}

// errUnknownOutcome is a write the server did not answer: the recording
// cannot know whether, or at which revision, it happened.
var errUnknownOutcome = errors.New("a write was not answered: its outcome is unknown, and the history with it")

// write makes one write and records it if it succeeded. It returns the
// object written (nil for a delete, or a write refused with a status), the
// status of a refusal, or an error when the server did not answer.
func (c *client) write(ctx context.Context, writer int, kind writeKind, name, uid, rv string) (*unstructured.Unstructured, *k8s.Status, error) {
	w := &writeRec{kind: kind, key: c.rec.gvr.Key(c.ns, name), client: writer, call: c.rec.clock()}
	var out *unstructured.Unstructured
	var err error
	switch kind {
	case create, update:
		w.value = c.rec.nextValue()
		obj := c.newObject(name, w.value)
		if kind == create {
			out, err = c.res.Create(ctx, obj, metav1.CreateOptions{})
		} else {
			obj.SetResourceVersion(rv) // optimistic: a conflict if it changed
			out, err = c.res.Update(ctx, obj, metav1.UpdateOptions{})
		}
	case remove:
		w.uid = uid
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{}}
		if uid != "" {
			u := types.UID(uid)
			opts.Preconditions.UID = &u
		}
		if rv != "" {
			opts.Preconditions.ResourceVersion = &rv
		}
		out, err = c.deleteWithAnswer(ctx, name, opts)
	}
	if err != nil {
		if st, _ := statusOf(err); st != nil && st.Code >= 400 && st.Code < 500 {
			return nil, st, nil // refused: nothing was written
		}
		return nil, nil, fmt.Errorf("%w: the %s of %s: %v", errUnknownOutcome, kind, name, err)
	}
	if out != nil {
		o := c.raw(out)
		if kind != remove {
			if o.value != w.value {
				return nil, nil, fmt.Errorf("the %s of %s was answered with %s=%q, not the value written %q", kind, name, ValueAnnotation, o.value, w.value)
			}
			w.uid = o.uid
		}
		w.rev = o.rv
		if w.rev == 0 {
			return nil, nil, fmt.Errorf("the %s of %s was answered with resourceVersion %q", kind, name, out.GetResourceVersion())
		}
	}
	c.rec.addWrite(w)
	if kind == remove {
		return nil, nil, nil
	}
	return out, nil, nil
}

// deleteWithAnswer deletes name and returns the deleted object when the
// server answers with it, nil when it answers with a Status (the dynamic
// client drops the answer, so the request is made here).
func (c *client) deleteWithAnswer(ctx context.Context, name string, opts metav1.DeleteOptions) (*unstructured.Unstructured, error) {
	body, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.objectURL(name), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("%s answered the delete of %s with %s that is not an object: %v", resp.Status, name, strings.TrimSpace(string(data)), err)
	}
	if u.GetKind() == "Status" {
		if resp.StatusCode >= 300 {
			return nil, apierrors.FromObject(&u)
		}
		return nil, nil
	}
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s answered the delete of %s with a %s", resp.Status, name, u.GetKind())
	}
	return &u, nil
}

// objectURL is the URL of the object name of the run's resource.
func (c *client) objectURL(name string) string {
	p := "/apis/" + c.gvr.Group + "/" + c.gvr.Version
	if c.gvr.Group == "" {
		p = "/api/" + c.gvr.Version
	}
	return c.host + p + "/namespaces/" + url.PathEscape(c.ns) + "/" + c.gvr.Resource + "/" + url.PathEscape(name)
}

// list makes one recorded list. It returns the items, the continue token
// of the result, the 410's token (the inconsistent continuation), and the
// status of a refusal; an error when the server did not answer.
func (c *client) list(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, *k8s.Status, string, error) {
	prefix := c.rec.prefix
	rec := &listRec{first: -1, call: c.rec.clock(),
		opts: k8s.ListOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch), Limit: o.Limit}}
	if o.Continue != "" {
		key, _, ok := decodeContinue(o.Continue, prefix)
		if !ok {
			key = o.Continue
		}
		rec.opts.Continue = key
		rec.first = c.rec.firstPage(o.Continue)
	}
	if sem, _, err := k8s.ListSemantic(rec.opts); err != nil {
		rec.semantic = "invalid"
	} else {
		rec.semantic = string(sem)
	}
	c.rec.compactMu.RLock()
	rec.compacts = c.rec.compactRev
	list, err := c.res.List(ctx, o)
	var inconsistent string
	switch {
	case err != nil:
		st, tok := statusOf(err)
		if st == nil {
			c.rec.compactMu.RUnlock()
			return nil, nil, "", err
		}
		rec.status, inconsistent = st, tok
		if tok != "" {
			if key, _, ok := decodeContinue(tok, prefix); ok {
				rec.status.Continue = key
			} else {
				rec.status.Continue = rec.opts.Continue
			}
		}
	default:
		rv, ok := k8s.ParseRV(list.GetResourceVersion())
		if !ok || rv == 0 {
			rec.status = &k8s.Status{Code: 500, Message: "the list's resourceVersion is " + list.GetResourceVersion()}
			break
		}
		rec.rv = rv
		for i := range list.Items {
			rec.items = append(rec.items, c.raw(&list.Items[i]))
		}
		if tok := list.GetContinue(); tok != "" {
			key, _, ok := decodeContinue(tok, prefix)
			if !ok {
				// Another server's token: the next page continues after
				// this page's last item, as far as the recording can tell.
				key = rec.opts.Continue
				if n := len(rec.items); n > 0 {
					key = rec.items[n-1].key
				}
			}
			rec.cont = key
		}
	}
	i := c.rec.addList(rec)
	c.rec.compactMu.RUnlock()
	switch {
	case inconsistent != "":
		c.rec.setFirstPage(inconsistent, i)
	case rec.status == nil && list.GetContinue() != "":
		first := rec.first
		if first < 0 || c.rec.listStatus(first) != nil {
			first = i
		}
		c.rec.setFirstPage(list.GetContinue(), first)
	}
	if rec.status != nil {
		return nil, rec.status, inconsistent, nil
	}
	return list, nil, "", nil
}

// watchOptions returns the model's options of a watch request.
func watchOptions(o metav1.ListOptions) k8s.WatchOptions {
	return k8s.WatchOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: string(o.ResourceVersionMatch),
		SendInitialEvents: o.SendInitialEvents, AllowWatchBookmarks: o.AllowWatchBookmarks}
}

// recordedWatch is an open watch whose events are recorded as they are
// read, and passed on through its ResultChan.
type recordedWatch struct {
	c    *client
	rec  *watchRec
	w    watch.Interface
	out  chan watch.Event
	stop chan struct{}
	done chan struct{}
	// before runs before an event is passed on (the informer's observer).
	before func()
}

// watch opens a recorded watch. A watch the server refused outright is
// recorded and returned with its status; an error means the request got
// no answer.
func (c *client) watch(ctx context.Context, o metav1.ListOptions, before func()) (*recordedWatch, *k8s.Status, error) {
	o.Watch = true
	rec := &watchRec{opts: watchOptions(o), call: c.rec.clock()}
	// The compaction in force while the watch is answered (its start is
	// chosen then).
	c.rec.compactMu.RLock()
	rec.compacts = c.rec.compactRev
	w, err := c.res.Watch(ctx, o)
	c.rec.compactMu.RUnlock()
	if err != nil {
		st, _ := statusOf(err)
		if st == nil {
			return nil, nil, err
		}
		rec.status = st
		c.rec.addWatch(rec)
		return nil, st, nil
	}
	c.rec.addWatch(rec)
	rw := &recordedWatch{c: c, rec: rec, w: w, out: make(chan watch.Event), stop: make(chan struct{}), done: make(chan struct{}), before: before}
	go rw.consume()
	return rw, nil, nil
}

func (rw *recordedWatch) consume() {
	defer close(rw.done)
	defer close(rw.out)
	defer rw.c.rec.endWatch(rw.rec)
	defer rw.w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-rw.w.ResultChan():
		case <-rw.stop:
			return
		}
		if !ok {
			return
		}
		rw.c.rec.addEvent(rw.rec, rw.c.rawEvent(ev))
		if rw.before != nil {
			rw.before()
		}
		select {
		case rw.out <- ev:
		case <-rw.stop:
			return
		}
	}
}

func (c *client) rawEvent(ev watch.Event) rawEvent {
	e := rawEvent{typ: k8s.EventType(ev.Type)}
	if ev.Type == watch.Error {
		st := apierrors.FromObject(ev.Object)
		if s, ok := st.(apierrors.APIStatus); ok && s.Status().Code != 0 {
			e.status = &k8s.Status{Code: int(s.Status().Code), Reason: string(s.Status().Reason), Message: s.Status().Message}
		} else {
			e.status = &k8s.Status{Code: 500, Message: fmt.Sprintf("an ERROR event without a Status: %v", st)}
		}
		return e
	}
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		e.typ, e.status = k8s.Error, &k8s.Status{Code: 500, Message: fmt.Sprintf("a %s event without metadata: %v", ev.Type, err)}
		return e
	}
	if ev.Type == watch.Bookmark {
		e.obj.rv, _ = k8s.ParseRV(m.GetResourceVersion())
		e.initialEnd = m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		return e
	}
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		uo, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ev.Object)
		if err != nil {
			e.typ, e.status = k8s.Error, &k8s.Status{Code: 500, Message: err.Error()}
			return e
		}
		u = &unstructured.Unstructured{Object: uo}
	}
	e.obj = c.raw(u)
	return e
}

// ResultChan is the watch's events, closed when it ends.
func (rw *recordedWatch) ResultChan() <-chan watch.Event { return rw.out }

// Stop ends the watch (the client gives up) and waits until it is recorded.
func (rw *recordedWatch) Stop() {
	select {
	case <-rw.stop:
	default:
		close(rw.stop)
	}
	<-rw.done
}
