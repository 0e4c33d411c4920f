// Package informertest records informer runs against watchspec's reference
// store and checks them with the informer contract of docs/SPEC.md §5
// (k8s.CheckInformer): a [Recorder] wraps the writers, the informer's
// ListWatch and its handlers and builds the k8s.Run and the store's
// history; a [Harness] runs an informer under test — watchspec's own
// (impl/informer, [Reference]) or client-go's (proptest) — over a fresh
// store in a testing/synctest bubble, with fault injection; [Check] drives
// it with random writes and faults under rapid.
//
// It is a checker-side helper: it imports the model. impl/informer does not.
package informertest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// Recorder records one informer's runs over a store, and the writes that
// make the store's history. All its methods are safe for concurrent use.
//
// Every record carries its time: nanoseconds since the Recorder was made,
// on the clock of its goroutine (inside a testing/synctest bubble, the
// bubble's fake clock), taken under the lock that orders the log, so the
// log's times never decrease (docs/TRACE_FORMAT.md, "Order").
type Recorder struct {
	st     *store.Store
	prefix string
	t0     time.Time

	mu      sync.Mutex
	runs    []*k8s.Run
	infos   map[*k8s.Run]*traces.K8sInfo // the times and watch ids of each run
	cur     *k8s.Run
	info    *traces.K8sInfo               // infos[cur]
	views   map[int]map[string]k8s.Object // the current run's handlers' views
	first   map[string]*k8s.ListResult    // continue token → the first page of its list
	watchID int                           // the last watch id given (ids are unique across runs)

	model kv.State
	ops   []traces.Op

	lastSyncedRV int64
	synced       map[int]bool
}

// NewRecorder records runs of an informer of the objects under prefix in st.
// The store must be fresh (nothing written yet); every write must go through
// the Recorder.
func NewRecorder(st *store.Store, prefix string) *Recorder {
	r := &Recorder{st: st, prefix: prefix, t0: time.Now(), model: kv.Start(st.Revision()), infos: map[*k8s.Run]*traces.K8sInfo{}}
	r.NewRun()
	return r
}

// now returns the time of a record; the caller holds r.mu when the record
// goes into the log.
func (r *Recorder) now() int64 { return int64(time.Since(r.t0)) }

// clock returns the time now, for a record not yet in the log (the call of
// a list or a watch).
func (r *Recorder) clock() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now()
}

// Prefix returns the prefix the informer watches.
func (r *Recorder) Prefix() string { return r.prefix }

// Store returns the store.
func (r *Recorder) Store() *store.Store { return r.st }

// NewRun begins the run of a new informer (after a restart).
func (r *Recorder) NewRun() *k8s.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur = &k8s.Run{Prefix: r.prefix}
	r.info = &traces.K8sInfo{}
	r.infos[r.cur] = r.info
	r.runs = append(r.runs, r.cur)
	r.views = map[int]map[string]k8s.Object{}
	r.first = map[string]*k8s.ListResult{}
	r.lastSyncedRV = 0
	r.synced = map[int]bool{}
	return r.cur
}

// Runs returns every run recorded so far.
func (r *Recorder) Runs() []*k8s.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*k8s.Run(nil), r.runs...)
}

// entry appends e to the current run's log, at the current time; the
// caller holds r.mu.
func (r *Recorder) entry(e k8s.Entry) {
	r.cur.Entries = append(r.cur.Entries, e)
	r.info.Entries = append(r.info.Entries, traces.K8sEntryInfo{Time: r.now()})
}

// Start records that the informer starts now.
func (r *Recorder) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entry(k8s.Entry{Start: &k8s.StartEntry{Revision: r.st.Revision()}})
}

// HandlerAdded records the registration of handler h; call it before the
// registration, so that it precedes the handler's first notification.
func (r *Recorder) HandlerAdded(h int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.views[h] = map[string]k8s.Object{}
	r.entry(k8s.Entry{HandlerAdded: &h})
}

// Notify records a call of handler n.Handler.
func (r *Recorder) Notify(n k8s.Notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	view := r.views[n.Handler]
	if view == nil {
		view = map[string]k8s.Object{}
		r.views[n.Handler] = view
	}
	if n.Type == k8s.OnDelete {
		delete(view, n.Key())
	} else {
		view[n.New.Key] = *n.New
	}
	r.entry(k8s.Entry{Notification: &n})
}

// ObserveHasSynced records handler h's HasSynced (−1: the informer's) when
// it is observed true for the first time.
func (r *Recorder) ObserveHasSynced(h int, synced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if synced && !r.synced[h] {
		r.synced[h] = true
		r.entry(k8s.Entry{HasSynced: &h})
	}
}

