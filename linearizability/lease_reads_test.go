package linearizability

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// Traces with leases and no watch: the server's deletions of a lease's keys
// are seen only by reads (a range that finds the keys gone, or a header
// revision that advanced). Times are nanoseconds.

const sec = int64(1e9)

func grantOp(line int, call, ret, id, ttl int64) traces.LeaseOp {
	return traces.LeaseOp{Line: line, Client: 1, Call: call, Return: ret, Request: lease.Request{Grant: &lease.GrantRequest{ID: id, TTL: ttl}},
		Response: &lease.Response{ID: id, TTL: ttl}}
}

func revokeOp(line int, call, ret, id, header int64) traces.LeaseOp {
	return traces.LeaseOp{Line: line, Client: 1, Call: call, Return: ret, Request: lease.Request{Revoke: &lease.RevokeRequest{ID: id}},
		Response: &lease.Response{Revision: header}}
}

func keepAliveOp(line int, call, ret, id, ttl int64) traces.LeaseOp {
	return traces.LeaseOp{Line: line, Client: 1, Call: call, Return: ret, Request: lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: id}},
		Response: &lease.Response{ID: id, TTL: ttl}}
}

func putOp(line int, call, ret int64, key, value string, l, rev int64) traces.Op {
	return traces.Op{Line: line, Client: 2, Call: call, Return: ret, Request: kv.Request{Put: &kv.PutRequest{Key: key, Value: value, Lease: l}},
		Response: &kv.Response{Revision: rev, Put: &kv.PutResponse{}}}
}

// getOp reads ["a", "z") and answers rev with kvs.
func getOp(line int, call, ret, rev int64, kvs ...kv.KeyValue) traces.Op {
	return traces.Op{Line: line, Client: 3, Call: call, Return: ret, Request: kv.Request{Range: &kv.RangeRequest{Key: "a", RangeEnd: "z"}},
		Response: &kv.Response{Revision: rev, Range: &kv.RangeResponse{KVs: kvs, Count: int64(len(kvs))}}}
}

func leasedKV(key, value string, rev, l int64) kv.KeyValue {
	return kv.KeyValue{Key: key, Value: value, CreateRevision: rev, ModRevision: rev, Version: 1, Lease: l}
}

func readTrace(name string, leaseOps []traces.LeaseOp, ops ...traces.Op) *traces.Trace {
	return &traces.Trace{Name: name, Header: traces.Header{System: "test", UniqueValues: true}, LeaseOps: leaseOps, Ops: ops}
}

// revokeSeenByRead: lease 1 (TTL 60 s) with a and b, c without a lease;
// the client revokes lease 1 (acknowledged, header 5), and a read then
// finds a and b gone at revision 5. No watch.
func revokeSeenByRead() *traces.Trace {
	return readTrace("revoke seen by a read",
		[]traces.LeaseOp{grantOp(1, 10, 20, 1, 60), revokeOp(5, 70, 80, 1, 5)},
		putOp(2, 30, 40, "a", "1", 1, 2), putOp(3, 50, 60, "b", "2", 1, 3), putOp(4, 61, 62, "c", "3", 0, 4),
		getOp(6, 90, 100, 5, leasedKV("c", "3", 4, 0)))
}

// expirySeenByRead: lease 1 (TTL 2 s) with a, kept alive once at 1 s; c
// without a lease; a read at seen finds a gone at revision 4: lease 1
// expired. No watch, no revoke.
func expirySeenByRead(seen int64) *traces.Trace {
	return readTrace("expiry seen by a read",
		[]traces.LeaseOp{grantOp(1, 10, 20, 1, 2), keepAliveOp(4, 1*sec, 1*sec+10, 1, 2)},
		putOp(2, 30, 40, "a", "1", 1, 2), putOp(3, 50, 60, "c", "3", 0, 3),
		getOp(5, seen, seen+10, 4, leasedKV("c", "3", 3, 0)))
}

