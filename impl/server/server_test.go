package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClientV3 drives the server with the real etcd client: writes, reads
// at past revisions, transactions, compaction and a watch, checking the
// revisions SPEC §2 prescribes and that every header carries the
// configured IDs (v3rpc/header.go fill).
func TestClientV3(t *testing.T) {
	opts := testOptions()
	opts.ClusterID, opts.MemberID, opts.RaftTerm = 11, 22, 33
	r := startTest(t, opts)
	cli := newClient(t, r.Endpoint())
	ctx := testCtx(t)

	checkHeader := func(what string, h *pb.ResponseHeader, rev int64) {
		t.Helper()
		if h.ClusterId != 11 || h.MemberId != 22 || h.RaftTerm != 33 || h.Revision != rev {
			t.Errorf("%s: header %v, want cluster 11 member 22 term 33 revision %d", what, h, rev)
		}
	}
	// SPEC §2.1: a fresh store is at revision 1; each put adds one.
	g, err := cli.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	checkHeader("get on a fresh store", g.Header, 1)
	for i, k := range []string{"a", "b", "c"} {
		p, err := cli.Put(ctx, k, "v"+k)
		if err != nil {
			t.Fatal(err)
		}
		checkHeader("put "+k, p.Header, int64(i+2))
	}
	p, err := cli.Put(ctx, "a", "v2", clientv3.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	checkHeader("second put", p.Header, 5)
	if p.PrevKv == nil || string(p.PrevKv.Value) != "va" || p.PrevKv.ModRevision != 2 {
		t.Errorf("prev kv %v, want a=va at 2", p.PrevKv)
	}
	// SPEC §2.3: reads at a past revision; count ignores the limit.
	g, err = cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithLimit(2), clientv3.WithRev(4))
	if err != nil {
		t.Fatal(err)
	}
	checkHeader("get at 4", g.Header, 5)
	if len(g.Kvs) != 2 || !g.More || g.Count != 3 || string(g.Kvs[0].Value) != "va" {
		t.Errorf("get at 4 with limit 2: kvs %v more %v count %d", g.Kvs, g.More, g.Count)
	}
	// Sorted descending by key with a limit (txn/range.go sortRangeResults).
	g, err = cli.Get(ctx, "a", clientv3.WithFromKey(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(g.Kvs); got != "c,b" || !g.More {
		t.Errorf("descending get: %s more %v, want c,b more", got, g.More)
	}
	// SPEC §2.5: a transaction.
	tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "v2")).
		Then(clientv3.OpPut("d", "vd"), clientv3.OpGet("d")).Else(clientv3.OpPut("e", "ve")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	checkHeader("txn", tr.Header, 6)
	if !tr.Succeeded || len(tr.Responses) != 2 || tr.Responses[1].GetResponseRange().Count != 1 {
		t.Errorf("txn: %v", tr)
	}
	// SPEC §2.4: compaction; reading below it fails with ErrCompacted.
	if _, err := cli.Compact(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(3)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("get below the compaction: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(4)); err != nil {
		t.Errorf("get at the compact revision: %v", err)
	}
	// SPEC §3.5: a watch from the compact revision replays from there.
	wch := cli.Watch(ctx, "a", clientv3.WithRev(4), clientv3.WithPrevKV())
	wr := <-wch
	if err := wr.Err(); err != nil || len(wr.Events) != 1 {
		t.Fatalf("watch from 4: %v events %v", err, wr.Events)
	}
	if e := wr.Events[0]; e.Kv.ModRevision != 5 || e.PrevKv == nil || string(e.PrevKv.Value) != "va" {
		t.Errorf("watch event %v", e)
	}
	if _, err := cli.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	wr = <-wch
	if len(wr.Events) != 1 || wr.Events[0].Type != mvccpb.DELETE || wr.Events[0].Kv.ModRevision != 7 {
		t.Errorf("delete event %v", wr.Events)
	}
}

func keysOf(kvs []*mvccpb.KeyValue) string {
	var ks []string
	for _, kv := range kvs {
		ks = append(ks, string(kv.Key))
	}
	return strings.Join(ks, ",")
}

// TestMaintenanceAndCluster checks what clientv3's Status and MemberList
// (and so etcdctl endpoint status / member list) need, and that the RPCs
// the server does not implement say so with codes.Unimplemented.
func TestMaintenanceAndCluster(t *testing.T) {
	opts := testOptions()
	r := startTest(t, opts)
	cli := newClient(t, r.Endpoint())
	ctx := testCtx(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	st, err := cli.Status(ctx, r.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != DefaultVersion || st.Leader != DefaultMemberID || st.Header.MemberId != DefaultMemberID ||
		st.Header.Revision != 2 || st.DbSize <= 0 || st.RaftTerm != DefaultRaftTerm || len(st.Errors) != 0 {
		t.Errorf("status %v", st)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 1 || ml.Members[0].ID != DefaultMemberID || len(ml.Members[0].ClientURLs) != 1 ||
		ml.Members[0].ClientURLs[0] != r.Endpoint() || ml.Header.ClusterId != DefaultClusterID {
		t.Errorf("member list %v, want one member with client URL %s", ml, r.Endpoint())
	}
	for name, call := range map[string]func() error{
		"MemberAdd":  func() error { _, err := cli.MemberAdd(ctx, []string{"http://127.0.0.1:1"}); return err },
		"Defragment": func() error { _, err := cli.Defragment(ctx, r.Endpoint()); return err },
		"AuthStatus": func() error { _, err := cli.AuthStatus(ctx); return err },
	} {
		if code := status.Code(err2status(call())); code != codes.Unimplemented {
			t.Errorf("%s: code %v, want Unimplemented", name, code)
		}
	}
}

// err2status unwraps clientv3's EtcdError back to a status.
func err2status(err error) error {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return status.Error(ee.Code(), ee.Error())
	}
	return err
}

// TestRestartSameAddress closes a running server and starts it again on
// the same directory and address, several times, with a client and a watch
// riding through: the data survives, the address is free again when Close
// returns, and clientv3 resumes the watch where it was (SPEC §3.5).
func TestRestartSameAddress(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions()
	r, err := Start(dir, "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	addr := r.Addr()
	cli := newClient(t, r.Endpoint())
	ctx := testCtx(t)
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), "k", clientv3.WithRev(1))
	for i := range 5 {
		if _, err := cli.Put(ctx, "k", fmt.Sprint(i)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		// The listener is closed: the address can be bound at once.
		if r, err = Start(dir, addr, opts); err != nil {
			t.Fatalf("restart %d on %s: %v", i, addr, err)
		}
	}
	defer r.Close()
	if rev := r.Store().Revision(); rev != 6 {
		t.Errorf("revision after restarts %d, want 6", rev)
	}
	var got []string
	for len(got) < 5 {
		wr, ok := <-wch
		if !ok {
			t.Fatalf("watch channel closed after %v", got)
		}
		if err := wr.Err(); err != nil {
			t.Fatalf("watch: %v after %v", err, got)
		}
		for _, e := range wr.Events {
			got = append(got, fmt.Sprintf("%s@%d", e.Kv.Value, e.Kv.ModRevision))
		}
	}
	if want := "0@2 1@3 2@4 3@5 4@6"; strings.Join(got, " ") != want {
		t.Errorf("watch across restarts delivered %v, want %s", got, want)
	}
}

// TestStartErrors checks that Start reports what it cannot do.
func TestStartErrors(t *testing.T) {
	if _, err := Start("", "127.0.0.1:0", Options{}); err == nil {
		t.Error("Start without a data directory succeeded")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if r, err := Start(t.TempDir(), l.Addr().String(), Options{}); err == nil {
		r.Close()
		t.Errorf("Start on a busy address %s succeeded", l.Addr())
	} else if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Start on a busy address: %v", err)
	}
	_ = time.Second
}

// TestStopWithStuckWatcher stops a server while a watch stream's client
// reads nothing, so that the server is stuck sending to it: GracefulStop
// cannot end that stream gracefully, and must still return, by closing the
// connection once Options.StopTimeout has passed. Without the bound, Close
// would never return (the test would hang until its deadline).
func TestStopWithStuckWatcher(t *testing.T) {
	opts := testOptions()
	opts.StopTimeout = 100 * time.Millisecond
	r, err := Start(t.TempDir(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, r.Addr())
	w := openWatch(t, rc)
	w.create(&pb.WatchCreateRequest{Key: []byte("k")})
	if got := shape(w.recv()); got != "id=0 rev=1 created" {
		t.Fatalf("created: %s", got)
	}
	ctx := testCtx(t)
	big := strings.Repeat("x", 1<<20)
	for range 16 { // 16 MiB of events, unread: far beyond gRPC's flow-control windows
		if _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte(big)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", r.Addr())
	if err != nil {
		t.Fatalf("address still in use after Close: %v", err)
	}
	l.Close()
}