// ObserveSyncedRV records the informer's LastSyncResourceVersion, read by
// get under the recorder's lock (so that observations are logged in the
// order they are made), when it changed since the last observation (""
// is not recorded).
func (r *Recorder) ObserveSyncedRV(get func() string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := k8s.ParseRV(get())
	if !ok || n == 0 {
		return
	}
	if n != r.lastSyncedRV {
		r.lastSyncedRV = n
		r.entry(k8s.Entry{SyncedRV: &n})
	}
}

// Resync records that a periodic resync starts.
func (r *Recorder) Resync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entry(k8s.Entry{Resync: true})
}

// Quiesced records that writes stopped and the run waited.
func (r *Recorder) Quiesced() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entry(k8s.Entry{Quiesced: true})
}

// Finish records the informer's final cache and returns the run.
func (r *Recorder) Finish(cache []k8s.Object) *k8s.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	sort.Slice(cache, func(i, j int) bool { return cache[i].Key < cache[j].Key })
	r.cur.Cache = cache
	r.info.Cache = traces.K8sEntryInfo{Time: r.now()}
	return r.cur
}

// View returns handler h's view: its notifications applied in order.
func (r *Recorder) View(h int) map[string]k8s.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]k8s.Object, len(r.views[h]))
	for k, o := range r.views[h] {
		out[k] = o
	}
	return out
}

// Handlers returns the handlers of the current run.
func (r *Recorder) Handlers() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hs []int
	for h := range r.views {
		hs = append(hs, h)
	}
	sort.Ints(hs)
	return hs
}

// Object converts an informer object to the model's.
func Object(o informer.Object) k8s.Object {
	return k8s.Object{Key: o.Key, Value: o.Value, ResourceVersion: o.ResourceVersion, UID: o.UID}
}

// --- The writers ---

// write runs one write on the store and the model and records it as an op
// of client 1; the store must answer as the model does.
func (r *Recorder) write(req kv.Request, do func() (kv.Response, error)) (kv.Response, error) {
	r.mu.Lock()
	call := r.now()
	r.mu.Unlock()
	got, err := do()
	if err != nil {
		return kv.Response{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next, want := kv.Step(r.model, req)
	if want.Err != nil || !kv.SameResponse(got, want) {
		return kv.Response{}, fmt.Errorf("the store answered %+v to %+v, the model %+v", got, req, want)
	}
	r.model = next
	r.ops = append(r.ops, traces.Op{Client: 1, Call: call, Return: r.now(), Request: req, Response: &got})
	return got, nil
}

// Put writes key (a create or an update) and returns its revision.
func (r *Recorder) Put(ctx context.Context, key, value string) (int64, error) {
	resp, err := r.write(kv.Request{Put: &kv.PutRequest{Key: key, Value: value}}, func() (kv.Response, error) {
		p, err := r.st.Put(ctx, store.PutRequest{Key: key, Value: value})
		return kv.Response{Revision: p.Revision, Put: &kv.PutResponse{}}, err
	})
	return resp.Revision, err
}

// Delete deletes key.
func (r *Recorder) Delete(ctx context.Context, key string) (int64, error) {
	resp, err := r.write(kv.Request{Delete: &kv.DeleteRequest{Key: key}}, func() (kv.Response, error) {
		d, err := r.st.Delete(ctx, store.DeleteRequest{Key: key})
		return kv.Response{Revision: d.Revision, Delete: &kv.DeleteResponse{Deleted: d.Deleted}}, err
	})
	return resp.Revision, err
}

// Compact compacts the store at rev.
func (r *Recorder) Compact(ctx context.Context, rev int64) error {
	_, err := r.write(kv.Request{Compact: &kv.CompactRequest{Revision: rev}}, func() (kv.Response, error) {
		c, err := r.st.Compact(ctx, rev)
		return kv.Response{Revision: c.Revision, Compact: &kv.CompactResponse{}}, err
	})
	return err
}

// Objects returns what the model holds under the prefix now.
func (r *Recorder) Objects() map[string]k8s.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]k8s.Object{}
	for _, k := range r.model.Snapshot(r.prefix, kv.PrefixEnd(r.prefix), r.model.Revision()) {
		out[k.Key] = k8s.FromKV(k)
	}
	return out
}

// CompactRevision returns the store's compaction revision (0: none).
func (r *Recorder) CompactRevision() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.model.CompactRevision()
}

// History returns the store's committed history for k8s.CheckInformer.
func (r *Recorder) History() (k8s.History, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return k8s.NewHistory(r.model.History())
}

// Trace returns the writes and the current run as a trace, which
// linearizability.Check (and watchspec check) validates.
func (r *Recorder) Trace(system, version string) *traces.Trace {
	r.mu.Lock()
	run := r.cur
	r.mu.Unlock()
	return r.TraceOf(run, system, version)
}

// neverCompacted is the compaction in force when a Recorder starts: its
// store is fresh.
var neverCompacted int64 = -1

