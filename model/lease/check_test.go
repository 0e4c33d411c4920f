package lease

import (
	"testing"

	"github.com/watchspec/watchspec/model/spec"
)

const sec = int64(1e9)

// valid is a lease history that breaks nothing: lease 1 (TTL 5 s) granted at
// 0, kept alive at 3 s, with keys a and b put at revisions 2 and 3 and
// deleted by its expiry at revision 4, seen at 9 s; lease 2 granted and
// revoked, its key c deleted at revision 6.
func valid() History {
	return History{
		Ops: []Op{
			{Where: "line 1", Call: 0, Return: 1, Request: Request{Grant: &GrantRequest{ID: 1, TTL: 5}}, Response: &Response{ID: 1, TTL: 5}},
			{Where: "line 2", Call: 3 * sec, Return: 3*sec + 1, Request: Request{KeepAlive: &KeepAliveRequest{ID: 1}}, Response: &Response{ID: 1, TTL: 5}},
			{Where: "line 3", Call: 2, Return: 3, Request: Request{Grant: &GrantRequest{TTL: 60}}, Response: &Response{ID: 2, TTL: 60}},
			{Where: "line 4", Call: 10 * sec, Return: 10*sec + 1, Request: Request{Revoke: &RevokeRequest{ID: 2}}, Response: &Response{}},
		},
		Attaches: []Attach{
			{Where: "line 5", Key: "a", Lease: 1, Revision: 2, Call: 10, Return: 11},
			{Where: "line 6", Key: "b", Lease: 1, Revision: 3, Call: 12, Return: 13},
			{Where: "line 7", Key: "c", Lease: 2, Revision: 5, Call: 14, Return: 15},
		},
		Deletions: []Deletion{
			{Where: "line 8", Key: "a", Revision: 4, Lease: 1, Observed: 9 * sec},
			{Where: "line 8", Key: "b", Revision: 4, Lease: 1, Observed: 9 * sec},
			{Where: "line 9", Key: "c", Revision: 6, Lease: 2, Observed: 10*sec + 5},
		},
	}
}

func properties(vs []spec.Violation) []spec.Property {
	var ps []spec.Property
	for _, v := range vs {
		ps = append(ps, v.Property)
	}
	return ps
}

// SPEC §2.10 LeaseAttach, §2.11 LeaseExpiry, §3.14 LeaseDeletes, §3.15
// LeaseAtomic: the valid history passes, and each mutant of it — one bug of
// a server — is caught with exactly its property.
func TestCheckMutants(t *testing.T) {
	if vs := Check(valid()); len(vs) != 0 {
		t.Fatalf("valid history: %v", vs)
	}
	for _, m := range []struct {
		name   string
		mutate func(*History)
		want   spec.Property
	}{
		{"early expiry: seen 1 s after the keep-alive", func(h *History) {
			h.Deletions[0].Observed, h.Deletions[1].Observed = 4*sec, 4*sec
		}, spec.LeaseExpiry},
		{"leases forgotten across a restart: keys gone before the TTL", func(h *History) {
			// A restart at 1 s that forgets lease 1 deletes its keys at
			// once; the grant's TTL ran to 5 s.
			h.Ops = h.Ops[:1:1]
			h.Ops = append(h.Ops, valid().Ops[2:]...)
			h.Deletions[0].Observed, h.Deletions[1].Observed = 1*sec, 1*sec
		}, spec.LeaseExpiry},
		{"forgotten across a restart, keys kept: a keep-alive answered TTL 0 at 4 s", func(h *History) {
			h.Ops = append(h.Ops, Op{Where: "line 11", Call: 4 * sec, Return: 4*sec + 1, Request: Request{KeepAlive: &KeepAliveRequest{ID: 1}}, Response: &Response{ID: 1}})
		}, spec.LeaseExpiry},
		{"forgotten: a time-to-live answered -1 at 4 s", func(h *History) {
			h.Ops = append(h.Ops, Op{Where: "line 11", Call: 4 * sec, Return: 4*sec + 1, Request: Request{TimeToLive: &TimeToLiveRequest{ID: 1}}, Response: &Response{ID: 1, TTL: -1}})
		}, spec.LeaseExpiry},
		{"forgotten: a put with the lease refused at 4 s", func(h *History) {
			h.Refused = append(h.Refused, Attach{Where: "line 11", Key: "d", Lease: 1, Call: 4 * sec, Return: 4*sec + 1})
		}, spec.LeaseExpiry},
		{"one attached key deleted at another revision", func(h *History) { h.Deletions[1].Revision = 5 }, spec.LeaseAtomic},
		{"server-made delete of a key without a lease", func(h *History) { h.Deletions[2].Lease = 0 }, spec.LeaseDeletes},
		{"put with an unknown lease answered OK", func(h *History) { h.Attaches[0].Lease = 99 }, spec.LeaseAttach},
		{"put with a revoked lease answered OK", func(h *History) {
			h.Attaches = append(h.Attaches, Attach{Where: "line 10", Key: "d", Lease: 2, Revision: 7, Call: 11 * sec, Return: 11*sec + 1})
		}, spec.LeaseAttach},
	} {
		h := valid()
		m.mutate(&h)
		got := properties(Check(h))
		if len(got) == 0 || got[0] != m.want {
			t.Errorf("%s: got %v, want %s", m.name, Check(h), m.want)
		}
	}
}

