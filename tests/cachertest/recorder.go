package cachertest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// Recorder records the committed history (an etcd watch of the whole
// keyspace from revision 1), the compactions, and what the clients of the
// watch cache saw. Its methods are safe for concurrent use.
type Recorder struct {
	cancel context.CancelFunc
	done   chan struct{}
	// t0 is the trace's start: every time is nanoseconds since then.
	t0 time.Time

	hmu      sync.Mutex
	hcond    *sync.Cond
	hist     []*mvccpb.Event // every event of every commit, in revision order
	histHead int64
	histErr  error

	// compactMu is held for writing by a compaction and for reading by a
	// list, so that a list knows the compaction in force when it was
	// answered.
	compactMu      sync.RWMutex
	compactVersion int64 // compact_rev_key's version (etcd3.Compact's protocol)
	compactRev     int64 // −1: never compacted
	compactions    []compaction

	mu      sync.Mutex
	values  int
	lists   []*listRec
	watches []*watchRec
	entries []entry
	// writes holds the call and return times of the write that committed
	// each revision.
	writes map[int64][2]int64
	// cache is the final cache of an informer run, if one was recorded.
	cache    []rawObject
	hasCache bool
}

// now returns the time since the recording began; the caller holds r.mu
// when the record goes into the log (so that the log's times never
// decrease, docs/TRACE_FORMAT.md "Order").
func (r *Recorder) now() int64 { return int64(time.Since(r.t0)) }

// clock returns the time now, for a record not yet in the log.
func (r *Recorder) clock() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now()
}

// noteWrite records that the write that committed rev was sent at call and
// returned now.
func (r *Recorder) noteWrite(rev, call int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes[rev] = [2]int64{call, r.now()}
}

// compaction is a compaction at rev, made when the store was at revision
// at (compact_rev_key's write), sent at call and returned at ret (times).
type compaction struct{ rev, at, call, ret int64 }

// rawObject is an object as a client received it, before the history tells
// which life of its key (UID → create revision) it belongs to.
type rawObject struct {
	key, value string
	rv         int64
	uid        string
}

type listRec struct {
	prefix                  string
	opts                    k8s.ListOptions
	call, ret               int64 // times
	before, after, compacts int64
	status                  *k8s.Status
	rv                      int64
	items                   []rawObject
	cont                    string // the decoded continue token of the result
	first                   int    // the list of a continuation's first page, or −1
}

type rawEvent struct {
	time       int64
	typ        k8s.EventType
	obj        rawObject
	initialEnd bool
	status     *k8s.Status
}

type watchRec struct {
	prefix                  string
	opts                    k8s.WatchOptions
	call, end               int64 // times: sent, and ended (0: not yet)
	before, after, compacts int64
	status                  *k8s.Status
	events                  []rawEvent
}

// entry is one list (list ≥ 0) or one watch event (watch ≥ 0, event).
type entry struct {
	list, watch, event int
	// informer is an entry of an informer's log (list and watch are −1),
	// at time; its objects are raw until the history names their UIDs.
	informer *rawInformerEntry
	time     int64
}

// rawInformerEntry is an informer's log entry as recorded: a k8s.Entry
// whose notification objects are still raw.
type rawInformerEntry struct {
	entry    k8s.Entry // Notification unset
	note     *k8s.Notification
	old, new *rawObject
}

// Informer records an entry of the log of an informer run over the
// harness's storage (a client-go informer, in the tests): e has no
// Notification; see [Recorder.Notify].
func (r *Recorder) Informer(e k8s.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, entry{list: -1, watch: -1, informer: &rawInformerEntry{entry: e}, time: r.now()})
}

// Notify records a call of a handler of an informer run: n without its
// objects, which old and new carry raw.
func (r *Recorder) Notify(n k8s.Notification, old, new *rawObject) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, entry{list: -1, watch: -1, informer: &rawInformerEntry{note: &n, old: old, new: new}, time: r.now()})
}

// Start records that an informer starts now, when etcd is at head.
func (r *Recorder) Start(head int64) { r.Informer(k8s.Entry{Start: &k8s.StartEntry{Revision: head}}) }

// SetCache records the informer's final cache (raw objects).
func (r *Recorder) SetCache(objs []rawObject) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache = append([]rawObject(nil), objs...)
	r.hasCache = true
}

func newRecorder(ctx context.Context, c *clientv3.Client) (*Recorder, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Recorder{cancel: cancel, done: make(chan struct{}), t0: time.Now(), histHead: 1, compactRev: -1, writes: map[int64][2]int64{}}
	r.hcond = sync.NewCond(&r.hmu)
	head, err := c.Get(ctx, "compact_rev_key", clientv3.WithCountOnly())
	if err != nil {
		cancel()
		return nil, err
	}
	if head.Header.Revision != 1 {
		cancel()
		return nil, fmt.Errorf("etcd is not fresh (revision %d)", head.Header.Revision)
	}
	wch := c.Watch(clientv3.WithRequireLeader(ctx), "\x00", clientv3.WithFromKey(), clientv3.WithRev(1))
	go r.recordHistory(ctx, wch)
	return r, nil
}

