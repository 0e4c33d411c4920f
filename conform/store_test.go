package conform

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/internal/etcdtest"
)

// compactionInForce learns the compaction a store had before the run —
// none, then each of two compactions — from etcd 3.7.3 and from the
// reference server alike: both cancel a watch from revision 1 with the
// compaction in force (confirmed by reads at it and below it). Issue 11.
func TestCompactionInForce(t *testing.T) {
	test := func(t *testing.T, endpoints []string) {
		cli, err := dial(Config{Endpoints: endpoints})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		put := func() int64 {
			resp, err := cli.Put(ctx, "/other/k", "v")
			if err != nil {
				t.Fatal(err)
			}
			return resp.Header.Revision
		}
		want := int64(0)
		for round := range 3 {
			var head int64
			for range 5 {
				head = put()
			}
			got, err := compactionInForce(ctx, cli, "/run/", head)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("round %d: compaction in force %d, want %d", round, got, want)
			}
			// A watch from revision 1, and any from below it, is cancelled
			// with it.
			if want > 1 {
				if got := watchCompaction(ctx, cli, "/run/"); got != want {
					t.Errorf("round %d: a watch from revision 1 was cancelled with CompactRevision %d, want %d", round, got, want)
				}
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
				resp := <-cli.Watch(wctx, "/run/", clientv3.WithRev(want-1))
				wcancel()
				if resp.CompactRevision != want {
					t.Errorf("round %d: a watch from %d got %+v, want a cancel with CompactRevision %d", round, want-1, resp, want)
				}
			}
			want = head - 2
			if _, err := cli.Compact(ctx, want); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("etcd", func(t *testing.T) {
		cluster, err := etcdtest.Start(etcdtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		test(t, cluster.Endpoints)
	})
	t.Run("reference", func(t *testing.T) {
		srv, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		test(t, []string{srv.Endpoint()})
	})
}
