package informer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
)

// ListOptions are the options of a list that concern resourceVersion and
// paging (metav1.ListOptions).
type ListOptions struct {
	// ResourceVersion: "" asks for the most recent state (a consistent
	// read), "0" for any state (possibly stale), N for a state not older
	// than N — or exactly N with ResourceVersionMatch "Exact", or (the
	// legacy meaning) with a Limit.
	ResourceVersion string
	// ResourceVersionMatch is "", "Exact" or "NotOlderThan".
	ResourceVersionMatch string
	// Limit bounds the items of a page (0: no limit); the response's
	// Continue then asks for the next page, at the same revision.
	Limit    int64
	Continue string
}

// List is a list response: the revision it read and the objects under the
// prefix at that revision, in key order.
type List struct {
	ResourceVersion int64
	Items           []Object
	// Continue, when set, fetches the next page (ListOptions.Continue).
	Continue string
}

// WatchOptions are the options of a watch.
type WatchOptions struct {
	// ResourceVersion: a watch at N delivers the changes after N. "" and
	// "0" open with the state (one ADDED per object) and then the changes
	// after it, unless SendInitialEvents is false.
	ResourceVersion      string
	ResourceVersionMatch string
	// SendInitialEvents asks for a WatchList (KEP-3157): the state at a
	// revision ≥ ResourceVersion as ADDED events sorted by key, then a
	// BOOKMARK annotated k8s.io/initial-events-end at that revision (with
	// AllowWatchBookmarks), then the changes after it. It requires
	// ResourceVersionMatch "NotOlderThan".
	SendInitialEvents *bool
	// AllowWatchBookmarks lets the server send BOOKMARK events: "every
	// change up to this resourceVersion has been sent".
	AllowWatchBookmarks bool
	// TimeoutSeconds ends the watch (a normal close) after that long; 0
	// means never.
	TimeoutSeconds int64
}

// EventType is the type of a watch event.
type EventType string

// The watch event types.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// InitialEventsAnnotation is the annotation of the bookmark that ends a
// WatchList's initial events (metav1.InitialEventsAnnotationKey).
const InitialEventsAnnotation = "k8s.io/initial-events-end"

// Event is one event of a watch. A DELETED event carries the object's last
// state with the revision of the deletion; a BOOKMARK only a
// resourceVersion; an ERROR a status and nothing else — the stream ends
// after it.
type Event struct {
	Type   EventType
	Object Object
	// InitialEventsEnd marks the bookmark annotated k8s.io/initial-events-end.
	InitialEventsEnd bool
	Err              *StatusError
}

// Watcher is an open watch (apimachinery's watch.Interface).
type Watcher interface {
	// ResultChan delivers the events; it is closed when the watch ends.
	ResultChan() <-chan Event
	// Stop ends the watch; it may be called more than once.
	Stop()
}

// ListerWatcher is what a [Reflector] lists and watches: client-go's
// ListerWatcher over this package's types.
type ListerWatcher interface {
	List(ctx context.Context, opts ListOptions) (*List, error)
	Watch(ctx context.Context, opts WatchOptions) (Watcher, error)
}

// ListWatch adapts two functions to a [ListerWatcher].
type ListWatch struct {
	ListFunc  func(ctx context.Context, opts ListOptions) (*List, error)
	WatchFunc func(ctx context.Context, opts WatchOptions) (Watcher, error)
}

// List implements [ListerWatcher].
func (lw ListWatch) List(ctx context.Context, o ListOptions) (*List, error) {
	return lw.ListFunc(ctx, o)
}

// Watch implements [ListerWatcher].
func (lw ListWatch) Watch(ctx context.Context, o WatchOptions) (Watcher, error) {
	return lw.WatchFunc(ctx, o)
}

