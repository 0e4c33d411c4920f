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

// A proxy that forgets the leases when its server restarts, in front of
// the reference server: a key put with a 60 s lease is gone right after a
// restart, which etcd would keep for 60 s more (SPEC §2.11 LeaseExpiry is
// broken). The restart function tells the proxy with Restarted.
func ExampleForgetLeases() {
	dir, _ := os.MkdirTemp("", "brokenstore-example")
	defer os.RemoveAll(dir)
	srv, err := server.Start(dir, "127.0.0.1:0", server.Options{})
	if err != nil {
		panic(err)
	}
	defer func() { srv.Close() }()
	p, err := brokenstore.Start(srv.Addr(), brokenstore.ForgetLeases(&brokenstore.Strikes{Every: 1}))
	if err != nil {
		panic(err)
	}
	defer p.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		panic(err)
	}
	if _, err := cli.Put(ctx, "k", "v", clientv3.WithLease(g.ID)); err != nil {
		panic(err)
	}
	restart := func() error {
		addr := srv.Addr()
		if err := srv.Close(); err != nil {
			return err
		}
		if srv, err = server.Start(dir, addr, server.Options{}); err != nil {
			return err
		}
		return p.Restarted(ctx)
	}
	if err := restart(); err != nil {
		panic(err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		panic(err)
	}
	fmt.Println("keys after the restart:", resp.Count)
	// Output:
	// keys after the restart: 0
}