// SPEC §2.7 Linearizable, §2.9 Lease operations: a revocation the client
// acknowledged deletes the lease's keys at one revision although no watch
// showed it; a read that finds them gone, at a revision no client write
// created, is explained by it. (Before the lease-revocation request, this
// trace failed §2.7: no recorded write created revision 5.)
func TestRevokeSeenOnlyByRead(t *testing.T) {
	v, ps := violated(t, revokeSeenByRead())
	if v != Linearizable || len(ps) > 0 {
		t.Errorf("a revoke seen by a read: %s, %v; want linearizable, no violation", v, ps)
	}
}

// SPEC §2.7 Linearizable, §2.11 LeaseExpiry: an expiry seen only by a read
// (the lease's key gone, the revision advanced) is explained by the
// lease's expiry — after its TTL it passes; a read that finds the key gone
// before the TTL of the acknowledged keep-alive ran out names §2.11.
func TestExpirySeenOnlyByRead(t *testing.T) {
	if v, ps := violated(t, expirySeenByRead(5*sec)); v != Linearizable || len(ps) > 0 {
		t.Errorf("an expiry after the TTL seen by a read: %s, %v; want linearizable, no violation", v, ps)
	}
	if v, ps := violated(t, expirySeenByRead(2*sec)); v != Linearizable || !slices.Equal(ps, []spec.Property{spec.LeaseExpiry}) {
		t.Errorf("an expiry 1 s before the keep-alive's TTL ran out, seen by a read: %s, %v; want exactly LeaseExpiry", v, ps)
	}
}

// SPEC §3.14 LeaseDeletes, §2.7 Linearizable: what a lease explains stays
// narrow. Each mutant is a server deleting what no revocation or expiry
// deletes, seen only by reads; each must fail.
func TestServerDeletionsSeenByReadsMutants(t *testing.T) {
	cases := []struct {
		name string
		tr   *traces.Trace
	}{
		{
			// A key put without a lease is gone: no lease explains it.
			name: "a put deleted with no lease",
			tr: readTrace("unleased",
				[]traces.LeaseOp{grantOp(1, 10, 20, 1, 2)},
				putOp(2, 30, 40, "a", "1", 1, 2), putOp(3, 50, 60, "c", "3", 0, 3),
				getOp(4, 5*sec, 5*sec+10, 4, leasedKV("a", "1", 2, 1))),
		},
		{
			// §3.15 split: lease 1's a is gone while its b stays.
			name: "a lease's keys deleted apart",
			tr: readTrace("split",
				[]traces.LeaseOp{grantOp(1, 10, 20, 1, 2)},
				putOp(2, 30, 40, "a", "1", 1, 2), putOp(3, 50, 60, "b", "2", 1, 3),
				getOp(4, 5*sec, 5*sec+10, 4, leasedKV("b", "2", 3, 1))),
		},
		{
			// The revoked lease's key is gone at a revision below the
			// revoke's call, seen before the revoke was even called, while
			// the lease's keep-alive says it lived: lease 1 (TTL 60 s) has
			// a, a read at 1 s finds it gone at revision 3 and a keep-alive
			// after it still renews the lease.
			name: "a leased key deleted at a revision no lease explains",
			tr: readTrace("unexplained",
				[]traces.LeaseOp{grantOp(1, 10, 20, 1, 60), keepAliveOp(4, 2*sec, 2*sec+10, 1, 60), revokeOp(5, 3*sec, 3*sec+10, 1, 3)},
				putOp(2, 30, 40, "a", "1", 1, 2),
				getOp(3, 1*sec, 1*sec+10, 3)),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, ps := violated(t, tc.tr)
			if v == Linearizable && len(ps) == 0 {
				t.Fatalf("passed; want a violation")
			}
			t.Logf("%s, %v", v, ps)
		})
	}
}

