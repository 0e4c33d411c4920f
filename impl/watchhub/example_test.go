package watchhub_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// upperKeys is what a server might keep with a batch: a derived form of
// its events (here, their keys in upper case; a gRPC server keeps their wire
// encoding), made once per event, in order, as responses ask for them. A
// batch of recent commits grows, so it extends itself on demand.
type upperKeys struct {
	mu    sync.Mutex
	keys  []string
	calls *int
}

func (u *upperKeys) span(b *watchhub.Batch, lo, hi int) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	for evs := b.Events(hi); len(u.keys) < hi; *u.calls++ {
		u.keys = append(u.keys, strings.ToUpper(evs[len(u.keys)].KV.Key))
	}
	return strings.Join(u.keys[lo:hi], " ")
}

// Two streams watch the same prefix; one commit reaches both. Their
// responses share the commit's events — one Batch — so what a server derives
// from them is made once per event (Batch.Memo), not once per watch.
func ExampleResponse_Shared() {
	dir, _ := os.MkdirTemp("", "watchhub-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	a, _ := s.Watch(ctx, watchhub.Request{Key: "k/", RangeEnd: "k0"})
	b, _ := s.Watch(ctx, watchhub.Request{Key: "k/", RangeEnd: "k0"})
	a.Recv(ctx) // the created responses
	b.Recv(ctx)
	s.Txn(ctx, mvcc.TxnRequest{Success: []mvcc.Op{
		{Put: &mvcc.PutRequest{Key: "k/1", Value: "x"}},
		{Put: &mvcc.PutRequest{Key: "k/2", Value: "y"}},
	}})

	made := 0
	derive := func(r watchhub.Response) string {
		batch, at := r.Shared()
		u := batch.Memo(func() any { return &upperKeys{calls: &made} }).(*upperKeys)
		return u.span(batch, at, at+len(r.Events))
	}
	ra, _ := a.Recv(ctx)
	rb, _ := b.Recv(ctx)
	fmt.Println(derive(ra))
	fmt.Println(derive(rb))
	fmt.Println(made, "events derived for", len(ra.Events)+len(rb.Events), "delivered")
	// Output:
	// K/1 K/2
	// K/1 K/2
	// 2 events derived for 4 delivered
}