func (r *Recorder) recordHistory(ctx context.Context, wch clientv3.WatchChan) {
	defer close(r.done)
	fail := func(err error) {
		r.hmu.Lock()
		if r.histErr == nil && ctx.Err() == nil {
			r.histErr = err
		}
		r.hcond.Broadcast()
		r.hmu.Unlock()
	}
	for resp := range wch {
		if err := resp.Err(); err != nil {
			fail(fmt.Errorf("the history watch failed: %w", err))
			return
		}
		r.hmu.Lock()
		for _, e := range resp.Events {
			r.hist = append(r.hist, e)
			r.histHead = max(r.histHead, e.Kv.ModRevision)
		}
		r.hcond.Broadcast()
		r.hmu.Unlock()
	}
	fail(errors.New("the history watch ended"))
}

func (r *Recorder) stop() {
	r.cancel()
	<-r.done
}

// waitHistory waits until the history holds every commit up to rev.
func (r *Recorder) waitHistory(ctx context.Context, rev int64) error {
	stop := context.AfterFunc(ctx, func() {
		r.hmu.Lock()
		r.hcond.Broadcast()
		r.hmu.Unlock()
	})
	defer stop()
	r.hmu.Lock()
	defer r.hmu.Unlock()
	for r.histHead < rev && r.histErr == nil && ctx.Err() == nil {
		r.hcond.Wait()
	}
	switch {
	case r.histHead >= rev:
		return nil
	case r.histErr != nil:
		return r.histErr
	}
	return fmt.Errorf("waiting for revision %d in the history (at %d): %w", rev, r.histHead, ctx.Err())
}

// nextValue returns a value never written before and a fresh UID.
func (r *Recorder) nextValue() (value, uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.values++
	return fmt.Sprintf("w%d", r.values), fmt.Sprintf("u%d", r.values)
}

// noteCompaction records a compaction at rev, made when the store was at
// revision at, sent at call (a time); the caller holds compactMu.
func (r *Recorder) noteCompaction(rev, at, call int64) {
	r.compactRev = rev
	ret := r.clock()
	r.compactions = append(r.compactions, compaction{rev, at, call, ret})
	r.mu.Lock()
	r.writes[at] = [2]int64{call, ret} // compact_rev_key's write
	r.mu.Unlock()
}

// CompactRevision returns the latest compaction revision (−1: none).
func (r *Recorder) CompactRevision() int64 {
	r.compactMu.RLock()
	defer r.compactMu.RUnlock()
	return r.compactRev
}

// --- The run ---

func (r *Recorder) addList(l *listRec) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.ret = r.now()
	r.lists = append(r.lists, l)
	i := len(r.lists) - 1
	r.entries = append(r.entries, entry{list: i, watch: -1})
	return i
}

// listStatus returns the status list i was answered with (nil: a result).
func (r *Recorder) listStatus(i int) *k8s.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists[i].status
}

func (r *Recorder) addWatch(w *watchRec) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.status != nil {
		w.end = r.now() // refused: it ends where it was answered
	}
	r.watches = append(r.watches, w)
	return len(r.watches) - 1
}

func (r *Recorder) addEvent(id int, e rawEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.watches[id]
	e.time = r.now()
	w.events = append(w.events, e)
	r.entries = append(r.entries, entry{list: -1, watch: id, event: len(w.events) - 1})
}

func (r *Recorder) watchOptions(id int) k8s.WatchOptions {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watches[id].opts
}

func (r *Recorder) endWatch(id int, after int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watches[id].after = max(r.watches[id].after, after)
	r.watches[id].end = r.now()
}

// Stats counts what was recorded.
type Stats struct {
	Commits, Compactions, Lists, Watches, Events int
}

func (s Stats) String() string {
	return fmt.Sprintf("%d commits, %d compactions, %d lists, %d watches, %d watch events", s.Commits, s.Compactions, s.Lists, s.Watches, s.Events)
}

// Stats returns the size of the recording so far.
func (r *Recorder) Stats() Stats {
	r.hmu.Lock()
	commits := int(r.histHead - 1)
	r.hmu.Unlock()
	r.compactMu.RLock()
	comp := len(r.compactions)
	r.compactMu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Commits: commits, Compactions: comp, Lists: len(r.lists), Watches: len(r.watches)}
	for _, w := range r.watches {
		s.Events += len(w.events)
	}
	return s
}

