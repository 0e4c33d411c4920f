package kube

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// The committed history, learnt over HTTP.
//
// A client of an apiserver never sees etcd. What the checker needs — the
// history H of docs/SPEC.md §1 under the run's prefix — comes from the
// answers to the run's own writes: a create or an update answers the object
// with the resourceVersion it was written at (its revision); a delete is
// answered either with the object at the deletion's revision (resources
// whose registry returns the deleted object: pods, custom resources) or with
// a Status that says nothing of it (ConfigMaps, PodTemplates). A deletion's
// revision is then what the watches delivered: the DELETED event of that
// life of the object (by UID). The first watch the run opens is a collector
// that watches the namespace from the base revision to the end, so that
// every deletion is seen; when no watch delivered it and the store is the
// run's alone (Config.Exclusive), the one revision no write of the run
// holds between the writes before and after it is the deletion's.
//
// Revisions are store-wide: on a cluster, writes of other resources and
// namespaces take revisions too. Every revision from the base to the head
// that no write of the run holds is such a write: it enters the history as
// a write of a key outside every prefix the run reads, which no list and no
// watch of the run may show. Hence the preconditions: nobody else writes
// the run's resource in its namespace, and every write of the run is
// answered (a write whose answer was lost makes the run fail: its revision
// cannot be known).

// foreignKey is the key the history gives the writes of others.
const foreignKey = "/watchspec-foreign/"

// errNotExclusive says the store had writers other than the run.
var errNotExclusive = errors.New("the run is not the store's only writer")

// built is the recording turned into a trace.
type built struct {
	trace *traces.Trace
	stats Stats
}

