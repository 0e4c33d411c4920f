package brokenstore_test

import (
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/conform/brokenstore"
	"github.com/watchspec/watchspec/impl/server"
)

// A proxy that drops watch events, in front of the reference server: a
// watch through it misses the second of two puts' events — it gets the
// first and the third (SPEC §3.3 Reliable is broken).
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "brokenstore-example")
	defer os.RemoveAll(dir)
	srv, err := server.Start(dir, "127.0.0.1:0", server.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	p, err := brokenstore.Start(srv.Addr(), brokenstore.DropEvent(&brokenstore.Strikes{Every: 1}))
	if err != nil {
		panic(err)
	}
	defer p.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "k", clientv3.WithCreatedNotify())
	<-wch // created
	for _, v := range []string{"1", "2", "3"} {
		if _, err := cli.Put(ctx, "k", v); err != nil {
			panic(err)
		}
	}
	var got []string
	for resp := range wch {
		for _, ev := range resp.Events {
			got = append(got, string(ev.Kv.Value))
		}
		if len(got) == 2 {
			break
		}
	}
	fmt.Println(got)
	// Output:
	// [1 3]
}