// SPEC §2.11 LeaseExpiry: legal variants pass — expiry late without bound,
// a revocation explains a deletion at any time after its call, a grant of
// unknown outcome that asked for the ID explains a put, a lease seen gone
// after its TTL, a revoke answered "not found" after clientv3 retried it.
func TestCheckLegalVariants(t *testing.T) {
	for _, m := range []struct {
		name   string
		mutate func(*History)
	}{
		{"expiry an hour late", func(h *History) { h.Deletions[0].Observed, h.Deletions[1].Observed = 3600*sec, 3600*sec }},
		{"expiry exactly at the TTL", func(h *History) { h.Deletions[0].Observed, h.Deletions[1].Observed = 8*sec, 8*sec }},
		{"revoked right after the grant", func(h *History) {
			h.Ops[3].Call, h.Ops[3].Return = 20, 21
			h.Deletions[2].Observed = 22
		}},
		{"revoke of unknown outcome", func(h *History) { h.Ops[3].Response = nil }},
		{"seen gone after its TTL: a keep-alive answered TTL 0, a time-to-live -1, a put refused", func(h *History) {
			h.Ops = append(h.Ops,
				Op{Where: "line 11", Call: 8 * sec, Return: 8*sec + 1, Request: Request{KeepAlive: &KeepAliveRequest{ID: 1}}, Response: &Response{ID: 1}},
				Op{Where: "line 12", Call: 8 * sec, Return: 8*sec + 1, Request: Request{TimeToLive: &TimeToLiveRequest{ID: 1}}, Response: &Response{ID: 1, TTL: -1}})
			h.Refused = append(h.Refused, Attach{Where: "line 13", Key: "d", Lease: 1, Call: 9 * sec, Return: 9*sec + 1})
		}},
		{"a revoke retried by the client answers not found (its first try revoked)", func(h *History) {
			h.Ops[3].Response = &Response{Err: ErrNotFound}
			h.Ops = append(h.Ops, Op{Where: "line 11", Call: 11 * sec, Return: 11*sec + 1, Request: Request{KeepAlive: &KeepAliveRequest{ID: 2}}, Response: &Response{ID: 2}})
			h.Refused = append(h.Refused, Attach{Where: "line 12", Key: "d", Lease: 2, Call: 11 * sec, Return: 11*sec + 1})
		}},
		{"grant of unknown outcome", func(h *History) {
			h.Ops[0].Response = nil
			h.Ops[1].Response = nil
		}},
	} {
		h := valid()
		m.mutate(&h)
		if vs := Check(h); len(vs) != 0 {
			t.Errorf("%s: %v", m.name, vs)
		}
	}
}