// StoreOptions configure a [StoreListWatch].
type StoreOptions struct {
	// Clock times watch timeouts and periodic bookmarks (default RealClock).
	Clock Clock
	// BookmarkInterval, when positive, asks every open watch that allows
	// bookmarks for a progress notification that often. Whatever it is, the
	// store's own progress notifications (watchhub.Options.ProgressInterval)
	// become bookmarks too, and so do those [StoreListWatch.RequestBookmarks]
	// asks for.
	BookmarkInterval time.Duration
}

// StoreListWatch serves Kubernetes list and watch of one resource over the
// reference store, as the API server's etcd3 storage layer does
// (apiserver/pkg/storage/etcd3): an object's resourceVersion is its key's
// ModRevision, its UID the CreateRevision; a list is a Range at one
// revision; a watch at N is a store watch from N+1 with PrevKV. It is safe
// for concurrent use.
//
// Lists (the API concepts page, "Resource versions"): resourceVersion unset
// reads the current revision (consistent); "0" may read any revision and
// reads the current one; N not older than N reads the current revision and
// answers 504 "Too large resource version" if that is below N; Exact N
// (resourceVersionMatch=Exact, or the legacy N with a limit) reads N and
// answers 410 Expired if N is compacted; every page of a limited list is
// read at the first page's revision, its continue token carrying it, and a
// continuation of a compacted revision is answered 410. Invalid
// combinations are answered 400 (apimachinery's ValidateListOptions).
//
// Watches: a watch at N delivers every change after N — ADDED for a
// creation, MODIFIED for another write, DELETED with the previous object at
// the deletion's revision (its value is empty when a watch catching up from
// history finds it compacted) — and ERROR 410 Expired when the history it
// needs is compacted, at once or when compaction overtakes it (the stream
// then ends). A watch with resourceVersion "" and sendInitialEvents=false
// starts at the current revision. A watch that opens with a state (resourceVersion "" or "0", or
// sendInitialEvents=true) first sends ADDED for every object at the current
// revision R, sorted by key; a WatchList (sendInitialEvents with
// allowWatchBookmarks) then sends one BOOKMARK annotated
// k8s.io/initial-events-end at R; then the changes after R. A WatchList
// from N above the current revision is answered 504 at once (the API
// server waits up to 3 s first). With allowWatchBookmarks, the store's
// progress notifications become BOOKMARK events.
type StoreListWatch struct {
	st        *store.Store
	gvr       GVR
	prefix    string // the prefix listed and watched
	resPrefix string // the resource's prefix in every namespace
	opts      StoreOptions
	mu        sync.Mutex
	open      map[*storeWatcher]struct{}
}

// NewStoreListWatch serves the objects of resource gvr in namespace ("" for
// every namespace) of st.
func NewStoreListWatch(st *store.Store, gvr GVR, namespace string, opts StoreOptions) *StoreListWatch {
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	return &StoreListWatch{st: st, gvr: gvr, prefix: gvr.Prefix(namespace), resPrefix: gvr.Prefix(""), opts: opts,
		open: map[*storeWatcher]struct{}{}}
}

// Prefix returns the key prefix the ListWatch serves.
func (lw *StoreListWatch) Prefix() string { return lw.prefix }

// continueToken is the content of a continue token, as the API server's
// (apiserver/pkg/storage/continue.go): the revision of the first page and
// the key, relative to the prefix, the next page starts at.
type continueToken struct {
	APIVersion string `json:"v"`
	RV         int64  `json:"rv"`
	Start      string `json:"start"`
}

func encodeContinue(rv int64, relStart string) string {
	b, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", RV: rv, Start: relStart})
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseContinue decodes a continue token of a [StoreListWatch]: the
// revision of its list, and the key (relative to the listed prefix) the
// next page starts at.
func ParseContinue(token string) (rv int64, start string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, "", errors.New("continue key is not valid: " + err.Error())
	}
	var t continueToken
	if err := json.Unmarshal(b, &t); err != nil {
		return 0, "", errors.New("continue key is not valid: " + err.Error())
	}
	if t.APIVersion != "meta.k8s.io/v1" || t.RV <= 0 {
		return 0, "", errors.New("continue key is not valid: unknown version or revision")
	}
	return t.RV, t.Start, nil
}