// build turns the recording into a trace. base is the revision the run
// started from (the namespace held nothing then), final the revision of the
// last consistent list, made after every watch ended. With exclusive, every
// revision from base to the head must be a write of the run.
func (r *recorder) build(hdr traces.Header, base, final int64, exclusive bool) (*built, error) {
	r.compactMu.RLock()
	comps := append([]compaction(nil), r.compactions...)
	r.compactMu.RUnlock()
	sort.SliceStable(comps, func(i, j int) bool { return comps[i].call < comps[j].call })
	r.mu.Lock()
	writes := append([]*writeRec(nil), r.writes...)
	end := r.now()
	r.mu.Unlock()
	stats := r.stats()

	head := max(base, final)
	byRev := map[int64]*writeRec{}
	for _, w := range writes {
		if w.rev == 0 {
			continue
		}
		if o, dup := byRev[w.rev]; dup {
			return nil, fmt.Errorf("the server answered two writes with resourceVersion %d: the %s of %s and the %s of %s", w.rev, o.kind, o.key, w.kind, w.key)
		}
		if w.rev <= base {
			return nil, fmt.Errorf("the server answered the %s of %s with resourceVersion %d, not after the run's base revision %d", w.kind, w.key, w.rev, base)
		}
		byRev[w.rev] = w
		head = max(head, w.rev)
	}
	if err := r.resolveDeletes(writes, byRev, base, head, exclusive); err != nil {
		return nil, err
	}
	if exclusive {
		for rev := base + 1; rev <= head; rev++ {
			if byRev[rev] == nil {
				return nil, fmt.Errorf("%w: revision %d holds no write of the run (the last consistent list read revision %d); run without Exclusive", errNotExclusive, rev, final)
			}
		}
	}

	// The operations: one per revision, in revision order.
	s := kv.Start(base)
	uids := map[string]int64{}
	var ops []traces.Op
	var prevCall int64
	for rev := base + 1; rev <= head; rev++ {
		w := byRev[rev]
		var req kv.Request
		op := traces.Op{}
		if w != nil {
			switch w.kind {
			case create, update, compactKey:
				req.Put = &kv.PutRequest{Key: w.key, Value: w.value}
			case remove:
				req.Delete = &kv.DeleteRequest{Key: w.key}
			}
			op.Client, op.Call, op.Return = 1+w.client, w.call, w.ret
			prevCall = w.call
		} else {
			stats.Foreign++
			req.Put = &kv.PutRequest{Key: foreignKey, Value: fmt.Sprintf("foreign-%d", rev)}
			// Another writer's: committed after the write of the revision
			// before was sent, and before the next write of the run returned.
			op.Client, op.Call, op.Return = 1000+int(rev-base), prevCall, end
			for next := rev + 1; next <= head; next++ {
				if n := byRev[next]; n != nil {
					op.Return = n.ret
					break
				}
			}
		}
		next, resp := kv.Step(s, req)
		if resp.Err != nil || resp.Revision != rev {
			return nil, fmt.Errorf("the %v at revision %d does not replay (%v at revision %d): the writes' answers contradict each other", req, rev, resp.Err, resp.Revision)
		}
		if w != nil && w.kind == create {
			uids[w.uid] = rev
		}
		if w != nil && w.kind == remove && resp.Delete != nil && resp.Delete.Deleted != 1 {
			return nil, fmt.Errorf("the delete of %s at revision %d deletes nothing: the writes' answers contradict each other", w.key, rev)
		}
		s = next
		op.Request, op.Response = req, &resp
		ops = append(ops, op)
		// The compactions that took effect when the store was at rev.
		for _, c := range comps {
			if c.at != rev {
				continue
			}
			creq := kv.Request{Compact: &kv.CompactRequest{Revision: c.rev}}
			next, cresp := kv.Step(s, creq)
			if cresp.Err != nil || cresp.Revision != rev {
				return nil, fmt.Errorf("the compaction at %d (store at %d) does not replay: %v", c.rev, c.at, cresp.Err)
			}
			s = next
			ops = append(ops, traces.Op{Client: 999, Call: c.call, Return: c.ret, Request: creq, Response: &cresp})
		}
	}

	run, info, err := r.run(uids, base, head, writes, exclusive)
	if err != nil {
		return nil, err
	}
	hdr.BaseRevision = base
	hdr.UniqueValues = true
	hdr.Start = r.t0.UTC().Format(time.RFC3339Nano)
	stats.Base, stats.Head = base, head
	return &built{trace: &traces.Trace{Header: hdr, Ops: ops, K8s: run, K8sInfo: info}, stats: stats}, nil
}

// resolveDeletes finds the revision of every delete whose answer did not
// carry it: from the watches' DELETED events of that life of the object,
// else (exclusive) from the one revision left free between the writes
// around it.
func (r *recorder) resolveDeletes(writes []*writeRec, byRev map[int64]*writeRec, base, head int64, exclusive bool) error {
	r.mu.Lock()
	seen := map[string]map[int64]int{} // uid → revision → how many watches delivered it
	for _, w := range r.watches {
		for _, e := range w.events {
			if e.typ == k8s.Deleted && e.obj.uid != "" && e.obj.rv > base && e.obj.rv <= head {
				if seen[e.obj.uid] == nil {
					seen[e.obj.uid] = map[int64]int{}
				}
				seen[e.obj.uid][e.obj.rv]++
			}
		}
	}
	r.mu.Unlock()
	// lastOfKey is the revision of the latest write of w's key before w.
	lastOfKey := func(d *writeRec) int64 {
		last := base
		for _, w := range writes {
			if w.key == d.key && w.rev > 0 && w.call < d.call {
				last = max(last, w.rev)
			}
		}
		return last
	}
	var pending []*writeRec
	for _, d := range writes {
		if d.rev != 0 {
			continue
		}
		low := lastOfKey(d)
		best, votes := int64(0), 0
		for rev, n := range seen[d.uid] {
			if rev <= low || byRev[rev] != nil {
				continue
			}
			if n > votes || (n == votes && rev < best) {
				best, votes = rev, n
			}
		}
		if best > 0 {
			d.rev = best
			byRev[best] = d
			continue
		}
		pending = append(pending, d)
	}
	for progress := exclusive; progress && len(pending) > 0; {
		progress = false
		for i, d := range pending {
			lo, hi := lastOfKey(d), head+1
			for _, w := range writes {
				if w.rev == 0 {
					continue
				}
				if w.ret < d.call {
					lo = max(lo, w.rev)
				}
				if w.call > d.ret {
					hi = min(hi, w.rev)
				}
			}
			var free []int64
			for rev := lo + 1; rev < hi; rev++ {
				if byRev[rev] == nil {
					free = append(free, rev)
				}
			}
			if len(free) == 1 {
				d.rev = free[0]
				byRev[d.rev] = d
				pending = append(pending[:i], pending[i+1:]...)
				progress = true
				break
			}
		}
	}
	if len(pending) > 0 {
		d := pending[0]
		return fmt.Errorf("the delete of %s (uid %s) was answered without its revision, and no watch delivered it: the recording cannot place it in the history (%d such deletes)", d.key, d.uid, len(pending))
	}
	return nil
}

