package main

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// SPEC §2.9 Lease operations: `watchspec serve` serves
// etcd's Lease API through the real client — grant, a put with the lease,
// keep-alive, time-to-live with keys — and after a stop and a restart on
// the same data directory the lease and its key are there, with the lease's
// remaining TTL reset to its full TTL; a revoke then deletes the key.
func TestServeLeases(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(ep string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	p := startServe(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
	ep := p.endpoint(t)
	cli := dial(ep)
	g, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "session", "me", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	ka, err := cli.KeepAliveOnce(ctx, g.ID)
	if err != nil || ka.TTL != 600 {
		t.Fatalf("keep-alive: %v %v", ka, err)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGINT: %s", code, p.stderr)
	}

	p = startServe(t, "--data-dir", dir, "--listen", strings.TrimPrefix(ep, "http://"))
	defer p.stop(t)
	cli = dial(p.endpoint(t))
	tl, err := cli.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if tl.GrantedTTL != 600 || tl.TTL < 590 || len(tl.Keys) != 1 || string(tl.Keys[0]) != "session" {
		t.Fatalf("after the restart: %+v, want TTL reset to 600 and key session", tl)
	}
	get, err := cli.Get(ctx, "session")
	if err != nil || len(get.Kvs) != 1 || get.Kvs[0].Lease != int64(g.ID) {
		t.Fatalf("session after the restart: %v %v, want it with lease %x", get, err, g.ID)
	}
	rv, err := cli.Revoke(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if get, _ := cli.Get(ctx, "session"); len(get.Kvs) != 0 || rv.Header.Revision != get.Header.Revision {
		t.Fatalf("after the revoke: %v (revoke at %d)", get.Kvs, rv.Header.Revision)
	}
}