type listSemantic int

const (
	mostRecent listSemantic = iota
	anyRevision
	notOlderThan
	exact
	continuation
)

// parseRV reads a resourceVersion: "" and "0" are 0; anything else must be
// a positive decimal without leading zeros.
func parseRV(s string) (int64, bool) {
	switch s {
	case "", "0":
		return 0, true
	}
	if s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// semanticOf applies the API concepts' table (and ValidateListOptions) to o.
func semanticOf(o ListOptions) (listSemantic, int64, *StatusError) {
	rv, ok := parseRV(o.ResourceVersion)
	switch {
	case !ok:
		return 0, 0, badRequest("resourceVersion %q is not a valid resource version", o.ResourceVersion)
	case o.Limit < 0:
		return 0, 0, badRequest("limit %d must not be negative", o.Limit)
	}
	switch o.ResourceVersionMatch {
	case "":
	case "Exact", "NotOlderThan":
		if o.ResourceVersion == "" {
			return 0, 0, badRequest("resourceVersionMatch is forbidden unless resourceVersion is provided")
		}
		if o.Continue != "" {
			return 0, 0, badRequest("resourceVersionMatch is forbidden when continue is provided")
		}
	default:
		return 0, 0, badRequest("resourceVersionMatch %q is not one of Exact, NotOlderThan", o.ResourceVersionMatch)
	}
	switch {
	case o.Continue != "":
		if rv != 0 {
			return 0, 0, badRequest("specifying resource version is not allowed when using continue")
		}
		return continuation, 0, nil
	case o.ResourceVersionMatch == "Exact":
		if rv == 0 {
			return 0, 0, badRequest("resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"")
		}
		return exact, rv, nil
	case o.ResourceVersion == "":
		return mostRecent, 0, nil
	case rv == 0:
		return anyRevision, 0, nil
	case o.ResourceVersionMatch == "" && o.Limit > 0:
		return exact, rv, nil // the legacy meaning of a limited list at a revision
	}
	return notOlderThan, rv, nil
}

// rangeErr maps a store error of a read at rev to the API's answer.
func (lw *StoreListWatch) rangeErr(err error, rev int64) error {
	switch {
	case errors.Is(err, store.ErrCompacted):
		return expired(rev, lw.st.CompactRevision())
	case errors.Is(err, store.ErrFutureRev):
		return tooLarge(rev, lw.st.Revision())
	}
	return err
}

// List implements [ListerWatcher]; the semantics are those of the type's
// documentation.
func (lw *StoreListWatch) List(ctx context.Context, o ListOptions) (*List, error) {
	sem, rv, serr := semanticOf(o)
	if serr != nil {
		return nil, serr
	}
	key, end := lw.prefix, mvcc.PrefixEnd(lw.prefix)
	var at int64 // the revision to read; 0: the current one
	switch sem {
	case continuation:
		tokRV, start, err := ParseContinue(o.Continue)
		if err != nil {
			return nil, badRequest("%v", err)
		}
		key, at = lw.prefix+start, tokRV
	case exact:
		at = rv
	}
	resp, err := lw.st.Range(ctx, store.RangeRequest{Key: key, RangeEnd: end, Revision: at, Limit: o.Limit})
	if err != nil {
		return nil, lw.rangeErr(err, at)
	}
	read := at
	if read == 0 {
		read = resp.Revision // a read at the current revision answers with it
	}
	if sem == notOlderThan && read < rv {
		return nil, tooLarge(rv, read)
	}
	l := &List{ResourceVersion: read, Items: make([]Object, 0, len(resp.KVs))}
	for _, kv := range resp.KVs {
		l.Items = append(l.Items, objectAt(lw.resPrefix, kv))
	}
	if resp.More && len(l.Items) > 0 {
		last := l.Items[len(l.Items)-1].Key
		l.Continue = encodeContinue(read, last[len(lw.prefix):]+"\x00")
	}
	return l, nil
}

// watchStart says how a watch with o starts: with the state (and a
// WatchList end bookmark) or at a revision; it answers 400 for invalid
// options (apimachinery's validateWatchOptions).
func watchStart(o WatchOptions) (initial, endBookmark bool, minRev, from int64, err *StatusError) {
	rv, ok := parseRV(o.ResourceVersion)
	if !ok {
		return false, false, 0, 0, badRequest("resourceVersion %q is not a valid resource version", o.ResourceVersion)
	}
	if o.SendInitialEvents == nil {
		if o.ResourceVersionMatch != "" {
			return false, false, 0, 0, badRequest("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
		}
		return rv == 0, false, 0, rv, nil
	}
	if o.ResourceVersionMatch != "NotOlderThan" {
		return false, false, 0, 0, badRequest("sendInitialEvents requires resourceVersionMatch NotOlderThan")
	}
	if !*o.SendInitialEvents {
		return false, false, 0, rv, nil
	}
	return true, o.AllowWatchBookmarks, rv, 0, nil
}

// Watch implements [ListerWatcher]; the semantics are those of the type's
// documentation. The returned watch ends when ctx is done, when Stop is
// called, after TimeoutSeconds, or when the store closes.
func (lw *StoreListWatch) Watch(ctx context.Context, o WatchOptions) (Watcher, error) {
	initial, endBookmark, minRev, from, serr := watchStart(o)
	if serr != nil {
		return nil, serr
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &storeWatcher{lw: lw, ch: make(chan Event), ctx: wctx, cancel: cancel, bookmarks: o.AllowWatchBookmarks, from: from}
	end := mvcc.PrefixEnd(lw.prefix)
	req := store.WatchRequest{Key: lw.prefix, RangeEnd: end, PrevKV: true, ProgressNotify: o.AllowWatchBookmarks}
	if !initial {
		if from > 0 {
			req.StartRevision = from + 1 // a watch at N delivers the changes after N
		}
		ws, err := lw.st.Watch(wctx, req)
		if err != nil {
			cancel()
			return nil, err
		}
		w.stream = ws
	} else {
		// The state at the current revision R, then a store watch from R+1;
		// should compaction overtake R in between, start again.
		for {
			resp, err := lw.st.Range(wctx, store.RangeRequest{Key: lw.prefix, RangeEnd: end})
			if err != nil {
				cancel()
				return nil, lw.rangeErr(err, 0)
			}
			if resp.Revision < minRev {
				cancel()
				return nil, tooLarge(minRev, resp.Revision)
			}
			req.StartRevision = resp.Revision + 1
			ws, err := lw.st.Watch(wctx, req)
			if err != nil {
				cancel()
				return nil, err
			}
			first, ok := ws.Recv(done) // the created response is queued already
			if ok == nil && first.Created {
				first, ok = ws.Recv(done) // a compaction cancel would be too
			}
			if ok == nil && first.Canceled && first.CompactRevision != 0 {
				ws.Close()
				continue
			}
			if ok == nil {
				w.pending = &first
			}
			w.stream = ws
			w.initial = make([]Object, 0, len(resp.KVs))
			for _, kv := range resp.KVs {
				w.initial = append(w.initial, objectAt(lw.resPrefix, kv))
			}
			w.stateRev, w.endBookmark = resp.Revision, endBookmark
			break
		}
	}
	lw.mu.Lock()
	lw.open[w] = struct{}{}
	lw.mu.Unlock()
	var timeout <-chan time.Time
	if o.TimeoutSeconds > 0 {
		t := lw.opts.Clock.NewTimer(time.Duration(o.TimeoutSeconds) * time.Second)
		w.timer = t
		timeout = t.C()
	}
	go w.run(timeout)
	if lw.opts.BookmarkInterval > 0 && o.AllowWatchBookmarks {
		go w.requestBookmarks(lw.opts.Clock, lw.opts.BookmarkInterval)
	}
	return w, nil
}

// done is a finished context: Recv with it polls.
var done = func() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}()

// RequestBookmarks asks every open watch that allows bookmarks for a
// progress notification, which arrives as a BOOKMARK once every change up
// to its revision has been sent.
func (lw *StoreListWatch) RequestBookmarks() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for w := range lw.open {
		if w.bookmarks {
			w.stream.RequestProgress()
		}
	}
}

// DropWatches ends every open watch as a broken connection would: their
// result channels close without an error event. For fault injection.
func (lw *StoreListWatch) DropWatches() {
	lw.mu.Lock()
	ws := make([]*storeWatcher, 0, len(lw.open))
	for w := range lw.open {
		ws = append(ws, w)
	}
	lw.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// storeWatcher is one watch of a StoreListWatch.
type storeWatcher struct {
	lw          *StoreListWatch
	stream      *store.WatchStream
	ch          chan Event
	ctx         context.Context
	cancel      context.CancelFunc
	timer       Timer
	bookmarks   bool
	from        int64 // the revision a watch that opens with no state starts after
	initial     []Object
	stateRev    int64
	endBookmark bool
	pending     *store.WatchResponse
}

func (w *storeWatcher) ResultChan() <-chan Event { return w.ch }

func (w *storeWatcher) Stop() { w.cancel() }

func (w *storeWatcher) send(e Event) bool {
	select {
	case w.ch <- e:
		return true
	case <-w.ctx.Done():
		return false
	}
}

func (w *storeWatcher) run(timeout <-chan time.Time) {
	defer func() {
		w.cancel()
		w.stream.Close()
		if w.timer != nil {
			w.timer.Stop()
		}
		w.lw.mu.Lock()
		delete(w.lw.open, w)
		w.lw.mu.Unlock()
		close(w.ch)
	}()
	go func() {
		select {
		case <-timeout:
			w.cancel()
		case <-w.ctx.Done():
		}
	}()
	for _, o := range w.initial {
		if !w.send(Event{Type: Added, Object: o}) {
			return
		}
	}
	if w.endBookmark {
		if !w.send(Event{Type: Bookmark, Object: Object{ResourceVersion: w.stateRev}, InitialEventsEnd: true}) {
			return
		}
	}
	w.initial = nil
	for {
		var resp store.WatchResponse
		if w.pending != nil {
			resp, w.pending = *w.pending, nil
		} else {
			var err error
			if resp, err = w.stream.Recv(w.ctx); err != nil {
				return
			}
		}
		switch {
		case resp.Created:
		case resp.Canceled:
			if resp.CompactRevision != 0 {
				w.send(Event{Type: Error, Err: expired(w.from, resp.CompactRevision)})
			}
			return
		case resp.IsProgressNotify():
			if w.bookmarks && !w.send(Event{Type: Bookmark, Object: Object{ResourceVersion: resp.Revision}}) {
				return
			}
		default:
			for _, e := range resp.Events {
				var ev Event
				switch {
				case e.Type == store.Delete:
					ev = Event{Type: Deleted, Object: deletedObject(w.lw.resPrefix, e)}
				case e.KV.CreateRevision == e.KV.ModRevision:
					ev = Event{Type: Added, Object: objectAt(w.lw.resPrefix, e.KV)}
				default:
					ev = Event{Type: Modified, Object: objectAt(w.lw.resPrefix, e.KV)}
				}
				if !w.send(ev) {
					return
				}
			}
		}
	}
}

func (w *storeWatcher) requestBookmarks(c Clock, every time.Duration) {
	for sleep(c, every, w.ctx.Done()) {
		w.stream.RequestProgress()
	}
}
