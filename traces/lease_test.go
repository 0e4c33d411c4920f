package traces

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
)

// SPEC §2.9: lease operations, a put's lease and a version's lease survive
// a write and a read.
func TestLeaseRoundTrip(t *testing.T) {
	tr := &Trace{Name: "leases", Header: Header{System: "test", Start: "2026-12-02T00:00:00Z"},
		Ops: []Op{{Client: 1, Call: 3, Return: 4,
			Request:  kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1", Lease: 7}},
			Response: &kv.Response{Revision: 2, Put: &kv.PutResponse{}}},
			{Client: 1, Call: 5, Return: 6, Request: kv.Request{Range: &kv.RangeRequest{Key: "a"}},
				Response: &kv.Response{Revision: 2, Range: &kv.RangeResponse{Count: 1, KVs: []kv.KeyValue{{Key: "a", Value: "1", CreateRevision: 2, ModRevision: 2, Version: 1, Lease: 7}}}}}},
		LeaseOps: []LeaseOp{
			{Client: 1, Call: 1, Return: 2, Request: lease.Request{Grant: &lease.GrantRequest{ID: 7, TTL: 5}}, Response: &lease.Response{Revision: 1, ID: 7, TTL: 5}},
			{Client: 1, Call: 7, Return: 8, Request: lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: 7}}, Response: &lease.Response{ID: 7, TTL: 5}},
			{Client: 1, Call: 9, Return: 10, Request: lease.Request{TimeToLive: &lease.TimeToLiveRequest{ID: 7, Keys: true}}, Response: &lease.Response{ID: 7, TTL: 4, GrantedTTL: 5, Keys: []string{"a"}}},
			{Client: 1, Call: 11, Return: 12, Request: lease.Request{Leases: &lease.LeasesRequest{}}, Response: &lease.Response{IDs: []int64{7}}},
			{Client: 1, Call: 13, Request: lease.Request{Revoke: &lease.RevokeRequest{ID: 7}}, Error: "context deadline exceeded"},
			{Client: 2, Call: 14, Return: 15, Request: lease.Request{Revoke: &lease.RevokeRequest{ID: 8}}, Response: &lease.Response{Err: lease.ErrNotFound}},
		}}
	var buf bytes.Buffer
	if err := Write(&buf, tr); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf, "leases")
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for i := range got.Ops {
		got.Ops[i].Line = 0
	}
	for i := range got.LeaseOps {
		got.LeaseOps[i].Line = 0
	}
	if !reflect.DeepEqual(got.Ops, tr.Ops) {
		t.Errorf("ops: got %+v, want %+v", got.Ops, tr.Ops)
	}
	if len(got.LeaseOps) != len(tr.LeaseOps) {
		t.Fatalf("got %d lease ops, want %d", len(got.LeaseOps), len(tr.LeaseOps))
	}
	for i, o := range got.LeaseOps {
		w := tr.LeaseOps[i]
		if o.Response != nil && w.Response != nil && !kv.SameError(o.Response.Err, w.Response.Err) {
			t.Errorf("lease op %d: error %v, want %v", i, o.Response.Err, w.Response.Err)
		}
		if o.Response != nil {
			o.Response.Err, w.Response.Err = nil, nil
		}
		if !reflect.DeepEqual(o, w) {
			t.Errorf("lease op %d: got %+v, want %+v", i, o, w)
		}
	}
}

// A malformed lease record fails with a message that names what is wrong;
// version 1 has no lease records.
func TestLeaseRecordErrors(t *testing.T) {
	const h2 = `{"format":"watchspec-trace","version":2,"system":"t","start":"2026-12-02T00:00:00Z"}`
	const h1 = `{"format":"watchspec-trace","version":1,"system":"t","start":"2026-12-02T00:00:00Z"}`
	for _, c := range []struct{ head, line, want string }{
		{h1, `{"type":"lease","client":1,"call":1,"return":2,"request":{"leases":{}},"response":{}}`, "new in version 2"},
		{h2, `{"type":"lease","client":1,"call":1,"return":2,"request":{},"response":{}}`, "exactly one"},
		{h2, `{"type":"lease","client":1,"call":1,"return":2,"request":{"revoke":{"id":1},"leases":{}},"response":{}}`, "exactly one"},
		{h2, `{"type":"lease","client":1,"call":1,"request":{"leases":{}},"response":{}}`, `needs its "return"`},
		{h2, `{"type":"lease","client":1,"call":1,"return":2,"request":{"leases":{}}}`, `needs a "response"`},
		{h2, `{"type":"lease","client":1,"call":1,"return":2,"request":{"keepalive":{"id":1}},"response":{"ttl":-2}}`, "ttl -2"},
		{h2, `{"type":"lease","client":1,"call":1,"return":2,"request":{"grant":{"ttl":-1}},"response":{}}`, "negative"},
		{h2, `{"type":"lease","client":1,"call":1,"return":2,"request":{"grant":{"ttl":1,"lease":3}},"response":{}}`, "lease"},
	} {
		_, err := Read(strings.NewReader(c.head+"\n"+c.line+"\n"), "t")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.line, err, c.want)
		}
	}
}
