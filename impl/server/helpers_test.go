package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// testOptions are the options of the servers the tests start: no fsync.
func testOptions() Options {
	var o Options
	o.Store.KV.UnsafeNoFsync = true
	return o
}

// startTest starts a server on a loopback port with a temporary data
// directory, closed when the test ends.
func startTest(t testing.TB, opts Options) *Running {
	t.Helper()
	r, err := Start(t.TempDir(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// newClient returns a clientv3 client of endpoint, closed when the test ends.
func newClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		// Reconnect quickly after a server restart (gRPC's default backoff
		// starts at 1 s).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// rawConn is a plain gRPC connection to addr with etcd's service clients.
type rawConn struct {
	conn  *grpc.ClientConn
	kv    pb.KVClient
	watch pb.WatchClient
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawConn{conn: conn, kv: pb.NewKVClient(conn), watch: pb.NewWatchClient(conn)}
}

// testCtx is a context for one test step: generous, so that it only ends
// a test that hangs.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it returns "" or the deadline passes, then
// fails with cond's last explanation. It asserts no timing: the deadline
// only bounds a test that would otherwise hang.
func eventually(t testing.TB, deadline time.Duration, cond func() string) {
	t.Helper()
	end := time.Now().Add(deadline)
	wait := time.Millisecond
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("still not true after %v: %s", deadline, why)
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// watchStream is a raw watch stream with helpers.
type watchStream struct {
	t  testing.TB
	ws pb.Watch_WatchClient
}

func openWatch(t testing.TB, rc *rawConn) *watchStream {
	t.Helper()
	ws, err := rc.watch.Watch(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return &watchStream{t: t, ws: ws}
}

func (w *watchStream) send(req *pb.WatchRequest) {
	w.t.Helper()
	if err := w.ws.Send(req); err != nil {
		w.t.Fatalf("watch send: %v", err)
	}
}

func (w *watchStream) create(c *pb.WatchCreateRequest) {
	w.t.Helper()
	w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}})
}

func (w *watchStream) cancel(id int64) {
	w.t.Helper()
	w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
}

func (w *watchStream) progress() {
	w.t.Helper()
	w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
}

func (w *watchStream) recv() *pb.WatchResponse {
	w.t.Helper()
	r, err := w.ws.Recv()
	if err != nil {
		w.t.Fatalf("watch recv: %v", err)
	}
	return r
}

// shape describes a watch response without its cluster, member and term.
func shape(r *pb.WatchResponse) string {
	s := fmt.Sprintf("id=%d rev=%d", r.WatchId, r.GetHeader().GetRevision())
	if r.Created {
		s += " created"
	}
	if r.Canceled {
		s += " canceled"
	}
	if r.CompactRevision != 0 {
		s += fmt.Sprintf(" compact=%d", r.CompactRevision)
	}
	if r.CancelReason != "" {
		s += fmt.Sprintf(" reason=%q", r.CancelReason)
	}
	if r.Fragment {
		s += " fragment"
	}
	for _, e := range r.Events {
		s += " " + eventString(e)
	}
	return s
}

func eventString(e *mvccpb.Event) string {
	s := fmt.Sprintf("%s:%s", e.Type, kvString(e.Kv))
	if e.PrevKv != nil {
		s += "(prev " + kvString(e.PrevKv) + ")"
	}
	return s
}

func kvString(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q=%q/c%d/m%d/v%d/l%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
}
