package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestProgressNotify: a watch created with progress_notify gets periodic
// progress notifications carrying its own WatchId (etcd's sendLoop ticker
// calls RequestProgress(id), v3rpc/watch.go), at the hub's interval.
func TestProgressNotify(t *testing.T) {
	opts := testOptions()
	opts.Store.Watch.ProgressInterval = 20 * time.Millisecond
	r := startTest(t, opts)
	w := openWatch(t, dialRaw(t, r.Addr()))
	w.create(&pb.WatchCreateRequest{Key: []byte("k"), ProgressNotify: true, WatchId: 5})
	if got := shape(w.recv()); got != "id=5 rev=1 created" {
		t.Fatalf("created: %s", got)
	}
	// Waits for the notification; the deadline of the test context bounds it.
	if got := shape(w.recv()); got != "id=5 rev=1" {
		t.Errorf("periodic progress: %s, want id=5 rev=1", got)
	}
}

// TestWatchAfterCloseSend: like etcd (v3rpc/watch.go recvLoop returns nil on
// EOF and the stream lives on), a stream whose client has closed its
// sending side still delivers events.
func TestWatchAfterCloseSend(t *testing.T) {
	r := startTest(t, testOptions())
	rc := dialRaw(t, r.Addr())
	w := openWatch(t, rc)
	w.create(&pb.WatchCreateRequest{Key: []byte("k")})
	w.recv()
	if err := w.ws.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.kv.Put(testCtx(t), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if got := shape(w.recv()); got != `id=0 rev=2 PUT:"k"="v"/c2/m2/v1/l0` {
		t.Errorf("event after CloseSend: %s", got)
	}
}

// TestFragments: with a small MaxRequestBytes, a catch-up response of
// several revisions above MaxRequestBytes+GRPCOverheadBytes is split into
// fragments as etcd's sendFragments splits it (v3rpc/watch.go:581-635), a
// single large event is not split, and clientv3 joins the fragments back
// into one response (SPEC §3.4 Atomic holds at the client).
func TestFragments(t *testing.T) {
	// Write with the default limit, then serve the data with a small one.
	dir := t.TempDir()
	ctx := testCtx(t)
	r, err := Start(dir, "127.0.0.1:0", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, r.Addr())
	val := strings.Repeat("v", 200*1024)
	for i := range 6 {
		if _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprint("f", i)), Value: []byte(val)}); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	opts := testOptions()
	opts.MaxRequestBytes = 1024
	r, err = Start(dir, r.Addr(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc = dialRaw(t, r.Addr())
	w := openWatch(t, rc)
	w.create(&pb.WatchCreateRequest{Key: []byte("f"), RangeEnd: []byte("g"), StartRevision: 2, Fragment: true})
	w.recv() // created
	// 6 events of 200 KiB, limit 513 KiB: two events fit in a fragment, a
	// third crosses the limit.
	var got []string
	for {
		resp := w.recv()
		got = append(got, fmt.Sprintf("%d/%v", len(resp.Events), resp.Fragment))
		if !resp.Fragment {
			break
		}
	}
	if strings.Join(got, " ") != "2/true 2/true 2/false" {
		t.Errorf("fragments (events/fragment): %v, want 2/true 2/true 2/false", got)
	}
	cli := newClient(t, r.Endpoint())
	wr := <-cli.Watch(ctx, "f", clientv3.WithPrefix(), clientv3.WithRev(2), clientv3.WithFragment())
	if len(wr.Events) != 6 {
		t.Errorf("clientv3 got %d events in one response, want 6", len(wr.Events))
	}
}