// TraceOf returns the writes and run (one of [Recorder.Runs]) as a trace
// (format version 2: every Kubernetes record timed, watches named by the
// ids the recorder gave them).
func (r *Recorder) TraceOf(run *k8s.Run, system, version string) *traces.Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	info := *r.infos[run]
	return &traces.Trace{
		Header: traces.Header{System: system, SystemVersion: version, Start: "2026-11-30T00:00:00Z", Tool: "internal/informertest", UniqueValues: true,
			BaseCompactRevision: &neverCompacted},
		Ops:     append([]traces.Op(nil), r.ops...),
		K8s:     run,
		K8sInfo: &info,
	}
}

// --- The ListWatch ---

// continueAfter decodes a continue token into the key its page starts
// after, as the model reads it.
func (r *Recorder) continueAfter(tok string) string {
	if tok == "" {
		return ""
	}
	_, start, err := informer.ParseContinue(tok)
	if err != nil {
		return tok
	}
	return r.prefix + strings.TrimSuffix(start, "\x00")
}

func status(err error) *k8s.Status {
	s, ok := err.(*informer.StatusError)
	if !ok {
		return nil
	}
	return &k8s.Status{Code: s.Code, Reason: s.Reason, Message: s.Message}
}

// recordList records a list sent at call (a time) when before was
// committed and the compaction in force was compacted (0: it changed
// while the list was answered, so it is unknown), answered when after was
// committed.
func (r *Recorder) recordList(o informer.ListOptions, l *informer.List, err error, before, after, compacted, call int64) {
	st := status(err)
	if err != nil && st == nil {
		return // not an answer of the server (the caller gave up)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := k8s.ListCall{Prefix: r.prefix, Before: before, After: after, CompactRevision: compacted,
		Options: k8s.ListOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: o.ResourceVersionMatch, Limit: o.Limit, Continue: r.continueAfter(o.Continue)}}
	if o.Continue != "" {
		c.First = r.first[o.Continue]
	}
	if st != nil {
		c.Result.Status = st
	} else {
		c.Result = k8s.ListResult{ResourceVersion: l.ResourceVersion, Continue: r.continueAfter(l.Continue)}
		for _, it := range l.Items {
			c.Result.Items = append(c.Result.Items, Object(it))
		}
		if l.Continue != "" {
			first := c.First
			if first == nil {
				res := c.Result
				first = &res
			}
			r.first[l.Continue] = first
		}
	}
	r.cur.Lists = append(r.cur.Lists, c)
	i := len(r.cur.Lists) - 1
	r.entry(k8s.Entry{List: &i})
	r.info.Lists = append(r.info.Lists, traces.K8sListInfo{Call: call, Return: r.info.Entries[len(r.info.Entries)-1].Time})
}

// watchStarted records a watch sent at call (a time) when before was
// committed and the compaction in force was compacted (0: unknown), and,
// for a watch refused, answered when after was committed; it returns its
// index in the run and the run.
func (r *Recorder) watchStarted(o informer.WatchOptions, before, after, compacted, call int64, err error) (int, *k8s.Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := k8s.WatchCall{Prefix: r.prefix, Before: before, After: before, CompactRevision: compacted, Status: status(err),
		Options: k8s.WatchOptions{ResourceVersion: o.ResourceVersion, ResourceVersionMatch: o.ResourceVersionMatch,
			SendInitialEvents: o.SendInitialEvents, AllowWatchBookmarks: o.AllowWatchBookmarks}}
	r.watchID++
	w := traces.K8sWatchInfo{ID: r.watchID, Time: call}
	if c.Status != nil {
		c.After, w.End = after, r.now() // refused: it ends where it was answered
	}
	r.cur.Watches = append(r.cur.Watches, c)
	r.info.Watches = append(r.info.Watches, w)
	return len(r.cur.Watches) - 1, r.cur
}

func (r *Recorder) watchEvent(run *k8s.Run, id int, ev informer.Event) {
	e := k8s.WatchEvent{Type: k8s.EventType(ev.Type), InitialEventsEnd: ev.InitialEventsEnd}
	switch ev.Type {
	case informer.Error:
		if ev.Err != nil {
			e.Status = &k8s.Status{Code: ev.Err.Code, Reason: ev.Err.Reason, Message: ev.Err.Message}
		}
	case informer.Bookmark:
		e.Object = k8s.Object{ResourceVersion: ev.Object.ResourceVersion}
	default:
		e.Object = Object(ev.Object)
	}
	after := r.st.Revision()
	r.mu.Lock()
	defer r.mu.Unlock()
	if run != r.cur {
		return // a watch of an informer that was stopped
	}
	c := &run.Watches[id]
	c.Events = append(c.Events, e)
	c.After = max(c.After, after)
	r.entry(k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: id, Event: e}})
}

func (r *Recorder) watchEnded(run *k8s.Run, id int) {
	after := r.st.Revision()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &run.Watches[id]
	c.After = max(c.After, after)
	r.infos[run].Watches[id].End = r.now()
}
