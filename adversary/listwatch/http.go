package listwatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/watchspec/watchspec/impl/informer"
)

// Handler returns the adversary served over HTTP as the Kubernetes REST
// API's list and watch of its resource, so that an unmodified client-go —
// its REST client, watch stream decoder, status handling and Reflector —
// lists and watches through it:
//
//	srv := httptest.NewServer(lw.Handler())
//	defer srv.Close()
//	cfg := &rest.Config{Host: srv.URL}   // client-go's dynamic client, typed clientset, informers …
//
// See [NewHandler] for what is served and how. Over HTTP the adversary
// takes two more kinds of choice, legal only on the wire, where chunk
// boundaries carry nothing (HTTP/1.1's chunked transfer coding, RFC 9112
// §7.1; SPEC §6): WireSplit writes a watch event in several flushed
// chunks, cut anywhere inside its JSON, and WireJoin writes several events
// that come within a few milliseconds of each other as one chunk. They
// test the client's stream decoder; they are logged and counted like the
// others, per watch served ("http watch N").
func (a *ListWatch) Handler() http.Handler { return a.HandlerFor(a) }

// HandlerFor is [ListWatch.Handler] serving src instead of a itself — a
// wrapper of a, such as a recorder of what it answers — with a's wire
// choices.
func (a *ListWatch) HandlerFor(src informer.ListerWatcher) http.Handler {
	h := NewHandler(src, a.gvr, a.namespace).(*handler)
	h.wire = a
	return h
}

// NewHandler serves src — the adversary ([New]), the store's own
// [informer.StoreListWatch], or any [informer.ListerWatcher], such as a
// recording wrapper — over HTTP as the Kubernetes REST API serves the list
// and watch of resource gvr; namespace is the one src serves ("" for every
// namespace).
//
// It serves GET on <prefix>/<resource> and
// <prefix>/namespaces/{namespace}/<resource>, where <prefix> is /api/v1
// for the core group and /apis/<group>/<version> otherwise:
//
//   - a list (no watch parameter, or watch=false): resourceVersion,
//     resourceVersionMatch (Exact, NotOlderThan), limit and continue go to
//     src.List; the answer is a <Kind>List with metadata.resourceVersion
//     and metadata.continue.
//   - a watch (watch=true or watch=1): resourceVersion,
//     resourceVersionMatch, allowWatchBookmarks, sendInitialEvents and
//     timeoutSeconds go to src.Watch; the answer is a chunked stream of
//     newline-terminated JSON watch events {"type":…,"object":…}, flushed
//     one by one. A BOOKMARK's object carries only metadata.resourceVersion
//     (and the annotation k8s.io/initial-events-end: "true" on a
//     WatchList's end bookmark); an ERROR's object is a Status.
//   - errors as a Status with its HTTP code: what src refuses (410 Expired
//     "too old resource version", 504 Timeout with cause
//     ResourceVersionTooLarge, 400), a malformed parameter (400, naming
//     it), a labelSelector or fieldSelector (400: not served), a path not
//     served (404), any method but GET (405: nothing is written through
//     it; write to the store underneath). Discovery (/api, /apis) is not
//     served either: a client that needs it (controller-runtime's
//     RESTMapper) needs a mapper of its own.
//
// Objects are served with apiVersion, kind (ConfigMap for configmaps,
// else the resource's name singular and capitalised), metadata name,
// namespace, resourceVersion (the revision of the object's last write; of
// the deletion in a DELETED event) and uid (the revision that created
// this life of the object), and the stored value as data.value: one
// fixed mapping, so that what a client's cache ends with can be compared
// with the store value for value (conform/informertest reads it back the
// same way).
//
// A request for a namespace when src serves every namespace is answered
// from src filtered to that namespace: pages of a limited list may then
// hold fewer items than the limit, as SPEC §4.2 allows. A request for
// every namespace, or another namespace, when src serves one is answered
// 404.
//
// Watch errors follow the API server (k8s.io/apiserver v0.37): a watch
// that src refuses when it is opened (src.Watch returns a status) is
// answered with that status and no stream, as the watch handler answers
// an error from the storage's Watch; a watch from a resourceVersion too
// old is opened — 200 — and its stream holds one ERROR event carrying
// the 410 Expired Status, then ends, as the cacher answers it
// (storage/cacher/cacher.go Watch: "other errors must fail with a watch
// event of type ERROR, rather than a directly returned error", with
// newErrWatcher), which is what the adversary's watches do. A watch whose
// src watch ends, or whose timeoutSeconds pass, ends its response
// normally (endpoints/handlers/watch.go: the serving loop returns when
// the watcher's result channel closes or its timeout fires); the client
// sees the stream end and watches again.
func NewHandler(src informer.ListerWatcher, gvr informer.GVR, namespace string) http.Handler {
	h := &handler{src: src, gvr: gvr, namespace: namespace, apiVersion: gvr.Version, kind: kindOf(gvr.Resource)}
	if gvr.Group == "" {
		h.prefix = "/api/" + gvr.Version + "/"
	} else {
		h.prefix = "/apis/" + gvr.Group + "/" + gvr.Version + "/"
		h.apiVersion = gvr.Group + "/" + gvr.Version
	}
	return h
}

