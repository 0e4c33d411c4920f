package linearizability

import (
	"math"
	"sort"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// What the watches of a trace saw constrains the writes whose outcome is
// unknown, as a write-ahead log does for etcd's robustness tests. A watch
// that delivered a revision no known write created shows which unknown write
// created it, when only one could have; and no unknown write can have
// created a revision whose delivered events it could not have produced.
// Without this, the linearization may place an unknown put at the revision
// where in fact an unknown delete happened — every key-value response allows
// it — and the watches would then be blamed for the checker's guess.
//
// The evidence is every event some etcd watch delivered, and, in a trace
// that records an informer run, every object a Kubernetes watch event or
// list showed: an ADDED or MODIFIED object (or a listed one) at
// resourceVersion r is a PUT of its key with its value at revision r, a
// DELETED one a DELETE at r (docs/SPEC.md §4). These are what the store
// committed unless a watch or list property is broken, and every watch and
// list is then checked against the resulting history. Nothing here is
// concluded from what was not delivered, which a broken store may have
// dropped; views.go lets it choose among the linearizations instead.

// observations indexes what the watches (and lists) of a trace showed.
type observations struct {
	// events holds, per revision, the events seen at it and the earliest
	// time one of them was received (math.MaxInt64 when not recorded).
	events map[int64]map[string]kv.Event
	first  map[int64]int64
	// puts maps each (key, value) seen in a PUT to the revisions it was
	// seen at, in increasing order.
	puts map[[2]string][]int64
}

func observe(t *traces.Trace) *observations {
	o := &observations{events: map[int64]map[string]kv.Event{}, first: map[int64]int64{}, puts: map[[2]string][]int64{}}
	for _, w := range t.Watches {
		for _, r := range w.Responses {
			for _, e := range r.Response.Events {
				o.add(e, r.Time)
			}
		}
	}
	if t.K8s != nil {
		o.addRun(t.K8s, t.K8sInfo)
	}
	for k, revs := range o.puts {
		sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
		o.puts[k] = dedup(revs)
	}
	return o
}

func (o *observations) add(e kv.Event, at int64) {
	rev := e.KV.ModRevision
	if o.events[rev] == nil {
		o.events[rev] = map[string]kv.Event{}
		o.first[rev] = at
	}
	o.events[rev][e.KV.Key] = e
	o.first[rev] = min(o.first[rev], at)
	if e.Type == kv.Put {
		k := [2]string{e.KV.Key, e.KV.Value}
		o.puts[k] = append(o.puts[k], rev)
	}
}

// addRun adds what an informer run's watch events and lists showed.
func (o *observations) addRun(run *k8s.Run, info *traces.K8sInfo) {
	timed := info != nil && !info.Untimed
	for i, en := range run.Entries {
		if en.WatchEvent == nil {
			continue
		}
		at := int64(math.MaxInt64)
		if timed && i < len(info.Entries) {
			at = info.Entries[i].Time
		}
		ev := en.WatchEvent.Event
		obj := ev.Object
		switch ev.Type {
		case k8s.Added, k8s.Modified:
			o.add(kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: obj.Key, Value: obj.Value, ModRevision: obj.ResourceVersion, CreateRevision: obj.UID}}, at)
		case k8s.Deleted:
			o.add(kv.Event{Type: kv.Delete, KV: kv.KeyValue{Key: obj.Key, ModRevision: obj.ResourceVersion}}, at)
		}
	}
	for i, l := range run.Lists {
		at := int64(math.MaxInt64)
		if timed && i < len(info.Lists) {
			at = info.Lists[i].Return
		}
		for _, obj := range l.Result.Items {
			o.add(kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: obj.Key, Value: obj.Value, ModRevision: obj.ResourceVersion, CreateRevision: obj.UID}}, at)
		}
	}
}

func dedup(revs []int64) []int64 {
	out := revs[:0]
	for _, r := range revs {
		if len(out) == 0 || out[len(out)-1] != r {
			out = append(out, r)
		}
	}
	return out
}

// writesOf lists what a write request may write: its puts and its deletes'
// ranges (a transaction's in both branches).
func writesOf(r kv.Request) (ps []kv.PutRequest, ds []kv.DeleteRequest) {
	ops := []kv.Op{{Put: r.Put, Delete: r.Delete}}
	if r.Txn != nil {
		ops = append(append([]kv.Op(nil), r.Txn.Success...), r.Txn.Failure...)
	}
	for _, o := range ops {
		if o.Put != nil {
			ps = append(ps, *o.Put)
		}
		if o.Delete != nil {
			ds = append(ds, *o.Delete)
		}
	}
	return ps, ds
}

// mayProduce reports whether request r could have committed exactly the
// events of one revision: every PUT is one of its puts, every DELETE in one
// of its delete ranges.
func mayProduce(r kv.Request, evs map[string]kv.Event) bool {
	ps, ds := writesOf(r)
	for _, e := range evs {
		ok := false
		if e.Type == kv.Put {
			for _, p := range ps {
				ok = ok || p.Key == e.KV.Key && p.Value == e.KV.Value
			}
		} else {
			for _, d := range ds {
				ok = ok || kv.InRange(d.Key, d.RangeEnd, e.KV.Key)
			}
		}
		if !ok {
			return false
		}
	}
	return len(evs) > 0
}

// createdRevision returns the revision a known successful write created.
func createdRevision(r *kv.Response) (int64, bool) {
	if r == nil || r.Err != nil {
		return 0, false
	}
	switch {
	case r.Put != nil:
		return r.Revision, true
	case r.Delete != nil:
		return r.Revision, r.Delete.Deleted > 0
	case r.Txn != nil:
		for _, o := range r.Txn.Responses {
			if o.Put != nil || (o.Delete != nil && o.Delete.Deleted > 0) {
				return r.Revision, true
			}
		}
	}
	return 0, false
}

// resolveUnknown pins the unknown writes that created a revision only
// watches saw, and rules out, for the others, the revisions whose observed
// events they could not have produced.
func resolveUnknown(ops []*op, obs *observations) {
	explained := map[int64]bool{}
	for _, p := range ops {
		if rev, ok := createdRevision(p.out.Response); ok {
			explained[rev] = true
		}
		if p.out.Pinned > 0 {
			explained[p.out.Pinned] = true
		}
	}
	// Revisions watches saw that no known write created.
	var revs []int64
	for rev := range obs.events {
		if !explained[rev] {
			revs = append(revs, rev)
		}
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	for _, rev := range revs {
		var cand *op
		n := 0
		for _, p := range ops {
			if p.out.Response == nil && p.out.Pinned == 0 && p.call <= obs.first[rev] && mayProduce(p.t.Request, obs.events[rev]) {
				cand, n = p, n+1
			}
		}
		if n == 1 {
			cand.out.Pinned = rev
		}
	}
	// An unknown write cannot have created a revision whose events, as
	// watches saw them, it could not have produced.
	for _, p := range ops {
		if p.out.Response != nil || p.out.Pinned > 0 {
			continue
		}
		for rev, evs := range obs.events {
			if !mayProduce(p.t.Request, evs) {
				if p.out.NotAt == nil {
					p.out.NotAt = map[int64]bool{}
				}
				p.out.NotAt[rev] = true
			}
		}
	}
}