// run converts the recorded lists, watches and informer log into the
// model's run, with the bounds Before and After of every request: Before
// is the highest revision a write of the run had been answered with before
// the request was sent; After, with exclusive, the highest revision of a
// write sent before the answer arrived (nothing else writes), otherwise the
// head of the run.
func (r *recorder) run(uids map[string]int64, base, head int64, writes []*writeRec, exclusive bool) (*k8s.Run, *traces.K8sInfo, error) {
	byRet := append([]*writeRec(nil), writes...)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
	byCall := append([]*writeRec(nil), writes...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
	before := func(t int64) int64 {
		b := base
		for _, w := range byRet {
			if w.ret >= t {
				break
			}
			b = max(b, w.rev)
		}
		return b
	}
	after := func(t int64) int64 {
		if !exclusive {
			return head
		}
		a := base
		for _, w := range byCall {
			if w.call >= t {
				break
			}
			a = max(a, w.rev)
		}
		return max(a, 1)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	obj := func(o rawObject) k8s.Object {
		// An unknown UID stays 0: the object is then no state of the store.
		return k8s.Object{Key: o.key, Value: o.value, ResourceVersion: o.rv, UID: uids[o.uid]}
	}
	run := &k8s.Run{Prefix: r.prefix}
	info := &traces.K8sInfo{}
	for _, l := range r.lists {
		c := k8s.ListCall{Prefix: r.prefix, Options: l.opts, Before: before(l.call), After: after(l.ret), CompactRevision: l.compacts}
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
	for _, w := range r.watches {
		if !w.ended {
			return nil, nil, fmt.Errorf("watch %d has not ended", w.id)
		}
		c := k8s.WatchCall{Prefix: r.prefix, Options: w.opts, Before: before(w.call), After: after(w.end), Status: w.status, CompactRevision: w.compacts}
		for _, e := range w.events {
			ev := k8s.WatchEvent{Type: e.typ, InitialEventsEnd: e.initialEnd, Status: e.status}
			switch e.typ {
			case k8s.Error:
			case k8s.Bookmark:
				ev.Object = k8s.Object{ResourceVersion: e.obj.rv}
			default:
				ev.Object = obj(e.obj)
			}
			c.Events = append(c.Events, ev)
		}
		run.Watches = append(run.Watches, c)
		info.Watches = append(info.Watches, traces.K8sWatchInfo{ID: w.id, Time: w.call, End: w.end})
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
		info.Entries = append(info.Entries, traces.K8sEntryInfo{Time: e.time})
	}
	info.Cache.Time = r.now()
	if r.hasCache {
		run.Cache = []k8s.Object{}
		for _, o := range r.cache {
			run.Cache = append(run.Cache, obj(o))
		}
		sort.Slice(run.Cache, func(i, j int) bool { return run.Cache[i].Key < run.Cache[j].Key })
	}
	return run, info, nil
}
