package cachertest

import (
	"context"
	"errors"
	"fmt"
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
}

type compaction struct{ rev, at int64 } // compacted at rev, when the store was at revision at

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
	before, after, compacts int64
	status                  *k8s.Status
	rv                      int64
	items                   []rawObject
	cont                    string // the decoded continue token of the result
	first                   int    // the list of a continuation's first page, or −1
}

type rawEvent struct {
	typ        k8s.EventType
	obj        rawObject
	initialEnd bool
	status     *k8s.Status
}

type watchRec struct {
	prefix                  string
	opts                    k8s.WatchOptions
	before, after, compacts int64
	status                  *k8s.Status
	events                  []rawEvent
}

// entry is one list (list ≥ 0) or one watch event (watch ≥ 0, event).
type entry struct {
	list, watch, event int
}

func newRecorder(ctx context.Context, c *clientv3.Client) (*Recorder, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Recorder{cancel: cancel, done: make(chan struct{}), histHead: 1, compactRev: -1}
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
// revision at; the caller holds compactMu.
func (r *Recorder) noteCompaction(rev, at int64) {
	r.compactRev = rev
	r.compactions = append(r.compactions, compaction{rev, at})
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
	r.lists = append(r.lists, l)
	i := len(r.lists) - 1
	r.entries = append(r.entries, entry{list: i, watch: -1})
	return i
}

func (r *Recorder) addWatch(w *watchRec) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watches = append(r.watches, w)
	return len(r.watches) - 1
}

func (r *Recorder) addEvent(id int, e rawEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.watches[id]
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

	// Group the events into commits, replay them through the model, and
	// check that the model agrees with etcd on every key-value.
	s := kv.Start(1)
	uids := map[string]int64{}
	var ops []traces.Op
	tick := func(rev int64, off int64) int64 { return rev*10 + off }
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
			ops = append(ops, traces.Op{Client: 1, Call: tick(c.at, 5), Return: tick(c.at, 6), Request: req, Response: &resp})
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
		ops = append(ops, traces.Op{Client: 1, Call: tick(rev, 0), Return: tick(rev, 1), Request: req, Response: &resp})
		i = j
	}
	if s.Revision() != head {
		return nil, fmt.Errorf("the history ends at revision %d, etcd is at %d", s.Revision(), head)
	}
	if err := compact(head); err != nil {
		return nil, err
	}

	run, err := r.run(uids)
	if err != nil {
		return nil, err
	}
	return &traces.Trace{
		Header: traces.Header{System: system, SystemVersion: "k8s.io/apiserver " + APIServerVersion + " watch cache over etcd 3.7.3",
			Start: time.Now().UTC().Format(time.RFC3339), Tool: "internal/cachertest"},
		Ops: ops,
		K8s: run,
	}, nil
}

// run converts the recorded lists and watches into the model's run.
func (r *Recorder) run(uids map[string]int64) (*k8s.Run, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	obj := func(o rawObject) k8s.Object {
		// An unknown UID stays 0: the object is then no state of the store.
		return k8s.Object{Key: o.key, Value: o.value, ResourceVersion: o.rv, UID: uids[o.uid]}
	}
	run := &k8s.Run{Prefix: GVR.Prefix("")}
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
	}
	for _, w := range r.watches {
		c := k8s.WatchCall{Prefix: w.prefix, Options: w.opts, Before: w.before, After: w.after, CompactRevision: w.compacts, Status: w.status}
		for _, e := range w.events {
			c.Events = append(c.Events, convertEvent(e, obj))
		}
		run.Watches = append(run.Watches, c)
	}
	for _, e := range r.entries {
		if e.list >= 0 {
			i := e.list
			run.Entries = append(run.Entries, k8s.Entry{List: &i})
			continue
		}
		run.Entries = append(run.Entries, k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: e.watch, Event: run.Watches[e.watch].Events[e.event]}})
	}
	return run, nil
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
