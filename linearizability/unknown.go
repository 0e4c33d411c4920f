package linearizability

import (
	"sort"

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
// Only events some watch delivered are used: they are what the store
// committed unless a watch property is broken, and every watch is then
// checked against the resulting history. Nothing is concluded from what
// watches did not deliver, which a broken store may have dropped.

// observations indexes what the watches of a trace delivered.
type observations struct {
	// events holds, per revision, the events delivered at it (any watch)
	// and the earliest time one of them was received.
	events map[int64]map[string]kv.Event
	first  map[int64]int64
}

func observe(t *traces.Trace) *observations {
	o := &observations{events: map[int64]map[string]kv.Event{}, first: map[int64]int64{}}
	for _, w := range t.Watches {
		for _, r := range w.Responses {
			for _, e := range r.Response.Events {
				rev := e.KV.ModRevision
				if o.events[rev] == nil {
					o.events[rev] = map[string]kv.Event{}
					o.first[rev] = r.Time
				}
				o.events[rev][e.KV.Key] = e
				o.first[rev] = min(o.first[rev], r.Time)
			}
		}
	}
	return o
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
// watches saw, and drops those that, by the watches, never happened. It
// returns the operations to linearize.
func resolveUnknown(t *traces.Trace, ops []*op) []*op {
	obs := observe(t)
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
	return ops
}
