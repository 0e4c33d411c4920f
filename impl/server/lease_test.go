package server

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/status"

	"github.com/watchspec/watchspec/impl/store"
)

// leaseScript drives the Lease service and lease-carrying puts through raw
// gRPC and returns a transcript: answers, headers' revisions, error codes
// and texts. TestLeaseServiceSameAsEtcd runs it against etcd; TestLeaseService
// demands the same transcript of this server. IDs are chosen by the script
// (the server-chosen ones are checked apart); remaining TTLs, which depend
// on timing, are printed as "ok" when they are between half the TTL and
// the TTL; attached keys are sorted (etcd lists them in map order).
func leaseScript(t *testing.T, rc *rawConn) []string {
	ctx := testCtx(t)
	lc := pb.NewLeaseClient(rc.conn)
	var out []string
	say := func(step string, resp fmt.Stringer, err error, show func() string) {
		if err != nil {
			st, _ := status.FromError(err)
			out = append(out, fmt.Sprintf("%s: ERR %v %q", step, st.Code(), st.Message()))
			return
		}
		out = append(out, step+": "+show())
	}
	remaining := func(ttl, granted int64) string {
		if ttl >= 0 && ttl <= granted && ttl >= granted/2 {
			return "ok"
		}
		return fmt.Sprint(ttl)
	}
	grant := func(step string, id, ttl int64) {
		r, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: ttl})
		say(step, r, err, func() string {
			return fmt.Sprintf("ID %d TTL %d rev %d error %q", r.ID, r.TTL, r.Header.Revision, r.Error)
		})
	}
	put := func(step, key string, lease int64, ignoreLease bool) {
		r, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: lease, IgnoreLease: ignoreLease})
		say(step, r, err, func() string { return fmt.Sprintf("rev %d", r.Header.Revision) })
	}
	get := func(step, key, end string) {
		r, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: []byte(key), RangeEnd: []byte(end)})
		say(step, r, err, func() string {
			var kvs []string
			for _, kv := range r.Kvs {
				kvs = append(kvs, kvString(kv))
			}
			return fmt.Sprintf("rev %d %v", r.Header.Revision, kvs)
		})
	}
	ttl := func(step string, id int64, keys bool) {
		r, err := lc.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: keys})
		say(step, r, err, func() string {
			var ks []string
			for _, k := range r.Keys {
				ks = append(ks, string(k))
			}
			sort.Strings(ks) // etcd: map order (lease.go Keys)
			return fmt.Sprintf("ID %d TTL %s granted %d keys %v rev %d", r.ID, remaining(r.TTL, r.GrantedTTL), r.GrantedTTL, ks, r.Header.Revision)
		})
	}
	leases := func(step string) {
		r, err := lc.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		say(step, r, err, func() string {
			var ids []int64
			for _, l := range r.Leases {
				ids = append(ids, l.ID)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] }) // etcd lists by expiry
			return fmt.Sprintf("%v rev %d", ids, r.Header.Revision)
		})
	}
	revoke := func(step string, id int64) {
		r, err := lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: id})
		say(step, r, err, func() string { return fmt.Sprintf("rev %d", r.Header.Revision) })
	}

	grant("grant 100", 100, 60)
	grant("grant 100 again", 100, 60)
	grant("grant above the maximum TTL", 101, 9_000_000_001)
	grant("grant 103", 103, 30)
	put("put a with 100", "a", 100, false)
	put("put b with 100", "b", 100, false)
	put("put c with an unknown lease", "c", 999, false)
	tr, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t"), Value: []byte("v")}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("u"), Value: []byte("v"), Lease: 999}}}}})
	say("txn putting with an unknown lease", tr, err, func() string { return fmt.Sprintf("rev %d", tr.Header.Revision) })
	tr, err = rc.kv.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Lease{Lease: 100}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("ta"), Value: []byte("v"), Lease: 103}}}}})
	say("txn on a's lease, putting with 103", tr, err, func() string { return fmt.Sprintf("succeeded %v rev %d", tr.Succeeded, tr.Header.Revision) })
	get("get a, b", "a", "c")
	get("get t..", "t", "u")
	ttl("timetolive 100 with keys", 100, true)
	ttl("timetolive 103", 103, false)
	ttl("timetolive of an unknown lease", 999, true)
	leases("leases")

	ka, err := lc.LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{100, 999} {
		if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
		r, err := ka.Recv()
		say(fmt.Sprintf("keep-alive %d", id), r, err, func() string { return fmt.Sprintf("ID %d TTL %d rev %d", r.ID, r.TTL, r.Header.Revision) })
	}
	ka.CloseSend()
	if _, err := ka.Recv(); err != io.EOF {
		out = append(out, fmt.Sprintf("keep-alive stream end: %v", err))
	}

	// The revoke: both keys at one revision, in one watch response.
	ws := openWatch(t, rc)
	ws.create(&pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("c"), StartRevision: 0, PrevKv: true})
	out = append(out, "watch: "+shape(ws.recv()))
	revoke("revoke 100", 100)
	out = append(out, "watch: "+shape(ws.recv()))
	get("get a, b after the revoke", "a", "c")
	revoke("revoke 100 again", 100)
	ttl("timetolive 100 after the revoke", 100, true)

	// Overwrites and deletes detach; ignore_lease keeps the lease.
	put("put d with 103", "d", 103, false)
	put("put d without a lease", "d", 0, false)
	put("put e with 103", "e", 103, false)
	put("put e with ignore_lease", "e", 0, true)
	put("put f with 103", "f", 103, false)
	r, err := rc.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("f")})
	say("delete f", r, err, func() string { return fmt.Sprintf("deleted %d rev %d", r.Deleted, r.Header.Revision) })
	ttl("timetolive 103 with keys", 103, true)
	get("get d", "d", "")
	get("get e", "e", "")
	revoke("revoke 103", 103)
	leases("leases after the revokes")
	get("get everything", "\x00", "\x00")
	return out
}