// manyLeasesTrace simulates a correct server with no watch: one client at
// a time grants leases (TTL 2–5 s), puts keys with them (or without, which
// detaches a key), keeps some alive, revokes some; the server expires the
// others after their TTL (kv.LeaseRevokeRequest, recorded nowhere); reads
// of random key ranges are the only witnesses. Every response is the
// model's. steps operations; seed fixes the choices.
func manyLeasesTrace(steps int, seed uint64) *traces.Trace {
	return manyLeasesTraceWith(steps, seed, "")
}

// manyLeasesTraceWith is manyLeasesTrace with a fault of the server:
// "unleased" deletes, once, a key whose version has no lease (as a
// deletion of its own); "early" expires, once, a lease right after a
// keep-alive was acknowledged.
func manyLeasesTraceWith(steps int, seed uint64, fault string) *traces.Trace {
	rng := rand.New(rand.NewPCG(seed, 16))
	tr := &traces.Trace{Name: fmt.Sprintf("many leases, seed %d", seed), Header: traces.Header{System: "simulated", UniqueValues: true}}
	type live struct{ ttl, ack int64 }
	leases := map[int64]*live{}
	var ids []int64
	var s kv.State
	now, next, line := int64(0), int64(0), 0
	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	nkeys := max(steps/4, 8)
	tick := func() (int64, int64) {
		call := now + 1000
		now = call + 1000 + int64(rng.IntN(50))*int64(1e6)
		line++
		return call, call + 1000
	}
	op := func(req kv.Request) {
		call, ret := tick()
		var resp kv.Response
		s, resp = kv.Step(s, req)
		tr.Ops = append(tr.Ops, traces.Op{Line: line, Client: 1, Call: call, Return: ret, Request: req, Response: &resp})
	}
	leaseOp := func(req lease.Request, resp lease.Response) {
		call, ret := tick()
		tr.LeaseOps = append(tr.LeaseOps, traces.LeaseOp{Line: line, Client: 2, Call: call, Return: ret, Request: req, Response: &resp})
	}
	for range steps {
		// The server expires the leases whose TTL ran out.
		for _, id := range slices.Clone(ids) {
			if l := leases[id]; l != nil && now > l.ack+l.ttl*sec+int64(rng.IntN(500))*int64(1e6) {
				s, _ = kv.Step(s, kv.Request{LeaseRevoke: &kv.LeaseRevokeRequest{Lease: id}})
				delete(leases, id)
				ids = slices.DeleteFunc(ids, func(x int64) bool { return x == id })
			}
		}
		var some int64
		if len(ids) > 0 {
			some = ids[rng.IntN(len(ids))]
		}
		if fault == "unleased" && len(tr.Ops) > steps/4 {
			for _, k := range s.Snapshot("k", "l", 0) {
				if k.Lease == 0 {
					s, _ = kv.Step(s, kv.Request{Delete: &kv.DeleteRequest{Key: k.Key}})
					fault = ""
					break
				}
			}
		}
		switch p := rng.IntN(100); {
		case p < 15 || some == 0:
			next++
			ttl := int64(2 + rng.IntN(4))
			leaseOp(lease.Request{Grant: &lease.GrantRequest{ID: next, TTL: ttl}}, lease.Response{ID: next, TTL: ttl})
			leases[next], ids = &live{ttl: ttl, ack: tr.LeaseOps[len(tr.LeaseOps)-1].Call}, append(ids, next)
		case p < 50:
			l := some
			if rng.IntN(5) == 0 {
				l = 0
			}
			op(kv.Request{Put: &kv.PutRequest{Key: key(rng.IntN(nkeys)), Value: fmt.Sprint(line), Lease: l}})
		case p < 58:
			leaseOp(lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: some}}, lease.Response{ID: some, TTL: leases[some].ttl})
			leases[some].ack = tr.LeaseOps[len(tr.LeaseOps)-1].Call
			if fault == "early" && len(tr.Ops) > steps/4 && len(s.Snapshot("k", "l", 0)) > 0 {
				before := s.Revision()
				if s, _ = kv.Step(s, kv.Request{LeaseRevoke: &kv.LeaseRevokeRequest{Lease: some}}); s.Revision() > before {
					delete(leases, some)
					ids = slices.DeleteFunc(ids, func(x int64) bool { return x == some })
					fault = ""
				}
			}
		case p < 65:
			s, _ = kv.Step(s, kv.Request{LeaseRevoke: &kv.LeaseRevokeRequest{Lease: some}})
			leaseOp(lease.Request{Revoke: &lease.RevokeRequest{ID: some}}, lease.Response{Revision: s.Revision()})
			delete(leases, some)
			ids = slices.DeleteFunc(ids, func(x int64) bool { return x == some })
		default:
			a := rng.IntN(nkeys)
			op(kv.Request{Range: &kv.RangeRequest{Key: key(a), RangeEnd: key(a + 1 + rng.IntN(nkeys/2))}})
		}
	}
	return tr
}

