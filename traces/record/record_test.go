package record_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

// startReference starts the reference server and a client of it.
func startReference(t testing.TB) *clientv3.Client {
	srv, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// waitCreated reads a watch's created response.
func waitCreated(t *testing.T, w *record.Watch) {
	t.Helper()
	select {
	case r := <-w.C:
		if !r.Created {
			t.Fatalf("watch %d: first response %+v is not the created one", w.ID, r)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch %d: no created response", w.ID)
	}
}

// The trace says which watches share a clientv3 watch stream, as clientv3
// decides it: one stream per Watcher and outgoing metadata of the context,
// whichever recording client created the watch (client/v3/watch.go
// streamKeyFromCtx). Progress requests name the stream they went on.
func TestStreams(t *testing.T) {
	cli := startReference(t)
	other, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Header{System: "watchspec-reference"})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.New(w)
	a, b := rec.Client(cli), rec.Client(cli)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leader := clientv3.WithRequireLeader(ctx)
	tagged := metadata.AppendToOutgoingContext(ctx, "team", "x")
	req := watch.Request{Key: "k"}
	watches := []*record.Watch{
		a.Watch(leader, cli.Watcher, req),                          // stream 0, under a
		b.Watch(clientv3.WithRequireLeader(ctx), cli.Watcher, req), // the same metadata: stream 0, under a
		a.Watch(tagged, cli.Watcher, req),                          // other metadata: stream 1
		a.Watch(ctx, cli.Watcher, req),                             // none: stream 2
		b.Watch(leader, other.Watcher, req),                        // another Watcher: stream 3, under b
	}
	for _, w := range watches {
		waitCreated(t, w)
	}
	if err := b.RequestProgress(leader, cli.Watcher); err != nil {
		t.Fatal(err)
	}
	cancel()
	for _, w := range watches {
		for range w.C {
		}
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Read(&buf, "streams.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Header.Version != 2 {
		t.Errorf("version %d, want 2", tr.Header.Version)
	}
	want := []struct{ client, stream int }{{1, 0}, {1, 0}, {1, 1}, {1, 2}, {2, 3}}
	for i, w := range tr.Watches {
		if w.Stream == nil {
			t.Errorf("watch %d: no stream recorded", w.ID)
			continue
		}
		if got := (struct{ client, stream int }{w.Client, *w.Stream}); got != want[i] {
			t.Errorf("watch %d: client %d stream %d, want client %d stream %d", w.ID, got.client, got.stream, want[i].client, want[i].stream)
		}
	}
	if len(tr.ProgressRequests) != 1 || tr.ProgressRequests[0].Client != 1 || tr.ProgressRequests[0].Stream != 0 {
		t.Errorf("progress requests %+v, want one on client 1's stream 0", tr.ProgressRequests)
	}
}

// A serializable read is sent serializable and recorded as such.
func TestSerializable(t *testing.T) {
	cli := startReference(t)
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Header{System: "watchspec-reference"})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.New(w)
	c := rec.Client(cli)
	ctx := context.Background()
	if _, err := c.Do(ctx, kv.Request{Put: &kv.PutRequest{Key: "k", Value: "v"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.ReadSerializable(ctx, kv.RangeRequest{Key: "k"})
	if err != nil || resp.Range == nil || len(resp.Range.KVs) != 1 {
		t.Fatalf("serializable read: %+v, %v", resp, err)
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Read(&buf, "serializable.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Ops) != 2 || tr.Ops[0].Serializable || !tr.Ops[1].Serializable {
		t.Errorf("ops %+v: want a put, then a serializable read", tr.Ops)
	}
}

// deniedWatch is a Watch service that refuses every stream, as etcd does a
// user without permission: clientv3 ends the watch on its side, with an
// error response.
type deniedWatch struct{ pb.UnimplementedWatchServer }

func (deniedWatch) Watch(s pb.Watch_WatchServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	return rpctypes.ErrGRPCPermissionDenied
}

// A watch that clientv3 ends on its side records clientv3's error as the
// response's error (traces.WatchResponse.Error), not as a server's cancel.
func TestClientError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterWatchServer(g, deniedWatch{})
	go g.Serve(l)
	defer g.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + l.Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Header{System: "a Watch service that denies"})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.New(w)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wa := rec.Client(cli).Watch(ctx, cli.Watcher, watch.Request{Key: "k"})
	for range wa.C {
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Read(&buf, "denied.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	rs := tr.Watches[0].Responses
	if len(rs) != 1 || rs[0].Error != rpctypes.ErrPermissionDenied.Error() {
		t.Errorf("responses %+v, want one with the error %q", rs, rpctypes.ErrPermissionDenied)
	}
}

// Recording a run and reading it back: two watches that share one clientv3
// stream, and a progress request on it.
func Example() {
	dir, err := os.MkdirTemp("", "record-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.Start(dir, "127.0.0.1:0", server.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, Logger: zap.NewNop()})
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	var buf bytes.Buffer
	w, _ := traces.NewWriter(&buf, traces.Header{System: "watchspec-reference"})
	rec := record.New(w)
	c := rec.Client(cli)
	ctx, cancel := context.WithCancel(context.Background())
	// The same metadata on every watch: clientv3 puts them on one stream.
	stream := clientv3.WithRequireLeader(ctx)
	w1 := c.Watch(stream, cli.Watcher, watch.Request{Key: "a"})
	w2 := c.Watch(stream, cli.Watcher, watch.Request{Key: "b"})
	<-w1.C // created
	<-w2.C
	c.Do(ctx, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}})
	fmt.Println("event:", (<-w1.C).Events[0].KV.Key)
	c.RequestProgress(stream, cli.Watcher)
	cancel()
	for range w1.C {
	}
	for range w2.C {
	}
	rec.Flush()

	tr, _ := traces.Read(&buf, "example.ndjson")
	fmt.Println("ops:", len(tr.Ops))
	for _, w := range tr.Watches {
		fmt.Printf("watch %d of client %d on stream %d\n", w.ID, w.Client, *w.Stream)
	}
	fmt.Println("progress requests on stream:", tr.ProgressRequests[0].Stream)
	// Output:
	// event: a
	// ops: 1
	// watch 1 of client 1 on stream 0
	// watch 2 of client 1 on stream 0
	// progress requests on stream: 0
}