// wantLeaseScript is etcd 3.7.3's transcript of leaseScript
// (TestLeaseServiceSameAsEtcd checks it against a real etcd).
var wantLeaseScript = []string{
	`grant 100: ID 100 TTL 60 rev 1 error ""`,
	`grant 100 again: ERR FailedPrecondition "etcdserver: lease already exists"`,
	`grant above the maximum TTL: ERR OutOfRange "etcdserver: too large lease TTL"`,
	`grant 103: ID 103 TTL 30 rev 1 error ""`,
	`put a with 100: rev 2`,
	`put b with 100: rev 3`,
	`put c with an unknown lease: ERR NotFound "etcdserver: requested lease not found"`,
	`txn putting with an unknown lease: ERR NotFound "etcdserver: requested lease not found"`,
	`txn on a's lease, putting with 103: succeeded true rev 4`,
	`get a, b: rev 4 ["a"="v"/c2/m2/v1/l100 "b"="v"/c3/m3/v1/l100]`,
	`get t..: rev 4 ["ta"="v"/c4/m4/v1/l103]`,
	`timetolive 100 with keys: ID 100 TTL ok granted 60 keys [a b] rev 4`,
	`timetolive 103: ID 103 TTL ok granted 30 keys [] rev 4`,
	`timetolive of an unknown lease: ID 999 TTL -1 granted 0 keys [] rev 4`,
	`leases: [100 103] rev 4`,
	`keep-alive 100: ID 100 TTL 60 rev 4`,
	`keep-alive 999: ID 999 TTL 0 rev 4`,
	`watch: id=0 rev=4 created`,
	`revoke 100: rev 5`,
	`watch: id=0 rev=5 DELETE:"a"=""/c0/m5/v0/l0(prev "a"="v"/c2/m2/v1/l100) DELETE:"b"=""/c0/m5/v0/l0(prev "b"="v"/c3/m3/v1/l100)`,
	`get a, b after the revoke: rev 5 []`,
	`revoke 100 again: ERR NotFound "etcdserver: requested lease not found"`,
	`timetolive 100 after the revoke: ID 100 TTL -1 granted 0 keys [] rev 5`,
	`put d with 103: rev 6`,
	`put d without a lease: rev 7`,
	`put e with 103: rev 8`,
	`put e with ignore_lease: rev 9`,
	`put f with 103: rev 10`,
	`delete f: deleted 1 rev 11`,
	`timetolive 103 with keys: ID 103 TTL ok granted 30 keys [e ta] rev 11`,
	`get d: rev 11 ["d"="v"/c6/m7/v2/l0]`,
	`get e: rev 11 ["e"="v"/c8/m9/v2/l103]`,
	`revoke 103: rev 12`,
	`leases after the revokes: [] rev 12`,
	`get everything: rev 12 ["d"="v"/c6/m7/v2/l0]`,
}

