package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SPEC §3.5 Resumable, §1: an adversary whose every reset closes the
// client's whole connection (ChoiceConnReset). clientv3 dials again (the
// server accepts a new connection), resumes its watch after what it
// delivered, and the watch receives every put exactly once, in order; the
// connection's other calls go on over the new connection.
func TestAdversaryConnReset(t *testing.T) {
	a := NewAdversary(1)
	// Half the responses after the stream's first two (its created
	// response and one more) end the connection: the watch makes progress
	// between resets, and the puts get through.
	a.p.pReset, a.p.minResponsesBeforeReset, a.p.pConnReset = 0.5, 2, 1
	a.p.pSplit, a.p.pJoin, a.p.pHold, a.p.pStall = 0, 0, 0, 0
	opts := testOptions()
	opts.Adversary = a
	r := startTest(t, opts)
	cli := newClient(t, r.Endpoint())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	const n = 10
	wch := cli.Watch(ctx, "/k", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("first response %+v, want the created notification", resp)
	}
	var want []string
	for i := range n {
		k := fmt.Sprintf("/k%d", i)
		want = append(want, k)
		// A put whose connection closes under it has an unknown outcome;
		// clientv3 does not retry a put, so retry it here until answered.
		for {
			_, err := cli.Put(ctx, k, "v")
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("put %s: %v", k, err)
			}
		}
	}
	// A put retried after its answer was lost may have happened twice (at
	// two revisions): the watch then shows its key twice in a row.
	var got []string
	var last int64
	for len(got) < n {
		resp, ok := <-wch
		if !ok || resp.Err() != nil {
			t.Fatalf("the watch ended (%v) after %v; want every put, resumed across the connection resets", resp.Err(), got)
		}
		for _, e := range resp.Events {
			if e.Kv.ModRevision <= last {
				t.Fatalf("event at revision %d after %d: delivered twice or out of order (got %v)", e.Kv.ModRevision, last, got)
			}
			last = e.Kv.ModRevision
			if k := string(e.Kv.Key); len(got) == 0 || got[len(got)-1] != k {
				got = append(got, k)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the watch delivered %v, want %v", got, want)
	}
	resets := a.Report().Counts[ChoiceConnReset.String()]
	if resets == 0 {
		t.Fatalf("no connection reset was chosen: %s", a.Report())
	}
	if acc := r.srv.advAccepted.Load(); acc < 2 {
		t.Errorf("%d connection resets chosen but the server accepted %d connection(s): the connection was not closed", resets, acc)
	}
	t.Logf("%d connection resets, %d connections accepted", resets, r.srv.advAccepted.Load())
}