// --- The trace ---

// project returns the model's value of a stored value: the pod's
// spec.nodeName, which the harness sets to a value never written before, for
// the resource's keys; the raw value for any other key (compact_rev_key).
func project(key string, value []byte) (string, string, error) {
	if !strings.HasPrefix(key, GVR.Prefix("")) {
		return string(value), "", nil
	}
	obj, err := runtime.Decode(codec, value)
	if err != nil {
		return "", "", fmt.Errorf("decoding %q: %w", key, err)
	}
	pod, ok := obj.(*example.Pod)
	if !ok {
		return "", "", fmt.Errorf("%q holds a %T", key, obj)
	}
	return pod.Spec.NodeName, string(pod.UID), nil
}

// Trace returns the recording as a trace: the committed history up to
// etcd's current revision as one operation per commit (in revision order,
// with the compactions where they happened), and the run. Call it after
// every list and watch ended.
func (h *Harness) Trace(ctx context.Context, system string) (*traces.Trace, error) {
	head, err := h.Head(ctx)
	if err != nil {
		return nil, err
	}
	if err := h.Rec.waitHistory(ctx, head); err != nil {
		return nil, err
	}
	return h.Rec.trace(system, head)
}

func (r *Recorder) trace(system string, head int64) (*traces.Trace, error) {
	r.hmu.Lock()
	events := append([]*mvccpb.Event(nil), r.hist...)
	r.hmu.Unlock()
	r.compactMu.RLock()
	comps := append([]compaction(nil), r.compactions...)
	r.compactMu.RUnlock()
	r.mu.Lock()
	writes := make(map[int64][2]int64, len(r.writes))
	for rev, t := range r.writes {
		writes[rev] = t
	}
	r.mu.Unlock()

	// Group the events into commits, replay them through the model, and
	// check that the model agrees with etcd on every key-value.
	s := kv.Start(1)
	uids := map[string]int64{}
	var ops []traces.Op
	// Each commit is an operation at the times of the write that made it
	// (the harness makes every write; one it did not time gets the times
	// of the operation before it).
	var last [2]int64
	times := func(rev int64) (int64, int64) {
		if t, ok := writes[rev]; ok {
			last = t
		}
		return last[0], last[1]
	}
	compact := func(upTo int64) error {
		for len(comps) > 0 && comps[0].at <= upTo {
			c := comps[0]
			comps = comps[1:]
			req := kv.Request{Compact: &kv.CompactRequest{Revision: c.rev}}
			next, resp := kv.Step(s, req)
			if resp.Err != nil || resp.Revision != c.at {
				return fmt.Errorf("the compaction at %d (store at %d) does not replay: %v (revision %d)", c.rev, c.at, resp.Err, resp.Revision)
			}
			s = next
			ops = append(ops, traces.Op{Client: 1, Call: c.call, Return: c.ret, Request: req, Response: &resp})
		}
		return nil
	}
	for i := 0; i < len(events); {
		rev := events[i].Kv.ModRevision
		if rev > head {
			break
		}
		if err := compact(rev - 1); err != nil {
			return nil, err
		}
		var txn []kv.Op
		j := i
		for ; j < len(events) && events[j].Kv.ModRevision == rev; j++ {
			e := events[j]
			key := string(e.Kv.Key)
			if e.Type == mvccpb.DELETE {
				txn = append(txn, kv.Op{Delete: &kv.DeleteRequest{Key: key}})
				continue
			}
			v, uid, err := project(key, e.Kv.Value)
			if err != nil {
				return nil, err
			}
			if e.Kv.Version == 1 && uid != "" {
				uids[uid] = e.Kv.CreateRevision
			}
			txn = append(txn, kv.Op{Put: &kv.PutRequest{Key: key, Value: v}})
		}
		var req kv.Request
		switch {
		case len(txn) > 1:
			req.Txn = &kv.TxnRequest{Success: txn}
		case txn[0].Put != nil:
			req.Put = txn[0].Put
		default:
			req.Delete = txn[0].Delete
		}
		next, resp := kv.Step(s, req)
		if resp.Err != nil || resp.Revision != rev {
			return nil, fmt.Errorf("the commit at revision %d does not replay: %v (revision %d)", rev, resp.Err, resp.Revision)
		}
		for _, e := range events[i:j] {
			if e.Type == mvccpb.PUT {
				got, ok := next.Get(string(e.Kv.Key), rev)
				if !ok || got.CreateRevision != e.Kv.CreateRevision || got.Version != e.Kv.Version {
					return nil, fmt.Errorf("the model disagrees with etcd on %q at revision %d: %+v", e.Kv.Key, rev, got)
				}
			}
		}
		s = next
		call, ret := times(rev)
		ops = append(ops, traces.Op{Client: 1, Call: call, Return: ret, Request: req, Response: &resp})
		i = j
	}
	if s.Revision() != head {
		return nil, fmt.Errorf("the history ends at revision %d, etcd is at %d", s.Revision(), head)
	}
	if err := compact(head); err != nil {
		return nil, err
	}

	run, info, err := r.run(uids)
	if err != nil {
		return nil, err
	}
	return &traces.Trace{
		Header: traces.Header{System: system, SystemVersion: "k8s.io/apiserver " + APIServerVersion + " watch cache over etcd 3.7.3",
			Start: r.t0.UTC().Format(time.RFC3339Nano), Tool: "internal/cachertest", UniqueValues: true, BaseCompactRevision: ptrTo(int64(-1))},
		Ops:     ops,
		K8s:     run,
		K8sInfo: info,
	}, nil
}

