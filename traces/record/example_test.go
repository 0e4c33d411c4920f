package record_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record"
)

// Record a write, a read and a watch against a store (here watchspec's
// reference server), read the trace back and check it.
func ExampleRecorder() {
	dir, _ := os.MkdirTemp("", "record-example")
	defer os.RemoveAll(dir)
	srv, err := server.Start(dir, "127.0.0.1:0", server.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx := context.Background()

	// The base revision, read before anything is recorded.
	base, err := cli.Get(ctx, "k")
	if err != nil {
		panic(err)
	}
	var out bytes.Buffer
	w, err := traces.NewWriter(&out, traces.Header{System: "reference", UniqueValues: true, BaseRevision: base.Header.Revision})
	if err != nil {
		panic(err)
	}
	rec := record.New(w)
	c := rec.Client(cli)
	wctx, stop := context.WithCancel(ctx)
	wa := c.Watch(wctx, cli.Watcher, watch.Request{Key: "k", StartRevision: base.Header.Revision + 1})
	c.Do(ctx, kv.Request{Put: &kv.PutRequest{Key: "k", Value: "v1"}})
	c.Do(ctx, kv.Request{Range: &kv.RangeRequest{Key: "k"}})
	for resp := range wa.C { // until the put's event arrives
		if len(resp.Events) > 0 {
			break
		}
	}
	stop()
	for range wa.C { // clientv3 closes the channel once the watch ends
	}
	if err := rec.Flush(); err != nil {
		panic(err)
	}

	tr, err := traces.Read(&out, "example.ndjson")
	if err != nil {
		panic(err)
	}
	res, err := linearizability.Check(tr, linearizability.Options{SingleServer: true})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(tr.Ops), "operations,", len(tr.Watches), "watch;", res.Verdict, "; err:", res.Err())
	// Output:
	// 2 operations, 1 watch; linearizable ; err: <nil>
}
