package lease_test

import (
	"fmt"

	"github.com/watchspec/watchspec/model/lease"
)

// A server expired lease 1 (TTL 10 s) 2 s after a client's keep-alive was
// acknowledged: §2.11 LeaseExpiry.
func ExampleCheck() {
	const s = int64(1e9)
	h := lease.History{
		Ops: []lease.Op{
			{Where: "line 2", Call: 0, Return: 1, Request: lease.Request{Grant: &lease.GrantRequest{ID: 1, TTL: 10}}, Response: &lease.Response{ID: 1, TTL: 10}},
			{Where: "line 4", Call: 5 * s, Return: 5*s + 1, Request: lease.Request{KeepAlive: &lease.KeepAliveRequest{ID: 1}}, Response: &lease.Response{ID: 1, TTL: 10}},
		},
		Attaches:  []lease.Attach{{Where: "line 3", Key: "a", Lease: 1, Revision: 2, Call: 2, Return: 3}},
		Deletions: []lease.Deletion{{Where: "line 5", Key: "a", Revision: 3, Lease: 1, Observed: 7 * s}},
	}
	for _, v := range lease.Check(h) {
		fmt.Println(v)
	}
	// Output:
	// LeaseExpiry §2.11 revisions=[3] keys=["a"]: line 5: "a", attached to lease 1 (TTL 10 s), was seen deleted by expiry 8.000 s before the lease could expire: a grant or keep-alive called at 5.000 s was acknowledged, so the lease lived at least until 15.000 s
}

// Step answers lease operations as etcd does: a revoked lease is gone.
func ExampleStep() {
	var s lease.State
	s, r := lease.Step(s, lease.Request{Grant: &lease.GrantRequest{TTL: 1}})
	fmt.Println("granted TTL", r.TTL)
	s, _ = lease.Step(s, lease.Request{Revoke: &lease.RevokeRequest{ID: r.ID}})
	_, r = lease.Step(s, lease.Request{TimeToLive: &lease.TimeToLiveRequest{ID: r.ID}})
	fmt.Println("TTL after revoke", r.TTL)
	// Output:
	// granted TTL 2
	// TTL after revoke -1
}
