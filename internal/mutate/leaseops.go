package mutate

import (
	"math/rand"
	"slices"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// The semantic operators on leases (docs/SPEC.md §2.10, §2.11, §3.14,
// §3.15). They apply to linearizable subjects without a profile that use
// leases and break no lease property. §3.15 LeaseAtomic's operator does not
// move a deletion to another revision (that renumbers the rest of a
// trace): it moves a deleted version to another lease, one deleted at
// another revision.

func leaseSubject(s *Subject) bool {
	if !kvSubject(s) || len(s.Trace.LeaseOps) == 0 {
		return false
	}
	for _, p := range []spec.Property{spec.LeaseAttach, spec.LeaseExpiry, spec.LeaseDeletes, spec.LeaseAtomic} {
		if s.base[p] > 0 {
			return false
		}
	}
	return true
}

// deletion is a DELETE a watch delivered that no client's kv operation
// made: the server's, at Rev, first seen at Time.
type deletion struct {
	Key       string
	Rev, Time int64
	Lease     int64 // of the deleted version (its prev_kv), 0 when not shown
	Prev      int64 // the deleted version's ModRevision, 0 when not shown
}

// drawServerDeletion draws one of the server's deletions of a lease subject
// (and returns them all); ok is false when the subject has none, or the drawn
// one was of a key without a lease.
func drawServerDeletion(s *Subject, r *rand.Rand) (ds []deletion, d deletion, ok bool) {
	if !leaseSubject(s) {
		return nil, d, false
	}
	if ds = serverDeletions(s.Trace); len(ds) == 0 {
		return nil, d, false
	}
	d = ds[r.Intn(len(ds))]
	return ds, d, d.Lease != 0
}

func serverDeletions(t *traces.Trace) []deletion {
	client := map[int64]bool{}
	for _, o := range t.Ops {
		if writeCreates(o.Response) {
			client[o.Response.Revision] = true
		}
	}
	var out []deletion
	for _, w := range t.Watches {
		for _, wr := range w.Responses {
			for _, e := range wr.Response.Events {
				if e.Type != kv.Delete || client[e.Revision()] {
					continue
				}
				d := deletion{Key: e.KV.Key, Rev: e.Revision(), Time: wr.Time}
				if e.PrevKV != nil {
					d.Lease, d.Prev = e.PrevKV.Lease, e.PrevKV.ModRevision
				}
				out = append(out, d)
			}
		}
	}
	return out
}

// setVersionLease makes the version of key written at rev carry lease
// everywhere the trace shows it: the put that wrote it, reads, events.
func (m *Mutant) setVersionLease(key string, rev, l int64) {
	t := m.tr()
	fix := func(k *kv.KeyValue) {
		if k != nil && k.Key == key && k.ModRevision == rev {
			k.Lease = l
		}
	}
	fixKVs := func(ks []kv.KeyValue) []kv.KeyValue {
		ks = slices.Clone(ks)
		for i := range ks {
			fix(&ks[i])
		}
		return ks
	}
	fixPtr := func(k *kv.KeyValue) *kv.KeyValue {
		if k == nil {
			return nil
		}
		c := *k
		fix(&c)
		return &c
	}
	for i, o := range t.Ops {
		if o.Response == nil || o.Response.Err != nil {
			continue
		}
		r := m.mutableResponse(i)
		req := o.Request
		// A keys-only range answers no lease (SPEC §2.3).
		keysOnly := func(rr *kv.RangeRequest) bool { return rr != nil && rr.KeysOnly }
		if p := req.Put; p != nil && p.Key == key && r.Revision == rev {
			c := *p
			c.Lease = l
			req.Put = &c
		}
		if x := req.Txn; x != nil && r.Txn != nil && r.Revision == rev {
			c := *x
			ops := slices.Clone(x.Success)
			if !r.Txn.Succeeded {
				ops = slices.Clone(x.Failure)
			}
			for j := range ops {
				if p := ops[j].Put; p != nil && p.Key == key {
					pc := *p
					pc.Lease = l
					ops[j].Put = &pc
				}
			}
			if r.Txn.Succeeded {
				c.Success = ops
			} else {
				c.Failure = ops
			}
			req.Txn = &c
		}
		t.Ops[i].Request = req
		if r.Range != nil && !keysOnly(req.Range) {
			rc := *r.Range
			rc.KVs = fixKVs(rc.KVs)
			r.Range = &rc
		}
		if r.Txn != nil {
			tc := *r.Txn
			tc.Responses = slices.Clone(tc.Responses)
			branch := req.Txn.Success
			if !tc.Succeeded {
				branch = req.Txn.Failure
			}
			for j := range tc.Responses {
				if j < len(branch) && keysOnly(branch[j].Range) {
					continue
				}
				if rr := tc.Responses[j].Range; rr != nil {
					rc := *rr
					rc.KVs = fixKVs(rc.KVs)
					tc.Responses[j].Range = &rc
				}
			}
			r.Txn = &tc
		}
	}
	for i, w := range t.Watches {
		for j := range w.Responses {
			evs := m.events(i, j)
			for k := range evs {
				fix(&evs[k].KV)
				evs[k].PrevKV = fixPtr(evs[k].PrevKV)
			}
		}
	}
}

// putOf returns the index of the known-outcome operation that wrote key's
// version at rev, or -1.
func putOf(t *traces.Trace, key string, rev int64) int {
	for i, o := range t.Ops {
		if o.Response == nil || o.Response.Err != nil || o.Response.Revision != rev {
			continue
		}
		for _, p := range putsOf(o.Request) {
			if p.Key == key {
				return i
			}
		}
	}
	return -1
}

// putsOf lists the puts of a request (a transaction's, of both branches).
func putsOf(req kv.Request) []*kv.PutRequest {
	if req.Put != nil {
		return []*kv.PutRequest{req.Put}
	}
	var out []*kv.PutRequest
	if req.Txn != nil {
		for _, o := range append(slices.Clone(req.Txn.Success), req.Txn.Failure...) {
			if o.Put != nil {
				out = append(out, o.Put)
			}
		}
	}
	return out
}

var leaseOperators = []*Operator{
	{
		Name: "lease-early-expiry", Kind: Semantic,
		Doc: "adds a keep-alive of a lease, acknowledged with the lease's TTL, called just before a watch first saw the lease's keys " +
			"deleted by expiry: the server renewed the lease and expired it at once (§2.11 LeaseExpiry; also a server that forgets " +
			"its leases across a restart)",
		Properties: []spec.Property{spec.LeaseExpiry},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			ds, d, ok := drawServerDeletion(s, r)
			if !ok {
				return false
			}
			first := d.Time
			for _, o := range ds {
				if o.Lease == d.Lease && o.Time < first {
					first = o.Time
				}
			}
			var ttl int64
			for _, o := range s.Trace.LeaseOps {
				if q := o.Request.Revoke; q != nil && q.ID == d.Lease && o.Call <= first {
					return false // a revocation, not an expiry
				}
				if o.Request.Grant != nil && o.Response != nil && o.Response.Err == nil && o.Response.ID == d.Lease {
					ttl = o.Response.TTL
				}
			}
			if ttl <= 0 || first < 1 {
				return false
			}
			t := m.tr()
			t.LeaseOps = append(slices.Clone(t.LeaseOps), traces.LeaseOp{Client: 1 << 20, Call: first - 1, Return: first - 1,
				Request: lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: d.Lease}}, Response: &lease.Response{ID: d.Lease, TTL: ttl}})
			m.whatf("a keep-alive of lease %d acknowledged (TTL %d s) 1 ns before its deletion at revision %d was seen", d.Lease, ttl, d.Rev)
			m.Expect = one(spec.LeaseExpiry)
			return true
		},
	},
	{
		Name: "lease-unleased-delete", Kind: Semantic,
		Doc: "takes the lease off a version that the server deleted with its lease's keys (its put, reads, events): the server " +
			"deleted a key no lease holds (§3.14 LeaseDeletes)",
		Properties: []spec.Property{spec.LeaseDeletes},
		apply: func(m *Mutant, r *rand.Rand) bool {
			_, d, ok := drawServerDeletion(m.Subject, r)
			if !ok || d.Prev == 0 {
				return false
			}
			m.setVersionLease(d.Key, d.Prev, 0)
			m.whatf("the version of %q written at revision %d carries no lease; the server deleted it at %d", d.Key, d.Prev, d.Rev)
			m.Expect = one(spec.LeaseDeletes)
			return true
		},
	},
	{
		Name: "lease-split-deletion", Kind: Semantic,
		Doc: "moves a version the server deleted with one lease's keys to another lease whose keys it deleted at another " +
			"revision (its put, reads, events): one lease's keys deleted at two revisions (§3.15 LeaseAtomic)",
		Properties: []spec.Property{spec.LeaseAtomic},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			ds, d, ok := drawServerDeletion(s, r)
			if !ok || d.Prev == 0 {
				return false
			}
			t := s.Trace
			put := putOf(t, d.Key, d.Prev)
			if put < 0 {
				return false
			}
			// Another lease, deleted at another revision, first seen no
			// later than d (so that §2.11 judges the same first sighting),
			// granted before the put returned and not revoked before it
			// was called (so that §2.10 holds).
			first := map[int64]int64{}
			for _, o := range ds {
				if f, seen := first[o.Lease]; o.Lease != 0 && (!seen || o.Time < f) {
					first[o.Lease] = o.Time
				}
			}
			var cands []int64
			for _, o := range ds {
				if o.Lease == 0 || o.Lease == d.Lease || o.Rev == d.Rev || first[o.Lease] > d.Time || slices.Contains(cands, o.Lease) {
					continue
				}
				if attachable(t, o.Lease, t.Ops[put].Call, t.Ops[put].Return) {
					cands = append(cands, o.Lease)
				}
			}
			if len(cands) == 0 {
				return false
			}
			slices.Sort(cands)
			l := cands[r.Intn(len(cands))]
			m.setVersionLease(d.Key, d.Prev, l)
			m.whatf("the version of %q written at revision %d carries lease %d, whose other keys went at another revision; the server deleted it at %d", d.Key, d.Prev, l, d.Rev)
			m.Expect = one(spec.LeaseAtomic)
			return true
		},
	},
	{
		Name: "lease-unknown-lease-put", Kind: Semantic,
		Doc: "makes a successful put name a lease that was never granted (its put, reads, events): the server answered OK where " +
			"etcd answers \"requested lease not found\" (§2.10 LeaseAttach)",
		Properties: []spec.Property{spec.LeaseAttach},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !leaseSubject(s) {
				return false
			}
			i := r.Intn(len(s.Trace.Ops))
			o := s.Trace.Ops[i]
			if o.Request.Put == nil || o.Response == nil || o.Response.Err != nil {
				return false
			}
			if o.Request.Put.Lease != 0 && len(s.Trace.Watches) == 0 {
				// Without a watch, reads alone see the version go with its
				// lease's other keys (§2.7 places one deletion per lease):
				// moved to another lease, its going is a second fault.
				return false
			}
			unknown := int64(1)<<62 + r.Int63n(1<<20)
			for _, l := range s.Trace.LeaseOps {
				if l.Response != nil && l.Response.ID == unknown {
					return false
				}
			}
			m.setVersionLease(o.Request.Put.Key, o.Response.Revision, unknown)
			m.whatf("the put of %q at line %d names lease %d, never granted, and succeeds", o.Request.Put.Key, o.Line, unknown)
			m.Expect = one(spec.LeaseAttach)
			return true
		},
	},
}

// attachable reports whether a put called at call and returned at ret may
// name lease l under §2.10: a grant of l that succeeded was called before
// ret, and no revoke of l that may have succeeded was called before ret.
func attachable(t *traces.Trace, l, call, ret int64) bool {
	granted := false
	for _, o := range t.LeaseOps {
		switch {
		case o.Request.Grant != nil && o.Response != nil && o.Response.Err == nil && o.Response.ID == l && o.Call < ret:
			granted = true
		case o.Request.Revoke != nil && o.Request.Revoke.ID == l && o.Call < ret:
			return false
		}
	}
	return granted
}