// SPEC §2.9 Lease operations, §2.10 LeaseAttach, §3.15 LeaseAtomic: the Lease service — grant
// errors, puts and transactions with unknown leases, time-to-live with
// keys, keep-alive (TTL 0 for an unknown lease), a revoke deleting every
// attached key at one revision in one watch response, detaching by
// overwrite and delete, ignore_lease — answers as etcd 3.7 does.
func TestLeaseService(t *testing.T) {
	r := startTest(t, testOptions())
	rc := dialRaw(t, r.Addr())
	compareTranscripts(t, "watchspec's Lease service", leaseScript(t, rc), wantLeaseScript)
}

// SPEC §2.9 Lease operations, §2.11 LeaseExpiry: a server-chosen ID, the minimum TTL, and expiry on the
// store's clock through the server (no sleeps: a fake clock).
func TestLeaseServerChosenIDAndExpiry(t *testing.T) {
	clk := &fakeClock{now: time.Unix(5000, 0)}
	opts := testOptions()
	opts.Store.Lease = store.LeaseOptions{Clock: clk, CheckInterval: -1}
	r := startTest(t, opts)
	rc := dialRaw(t, r.Addr())
	ctx := testCtx(t)
	lc := pb.NewLeaseClient(rc.conn)
	g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	if g.ID <= 0 || g.TTL != store.DefaultMinLeaseTTL {
		t.Fatalf("grant with ID 0 and TTL 1: %v, want a positive ID and the minimum TTL %d", g, store.DefaultMinLeaseTTL)
	}
	if _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: g.ID}); err != nil {
		t.Fatal(err)
	}
	clk.advance(2*time.Second - time.Nanosecond)
	if ids, _ := r.Store().ExpireLeases(ctx); len(ids) != 0 {
		t.Fatalf("expired %v before the TTL", ids)
	}
	clk.advance(time.Nanosecond)
	if ids, _ := r.Store().ExpireLeases(ctx); len(ids) != 1 {
		t.Fatalf("expired %v at the TTL, want %d", ids, g.ID)
	}
	if rr, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k")}); err != nil || len(rr.Kvs) != 0 {
		t.Fatalf("after the expiry: %v %v", rr, err)
	}
}

// SPEC §2.9 Lease operations: leases survive a restart of the server, with their keys.
func TestLeasesSurviveServerRestart(t *testing.T) {
	dir := t.TempDir()
	r, err := Start(dir, "127.0.0.1:0", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	lc := pb.NewLeaseClient(dialRaw(t, r.Addr()).conn)
	if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 77, TTL: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Store().Put(ctx, store.PutRequest{Key: "k", Value: "v", Lease: 77}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = Start(dir, "127.0.0.1:0", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lc = pb.NewLeaseClient(dialRaw(t, r.Addr()).conn)
	tl, err := lc.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 77, Keys: true})
	if err != nil || tl.GrantedTTL != 100 || tl.TTL < 95 || len(tl.Keys) != 1 || string(tl.Keys[0]) != "k" {
		t.Fatalf("lease 77 after the restart: %v %v", tl, err)
	}
}

// fakeClock is a store.Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
