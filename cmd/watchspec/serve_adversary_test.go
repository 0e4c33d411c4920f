package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// SPEC §3.3 Reliable, §3.4 Atomic, §3.13 Slow watchers: `watchspec serve
// --adversary SEED` serves as the legal adversary — it logs its choices
// with the seed, a watch still receives every event once, in order (a put
// whose connection the adversary closed is sent again), and on
// SIGINT it prints how often it made each kind of choice.
func TestServeAdversary(t *testing.T) {
	p := startServe(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--adversary", "7")
	ep := p.endpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	wc := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if r := <-wc; !r.Created {
		t.Fatalf("first watch response %+v, want the created one", r)
	}
	const n = 200
	for i := range n {
		// The adversary may close the connection under a put (conn-reset):
		// its outcome is then unknown, and it is sent again.
		for {
			_, err := cli.Put(ctx, fmt.Sprintf("k%03d", i), "v")
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
		}
	}
	got := 0
	var last int64
	for got < n {
		r, ok := <-wc
		if !ok || r.Err() != nil {
			t.Fatalf("the watch ended after %d events: %v", got, r.Err())
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision <= last {
				t.Fatalf("event at revision %d after %d: delivered twice or out of order", ev.Kv.ModRevision, last)
			}
			last = ev.Kv.ModRevision
			if got > 0 && string(ev.Kv.Key) == fmt.Sprintf("k%03d", got-1) {
				continue // a put sent again after its answer was lost
			}
			if want := fmt.Sprintf("k%03d", got); string(ev.Kv.Key) != want {
				t.Fatalf("event %d is on %s, want %s", got, ev.Kv.Key, want)
			}
			got++
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0: %s", code, p.stderr)
	}
	if log := p.stderr.String(); !strings.Contains(log, "adversary config") || !strings.Contains(log, "seed=7") {
		t.Errorf("no adversary choice logged with its seed:\n%s", log)
	}
	if out := p.stdout.String(); !strings.Contains(out, "adversary seed 7: choices made") || !strings.Contains(out, "hold-past-compaction") {
		t.Errorf("no table of choices on stdout:\n%s", out)
	}
}
