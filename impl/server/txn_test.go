package server

import (
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEmulatedTxnAtomic: transactions the server evaluates itself (here a
// comparison over a key range) and those the store runs interleave
// atomically. Concurrent compare-and-swap increments of one counter, half
// through each path, must never lose an update: the final value is the
// number of increments that succeeded (SPEC §2.5, §2.7).
func TestEmulatedTxnAtomic(t *testing.T) {
	r := startTest(t, testOptions())
	cli := newClient(t, r.Endpoint())
	ctx := testCtx(t)
	if _, err := cli.Put(ctx, "n", "0"); err != nil {
		t.Fatal(err)
	}
	const workers, tries = 6, 40
	var mu sync.Mutex
	succeeded := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tries {
				g, err := cli.Get(ctx, "n")
				if err != nil {
					t.Error(err)
					return
				}
				var n int
				fmt.Sscan(string(g.Kvs[0].Value), &n)
				cmp := clientv3.Compare(clientv3.ModRevision("n"), "=", g.Kvs[0].ModRevision)
				if (w+i)%2 == 0 {
					cmp = cmp.WithRange("n\x00") // the range [n, n\x00) is the key n: emulated
				}
				tr, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut("n", fmt.Sprint(n+1))).Commit()
				if err != nil {
					t.Error(err)
					return
				}
				if tr.Succeeded {
					mu.Lock()
					succeeded++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	g, err := cli.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(g.Kvs[0].Value); got != fmt.Sprint(succeeded) || succeeded == 0 {
		t.Errorf("counter %s after %d successful increments", got, succeeded)
	}
	t.Logf("%d of %d increments succeeded", succeeded, workers*tries)
}
