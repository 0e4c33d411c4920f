package etcdtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A member of a process cluster killed with SIGKILL comes back on its data
// directory and catches up with what the others committed meanwhile; the
// cluster serves writes while it is down.
func TestKillAndStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 etcd processes")
	}
	c, err := Start(Options{Members: 3, Processes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	leader := c.Leader(ctx)
	if leader < 0 {
		t.Fatal("no leader")
	}
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	// A write proposed before the others elect a new leader may time out
	// (its outcome unknown); it is retried.
	var rev int64
	for i := 0; i < 20; {
		resp, err := cli.Put(ctx, "k", fmt.Sprint(i))
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("put %d with member %d killed: %v", i, leader, err)
			}
			continue
		}
		rev = resp.Header.Revision
		i++
	}
	if err := c.Start(leader); err != nil {
		t.Fatal(err)
	}
	one, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints[leader : leader+1], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	for {
		resp, err := one.Get(ctx, "k", clientv3.WithSerializable())
		if err == nil && resp.Header.Revision >= rev {
			if string(resp.Kvs[0].Value) != "19" {
				t.Fatalf("member %d serves %q at revision %d", leader, resp.Kvs[0].Value, resp.Header.Revision)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("member %d never caught up with revision %d: %v", leader, rev, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Restart((leader + 1) % 3); err != nil {
		t.Fatal(err)
	}
}

// Kill of a member the cluster does not have says so.
func TestKillNoSuchMember(t *testing.T) {
	c := &Cluster{}
	if err := c.Kill(0); err == nil {
		t.Fatal("Kill of member 0 of an empty cluster succeeded")
	}
}