func kindOf(resource string) string {
	if resource == "configmaps" {
		return "ConfigMap"
	}
	s := strings.TrimSuffix(resource, "s")
	if s == "" {
		return resource
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

type handler struct {
	src        informer.ListerWatcher
	gvr        informer.GVR
	namespace  string
	prefix     string // "/api/v1/"
	apiVersion string
	kind       string
	wire       *ListWatch // draws and logs the wire choices; nil: none
}

// status is metav1.Status as JSON.
type status struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   struct{}       `json:"metadata"`
	Status     string         `json:"status"`
	Message    string         `json:"message,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	Details    *statusDetails `json:"details,omitempty"`
	Code       int            `json:"code"`
}

type statusDetails struct {
	Causes            []statusCause `json:"causes,omitempty"`
	RetryAfterSeconds int           `json:"retryAfterSeconds,omitempty"`
}

type statusCause struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Field   string `json:"field,omitempty"`
}

func failure(code int, reason, format string, args ...any) *status {
	return &status{APIVersion: "v1", Kind: "Status", Status: "Failure", Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// statusOf is the Status the API server answers err with.
func statusOf(err error) *status {
	var se *informer.StatusError
	if !errors.As(err, &se) {
		return failure(http.StatusInternalServerError, "InternalError", "%v", err)
	}
	s := failure(se.Code, se.Reason, "%s", se.Message)
	if informer.IsTooLargeResourceVersion(err) {
		// apiserver's storage.NewTooLargeResourceVersionError: client-go's
		// Reflector recognises it by this cause and relists.
		s.Details = &statusDetails{RetryAfterSeconds: 1, Causes: []statusCause{{Reason: "ResourceVersionTooLarge", Message: "Too large resource version"}}}
	}
	return s
}

func writeStatus(w http.ResponseWriter, s *status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(s.Code)
	_ = json.NewEncoder(w).Encode(s) // the client is gone if it fails
}

type objectMeta struct {
	Name            string            `json:"name,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

type object struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   objectMeta        `json:"metadata"`
	Data       map[string]string `json:"data,omitempty"`
}

func (h *handler) object(o informer.Object) object {
	out := object{APIVersion: h.apiVersion, Kind: h.kind, Metadata: objectMeta{Name: o.Name, Namespace: o.Namespace,
		ResourceVersion: informer.RV(o.ResourceVersion)}, Data: map[string]string{"value": o.Value}}
	if o.UID != 0 {
		out.Metadata.UID = strconv.FormatInt(o.UID, 10)
	}
	return out
}

type listMeta struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Continue        string `json:"continue,omitempty"`
}

type list struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   listMeta `json:"metadata"`
	Items      []object `json:"items"`
}

type watchEvent struct {
	Type   informer.EventType `json:"type"`
	Object any                `json:"object"`
}

// query holds the parsed parameters of a list or watch.
type query struct {
	watch                bool
	resourceVersion      string
	resourceVersionMatch string
	limit                int64
	cont                 string
	allowWatchBookmarks  bool
	sendInitialEvents    *bool
	timeoutSeconds       int64
}

