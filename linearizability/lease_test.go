package linearizability

import (
	"testing"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// leaseTrace: lease 1 granted, a put with it at revision 2, the server's
// deletion of a at revision 3 delivered by a watch at time seen, and a read
// after it.
func leaseTrace(withLease bool, seen int64) *traces.Trace {
	const s = int64(1e9)
	var l int64
	if withLease {
		l = 1
	}
	prev := kv.KeyValue{Key: "a", Value: "1", CreateRevision: 2, ModRevision: 2, Version: 1, Lease: l}
	w := &traces.Watch{Line: 1, Client: 9, Time: 1, Request: watch.Request{Key: "a", PrevKV: true}, Responses: []traces.WatchResponse{
		{Line: 2, Time: 2, Response: watch.Response{Revision: 1, Created: true}},
		{Line: 5, Time: 100, Response: watch.Response{Revision: 2, Events: []kv.Event{{Type: kv.Put, KV: prev}}}},
		{Line: 6, Time: seen, Response: watch.Response{Revision: 3, Events: []kv.Event{{Type: kv.Delete, KV: kv.KeyValue{Key: "a", ModRevision: 3}, PrevKV: &prev}}}},
	}}
	return &traces.Trace{Name: "lease", Header: traces.Header{System: "test", UniqueValues: true}, Watches: []*traces.Watch{w},
		LeaseOps: []traces.LeaseOp{{Line: 3, Client: 1, Call: 10, Return: 20, Request: lease.Request{Grant: &lease.GrantRequest{ID: 1, TTL: 2}},
			Response: &lease.Response{ID: 1, TTL: 2}}},
		Ops: []traces.Op{
			{Line: 4, Client: 1, Call: 30, Return: 40, Request: kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1", Lease: l}}, Response: &kv.Response{Revision: 2, Put: &kv.PutResponse{}}},
			{Line: 7, Client: 1, Call: 50, Return: 60, Request: kv.Request{Put: &kv.PutRequest{Key: "b", Value: "2", Lease: 5}}, Response: &kv.Response{Err: lease.ErrNotFound}},
			{Line: 8, Client: 2, Call: 10 * s, Return: 10*s + 1, Request: kv.Request{Range: &kv.RangeRequest{Key: "a"}}, Response: &kv.Response{Revision: 3, Range: &kv.RangeResponse{}}},
		}}
}

func violated(t *testing.T, tr *traces.Trace) (Verdict, []spec.Property) {
	t.Helper()
	res, err := Check(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ps []spec.Property
	for _, v := range res.Violations {
		ps = append(ps, v.Property)
	}
	return res.Verdict, ps
}

// SPEC §3.14 LeaseDeletes, §2.11 LeaseExpiry, §2.7 Linearizable: in a trace
// that uses leases, a deletion no client made joins the linearization when
// a lease explains it; a put refused with "requested lease not found"
// changed nothing; an expiry seen before the TTL ran out, or of a key
// without a lease, is named by its property.
func TestLeaseStage(t *testing.T) {
	const s = int64(1e9)
	if v, ps := violated(t, leaseTrace(true, 5*s)); v != Linearizable || len(ps) > 0 {
		t.Errorf("valid lease trace: %s, %v", v, ps)
	}
	if v, ps := violated(t, leaseTrace(true, 1*s)); v != Linearizable || len(ps) != 1 || ps[0] != spec.LeaseExpiry {
		t.Errorf("expiry 1 s after a grant of TTL 2 s: %s, %v; want exactly LeaseExpiry", v, ps)
	}
	if v, ps := violated(t, leaseTrace(false, 5*s)); v != Linearizable || len(ps) != 1 || ps[0] != spec.LeaseDeletes {
		t.Errorf("server deletion of a key without a lease: %s, %v; want exactly LeaseDeletes", v, ps)
	}
}

// SPEC §2.7 Linearizable: a trace that does not use leases keeps the closed
// world — a deletion no client made is not explained by the lease stage.
func TestNoLeasesKeepsClosedWorld(t *testing.T) {
	tr := leaseTrace(false, 5e9)
	tr.LeaseOps = nil
	tr.Ops = append(tr.Ops[:1:1], tr.Ops[2])
	v, ps := violated(t, tr)
	if v == Linearizable {
		t.Errorf("a deletion no client made passed in a trace without leases: %v", ps)
	}
	for _, p := range ps {
		if p == spec.LeaseDeletes {
			t.Errorf("LeaseDeletes reported for a trace that does not use leases")
		}
	}
}