func ptrTo[T any](v T) *T { return &v }

// run converts the recorded lists and watches into the model's run, and
// their times and ids (a watch's id is its number from 1, in the order
// the watches were made).
func (r *Recorder) run(uids map[string]int64) (*k8s.Run, *traces.K8sInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	obj := func(o rawObject) k8s.Object {
		// An unknown UID stays 0: the object is then no state of the store.
		return k8s.Object{Key: o.key, Value: o.value, ResourceVersion: o.rv, UID: uids[o.uid]}
	}
	run := &k8s.Run{Prefix: GVR.Prefix("")}
	info := &traces.K8sInfo{}
	for _, l := range r.lists {
		c := k8s.ListCall{Prefix: l.prefix, Options: l.opts, Before: l.before, After: l.after, CompactRevision: l.compacts}
		if l.status != nil {
			c.Result.Status = l.status
		} else {
			c.Result = k8s.ListResult{ResourceVersion: l.rv, Continue: l.cont}
			for _, o := range l.items {
				c.Result.Items = append(c.Result.Items, obj(o))
			}
		}
		if l.first >= 0 {
			first := run.Lists[l.first].Result
			c.First = &first
		}
		run.Lists = append(run.Lists, c)
		info.Lists = append(info.Lists, traces.K8sListInfo{Call: l.call, Return: l.ret})
	}
	for i, w := range r.watches {
		if w.end == 0 {
			return nil, nil, fmt.Errorf("watch %d has not ended", i+1)
		}
		c := k8s.WatchCall{Prefix: w.prefix, Options: w.opts, Before: w.before, After: w.after, CompactRevision: w.compacts, Status: w.status}
		for _, e := range w.events {
			c.Events = append(c.Events, convertEvent(e, obj))
		}
		run.Watches = append(run.Watches, c)
		info.Watches = append(info.Watches, traces.K8sWatchInfo{ID: i + 1, Time: w.call, End: w.end})
	}
	for _, e := range r.entries {
		if ie := e.informer; ie != nil {
			en := ie.entry
			if ie.note != nil {
				n := *ie.note
				if ie.old != nil {
					o := obj(*ie.old)
					n.Old = &o
				}
				if ie.new != nil {
					o := obj(*ie.new)
					n.New = &o
				}
				en.Notification = &n
			}
			run.Entries = append(run.Entries, en)
			info.Entries = append(info.Entries, traces.K8sEntryInfo{Time: e.time})
			continue
		}
		if e.list >= 0 {
			i := e.list
			run.Entries = append(run.Entries, k8s.Entry{List: &i})
			info.Entries = append(info.Entries, traces.K8sEntryInfo{Time: r.lists[i].ret})
			continue
		}
		run.Entries = append(run.Entries, k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: e.watch, Event: run.Watches[e.watch].Events[e.event]}})
		info.Entries = append(info.Entries, traces.K8sEntryInfo{Time: r.watches[e.watch].events[e.event].time})
	}
	info.Cache.Time = r.now() // the informer_cache record that names the prefix
	if r.hasCache {
		run.Cache = []k8s.Object{}
		for _, o := range r.cache {
			run.Cache = append(run.Cache, obj(o))
		}
		sort.Slice(run.Cache, func(i, j int) bool { return run.Cache[i].Key < run.Cache[j].Key })
	}
	return run, info, nil
}

func convertEvent(e rawEvent, obj func(rawObject) k8s.Object) k8s.WatchEvent {
	ev := k8s.WatchEvent{Type: e.typ, InitialEventsEnd: e.initialEnd, Status: e.status}
	switch e.typ {
	case k8s.Error:
	case k8s.Bookmark:
		ev.Object = k8s.Object{ResourceVersion: e.obj.rv}
	default:
		ev.Object = obj(e.obj)
	}
	return ev
}