// SPEC §2.7 Linearizable, §3.14 LeaseDeletes, §2.11 LeaseExpiry: a correct
// server's many revocations and expiries, seen only by reads of parts of
// the key space, are linearized — and by the revision order, not by
// porcupine's search, which the lease deletions of unknown outcome would
// make costly (the gap-filling stage, gaps.go).
func TestManyLeasesWithoutWatches(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		tr := manyLeasesTrace(600, seed)
		res, err := Check(tr, Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict != Linearizable || len(res.Violations) > 0 {
			t.Fatalf("seed %d: %s, %v", seed, res.Verdict, res.Violations)
		}
		if res.Method != "revision order" {
			t.Errorf("seed %d: decided by %s; want the revision order", seed, res.Method)
		}
		if res.Checks[spec.LeaseExpiry] == 0 {
			t.Errorf("seed %d: no lease deletion placed and judged", seed)
		}
		t.Logf("seed %d: %d ops, %d lease ops, %d lease deletions judged", seed, len(tr.Ops), len(tr.LeaseOps), res.Checks[spec.LeaseExpiry])
	}
}

// SPEC §2.11 LeaseExpiry, §2.7 Linearizable: among many leases seen only by
// reads, a lease expired right after a keep-alive was acknowledged is
// named LeaseExpiry, and a key put without a lease that the server deleted
// makes the history not linearizable.
func TestManyLeasesWithoutWatchesMutants(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		v, ps := violated(t, manyLeasesTraceWith(600, seed, "early"))
		if v != Linearizable || !slices.Equal(ps, []spec.Property{spec.LeaseExpiry}) {
			t.Errorf("seed %d, a lease expired early: %s, %v; want exactly LeaseExpiry", seed, v, ps)
		}
	}
	// Seeds whose search porcupine ends quickly (the lease deletions of
	// unknown outcome make others costly: see the report of issue 16).
	for _, seed := range []uint64{2, 11} {
		res, err := Check(manyLeasesTraceWith(600, seed, "unleased"), Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict != NotLinearizable || len(res.Violations) != 1 || res.Violations[0].Property != spec.Linearizable {
			t.Errorf("seed %d, an unleased key deleted by the server: %s, %v; want not linearizable", seed, res.Verdict, res.Violations)
		}
	}
}

// BenchmarkManyLeasesWithoutWatches: 5,000 steps of manyLeasesTrace
// (hundreds of leases, no watch), checked end to end.
func BenchmarkManyLeasesWithoutWatches(b *testing.B) {
	tr := manyLeasesTrace(5000, 1)
	b.ResetTimer()
	for range b.N {
		res, err := Check(tr, Options{})
		if err != nil || res.Verdict != Linearizable || len(res.Violations) > 0 {
			b.Fatalf("%v %v %v", err, res.Verdict, res.Violations)
		}
	}
}