func parseQuery(r *http.Request) (query, *status) {
	v := r.URL.Query()
	var q query
	bad := func(param, val, want string) *status {
		s := failure(http.StatusBadRequest, "BadRequest", "parameter %s: invalid value %q: %s", param, val, want)
		s.Details = &statusDetails{Causes: []statusCause{{Reason: "FieldValueInvalid", Message: want, Field: param}}}
		return s
	}
	boolean := func(param string) (bool, bool, *status) {
		s, ok := v[param]
		if !ok || s[0] == "" {
			return false, false, nil
		}
		b, err := strconv.ParseBool(s[0])
		if err != nil {
			return false, false, bad(param, s[0], "want true or false")
		}
		return b, true, nil
	}
	integer := func(param string) (int64, *status) {
		s := v.Get(param)
		if s == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, bad(param, s, "want a non-negative integer")
		}
		return n, nil
	}
	var st *status
	if q.watch, _, st = boolean("watch"); st != nil {
		return q, st
	}
	if q.allowWatchBookmarks, _, st = boolean("allowWatchBookmarks"); st != nil {
		return q, st
	}
	sie, set, st := boolean("sendInitialEvents")
	if st != nil {
		return q, st
	}
	if set {
		q.sendInitialEvents = &sie
	}
	if q.limit, st = integer("limit"); st != nil {
		return q, st
	}
	if q.timeoutSeconds, st = integer("timeoutSeconds"); st != nil {
		return q, st
	}
	q.resourceVersion, q.cont = v.Get("resourceVersion"), v.Get("continue")
	switch q.resourceVersionMatch = v.Get("resourceVersionMatch"); q.resourceVersionMatch {
	case "", "Exact", "NotOlderThan":
	default:
		return q, bad("resourceVersionMatch", q.resourceVersionMatch, "want Exact or NotOlderThan")
	}
	for _, p := range []string{"labelSelector", "fieldSelector"} {
		if s := v.Get(p); s != "" {
			return q, bad(p, s, "selectors are not served by this test server; filter in the client")
		}
	}
	return q, nil
}

// ServeHTTP answers a list or a watch.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ns, ok := h.route(r.URL.Path)
	if !ok {
		writeStatus(w, failure(http.StatusNotFound, "NotFound", "the server could not find the requested resource: it serves the list and watch of %s only, at %s%s and %snamespaces/{namespace}/%s",
			h.gvr, h.prefix, h.gvr.Resource, h.prefix, h.gvr.Resource))
		return
	}
	if h.namespace != "" && ns != h.namespace {
		writeStatus(w, failure(http.StatusNotFound, "NotFound", "this server serves %s in namespace %q only, at %snamespaces/%s/%s", h.gvr, h.namespace, h.prefix, h.namespace, h.gvr.Resource))
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeStatus(w, failure(http.StatusMethodNotAllowed, "MethodNotAllowed", "%s is not supported: this server serves only list and watch (GET) of %s; write to its store", r.Method, h.gvr))
		return
	}
	q, st := parseQuery(r)
	if st != nil {
		writeStatus(w, st)
		return
	}
	filter := ""
	if h.namespace == "" {
		filter = ns
	}
	if q.watch {
		h.watch(w, r, q, filter)
		return
	}
	l, err := h.src.List(r.Context(), informer.ListOptions{ResourceVersion: q.resourceVersion, ResourceVersionMatch: q.resourceVersionMatch,
		Limit: q.limit, Continue: q.cont})
	if err != nil {
		writeStatus(w, statusOf(err))
		return
	}
	out := list{APIVersion: h.apiVersion, Kind: h.kind + "List", Items: []object{},
		Metadata: listMeta{ResourceVersion: informer.RV(l.ResourceVersion), Continue: l.Continue}}
	for _, o := range l.Items {
		if filter == "" || o.Namespace == filter {
			out.Items = append(out.Items, h.object(o))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out) // the client is gone if it fails
}

// route returns the namespace of a path served ("" for every namespace).
func (h *handler) route(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, h.prefix)
	if !ok {
		return "", false
	}
	if rest == h.gvr.Resource {
		return "", true
	}
	parts := strings.Split(rest, "/")
	if len(parts) == 3 && parts[0] == "namespaces" && parts[1] != "" && parts[2] == h.gvr.Resource {
		return parts[1], true
	}
	return "", false
}

