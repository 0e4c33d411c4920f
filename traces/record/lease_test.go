package record_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// SPEC §2.9–§2.11, §3.14, §3.15 against real etcd 3.7.3: leases granted,
// kept alive, listed, revoked and expired through rec.NewLease, puts with a
// lease and one with a revoked lease, and a watch that sees the server's
// deletions; the recorded trace reads back and passes the checker.
func TestRecordLeasesAgainstEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and waits for a lease to expire")
	}
	cli, rec, buf, stop := recordingEtcd(t, "traces/record TestRecordLeasesAgainstEtcd")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leases := rec.NewLease(cli.Lease)
	c := rec.Client(cli)
	wc := rec.Client(cli)
	rw := wc.Watch(ctx, cli.Watcher, watch.Request{Key: "/l/", RangeEnd: kv.PrefixEnd("/l/"), PrevKV: true})
	deletes := make(chan kv.Event, 10)
	go func() {
		for r := range rw.C {
			for _, e := range r.Events {
				if e.Type == kv.Delete {
					deletes <- e
				}
			}
		}
	}()
	put := func(key, value string, id clientv3.LeaseID) kv.Response {
		t.Helper()
		resp, err := c.Do(ctx, kv.Request{Put: &kv.PutRequest{Key: key, Value: value, Lease: int64(id)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	long, err := leases.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	put("/l/a", "1", long.ID)
	put("/l/b", "2", long.ID)
	if _, err := leases.KeepAliveOnce(ctx, long.ID); err != nil {
		t.Fatal(err)
	}
	ttl, err := leases.TimeToLive(ctx, long.ID, clientv3.WithAttachedKeys())
	if err != nil || len(ttl.Keys) != 2 {
		t.Fatalf("TimeToLive = %+v, %v; want the 2 keys", ttl, err)
	}
	if _, err := leases.Leases(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Revoke(ctx, long.ID); err != nil {
		t.Fatal(err)
	}
	if r := put("/l/c", "3", long.ID); !kv.SameError(r.Err, lease.ErrNotFound) {
		t.Fatalf("put with a revoked lease = %+v, want %v", r, lease.ErrNotFound)
	}
	if _, err := leases.KeepAliveOnce(ctx, long.ID); err == nil {
		t.Fatal("keep-alive of a revoked lease succeeded")
	}
	short, err := leases.Grant(ctx, 1) // raised to etcd's minimum
	if err != nil {
		t.Fatal(err)
	}
	put("/l/d", "4", short.ID)
	for n := 0; n < 3; n++ { // a and b (revoked), d (expired)
		select {
		case <-deletes:
		case <-ctx.Done():
			t.Fatalf("only %d of the 3 deletions arrived", n)
		}
	}
	if r, err := leases.TimeToLive(ctx, short.ID); err != nil || r.TTL != -1 {
		t.Fatalf("TimeToLive of an expired lease = %+v, %v; want TTL -1", r, err)
	}
	cancel()
	for range rw.C {
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Read(bytes.NewReader(buf.Bytes()), "leases")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.LeaseOps) != 8 {
		t.Fatalf("%d lease records, want 8:\n%s", len(tr.LeaseOps), buf.String())
	}
	res, err := linearizability.Check(tr, linearizability.Options{SingleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != linearizability.Linearizable || len(res.Violations) > 0 {
		t.Fatalf("verdict %s, violations %v\n%s", res.Verdict, res.Violations, buf.String())
	}
	if n := res.Checks[spec.LeaseDeletes]; n != 3 {
		t.Errorf("%d server deletions judged, want 3 (a and b revoked, d expired)", n)
	}
}

// SPEC §2.7 Linearizable, §2.9 Lease operations, §2.11 LeaseExpiry against
// real etcd 3.7.3, with no watch: a revoke, a revoke that deletes nothing
// (its key was overwritten without the lease) and an expiry, each seen only
// by reads that find the keys gone at revisions no client write created.
// The checker explains them by the leases' deletions (before the lease
// revocation request it failed §2.7 on such a trace). With -record-corpus
// it writes ../corpus/etcd-3.7.3-lease-reads-only.ndjson.gz.
func TestRecordLeaseReadsOnlyAgainstEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd and waits for a lease to expire")
	}
	cli, rec, buf, stop := recordingEtcd(t, "traces/record TestRecordLeaseReadsOnlyAgainstEtcd")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leases := rec.NewLease(cli.Lease)
	c := rec.Client(cli)
	do := func(req kv.Request) kv.Response {
		t.Helper()
		resp, err := c.Do(ctx, req)
		if err != nil || resp.Err != nil {
			t.Fatalf("%+v: %+v, %v", req, resp, err)
		}
		return resp
	}
	put := func(key, value string, id clientv3.LeaseID) {
		do(kv.Request{Put: &kv.PutRequest{Key: key, Value: value, Lease: int64(id)}})
	}
	read := func() []string {
		r := do(kv.Request{Range: &kv.RangeRequest{Key: "/r/", RangeEnd: kv.PrefixEnd("/r/")}})
		var ks []string
		for _, x := range r.Range.KVs {
			ks = append(ks, x.Key)
		}
		return ks
	}
	grant := func(ttl int64) clientv3.LeaseID {
		g, err := leases.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}

	long := grant(60)
	put("/r/a", "1", long)
	put("/r/b", "2", long)
	put("/r/c", "3", 0)
	read()
	if _, err := leases.Revoke(ctx, long); err != nil {
		t.Fatal(err)
	}
	if got := read(); !slices.Equal(got, []string{"/r/c"}) {
		t.Fatalf("after the revoke: %v, want only /r/c", got)
	}
	detached := grant(60)
	put("/r/e", "4", detached)
	put("/r/e", "5", 0) // leaves the lease
	if _, err := leases.Revoke(ctx, detached); err != nil {
		t.Fatal(err)
	}
	read()
	short := grant(1) // raised to etcd's minimum, 2 s
	put("/r/d", "6", short)
	if _, err := leases.KeepAliveOnce(ctx, short); err != nil {
		t.Fatal(err)
	}
	for slices.Contains(read(), "/r/d") {
		select {
		case <-ctx.Done():
			t.Fatal("lease never expired")
		case <-time.After(200 * time.Millisecond):
		}
	}
	put("/r/f", "7", 0)
	read()
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Read(bytes.NewReader(buf.Bytes()), "lease-reads-only")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Watches) != 0 {
		t.Fatalf("%d watches recorded, want none", len(tr.Watches))
	}
	res, err := linearizability.Check(tr, linearizability.Options{SingleServer: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != linearizability.Linearizable || len(res.Violations) > 0 {
		t.Fatalf("verdict %s, violations %v\n%s", res.Verdict, res.Violations, buf.String())
	}
	// The revoke's and the expiry's deletions were placed and judged.
	if n := res.Checks[spec.LeaseExpiry]; n != 2 {
		t.Errorf("%d lease deletions judged, want 2 (the revoke's, the expiry's)", n)
	}
	if *recordCorpus {
		writeCorpus(t, "etcd-3.7.3-lease-reads-only.ndjson.gz", buf.Bytes())
	}
}