func (h *handler) watch(w http.ResponseWriter, r *http.Request, q query, filter string) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	wa, err := h.src.Watch(ctx, informer.WatchOptions{ResourceVersion: q.resourceVersion, ResourceVersionMatch: q.resourceVersionMatch,
		SendInitialEvents: q.sendInitialEvents, AllowWatchBookmarks: q.allowWatchBookmarks, TimeoutSeconds: q.timeoutSeconds})
	if err != nil {
		writeStatus(w, statusOf(err))
		return
	}
	defer wa.Stop()
	var timeout <-chan time.Time
	if q.timeoutSeconds > 0 {
		t := time.NewTimer(time.Duration(q.timeoutSeconds) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	var wire *wireChoices
	if h.wire != nil {
		n := h.wire.httpWatches.Add(1)
		wire = &wireChoices{a: h.wire, call: fmt.Sprintf("http watch %d", n), rng: h.wire.rng(3, n)}
	}
	var buf bytes.Buffer
	for {
		var ev informer.Event
		var ok bool
		select {
		case ev, ok = <-wa.ResultChan():
			if !ok {
				return
			}
		case <-timeout:
			return
		case <-ctx.Done():
			return
		}
		buf.Reset()
		if !h.encode(&buf, ev, filter) {
			continue
		}
		events, rev, ended := 1, ev.Object.ResourceVersion, false
		if wire != nil && wire.rng.Float64() < wire.a.p.pWireJoin {
			// Join the events that follow within joinWait, up to 4 in all;
			// a watch that ends meanwhile ends after them.
			wait := time.NewTimer(joinWait)
		join:
			for events < 4 {
				select {
				case ev, ok = <-wa.ResultChan():
					if !ok {
						ended = true
						break join
					}
					if h.encode(&buf, ev, filter) {
						events, rev = events+1, ev.Object.ResourceVersion
					}
				case <-wait.C:
					break join
				case <-ctx.Done():
					ended = true
					break join
				}
			}
			wait.Stop()
			if events > 1 {
				wire.a.record(WireJoin, wire.call, rev, "%d watch events written as one chunk of %d bytes", events, buf.Len())
			}
		}
		if wire.write(w, rc, buf.Bytes()) != nil || ended {
			return
		}
	}
}

// joinWait bounds how long a WireJoin holds an event back for the next.
const joinWait = 5 * time.Millisecond

// encode appends ev to buf as a line of JSON, unless the namespace filter
// drops it.
func (h *handler) encode(buf *bytes.Buffer, ev informer.Event, filter string) bool {
	out := watchEvent{Type: ev.Type}
	switch ev.Type {
	case informer.Error:
		s := failure(http.StatusGone, informer.ReasonExpired, "the watch ended with an error")
		if ev.Err != nil {
			s = statusOf(ev.Err)
		}
		out.Object = s
	case informer.Bookmark:
		b := object{APIVersion: h.apiVersion, Kind: h.kind, Metadata: objectMeta{ResourceVersion: informer.RV(ev.Object.ResourceVersion)}}
		if ev.InitialEventsEnd {
			b.Metadata.Annotations = map[string]string{informer.InitialEventsAnnotation: "true"}
		}
		out.Object = b
	default:
		if filter != "" && ev.Object.Namespace != filter {
			return false
		}
		out.Object = h.object(ev.Object)
	}
	return json.NewEncoder(buf).Encode(out) == nil // Encode ends the line
}

// wireChoices draws the wire choices of one watch served over HTTP.
type wireChoices struct {
	a    *ListWatch
	call string
	rng  *rand.Rand
}

// write writes p and flushes it: in one chunk, or — a WireSplit — in
// 2 to 4 chunks cut at random offsets.
func (c *wireChoices) write(w http.ResponseWriter, rc *http.ResponseController, p []byte) error {
	if c == nil || len(p) < 2 || c.rng.Float64() >= c.a.p.pWireSplit {
		if _, err := w.Write(p); err != nil {
			return err
		}
		return rc.Flush()
	}
	cuts := map[int]bool{}
	for range 1 + c.rng.IntN(3) {
		cuts[1+c.rng.IntN(len(p)-1)] = true
	}
	at := make([]int, 0, len(cuts)+1)
	for i := 1; i < len(p); i++ {
		if cuts[i] {
			at = append(at, i)
		}
	}
	c.a.record(WireSplit, c.call, 0, "%d bytes of watch events written in %d chunks, cut at %v", len(p), len(at)+1, at)
	prev := 0
	for _, i := range append(at, len(p)) {
		if _, err := w.Write(p[prev:i]); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
		prev = i
	}
	return nil
}
