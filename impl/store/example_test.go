package store_test

import (
	"context"
	"fmt"
	"os"

	"github.com/watchspec/watchspec/impl/store"
)

// A write, a read at an older revision, and a watch that replays history
// from revision 2 and then goes on live.
func Example() {
	dir, _ := os.MkdirTemp("", "watchspec-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	s.Put(ctx, store.PutRequest{Key: "a", Value: "1"}) // revision 2
	s.Put(ctx, store.PutRequest{Key: "a", Value: "2"}) // revision 3
	old, _ := s.Range(ctx, store.RangeRequest{Key: "a", Revision: 2})
	fmt.Printf("a at revision 2: %s (header %d)\n", old.KVs[0].Value, old.Revision)

	w, _ := s.Watch(ctx, store.WatchRequest{Key: "a", StartRevision: 2, PrevKV: true})
	created, _ := w.Recv(ctx)
	fmt.Printf("created at %d\n", created.Revision)
	replay, _ := w.Recv(ctx) // revisions 2 and 3, from history
	for _, e := range replay.Events {
		fmt.Printf("%s %s=%s at %d, prev %v\n", e.Type, e.KV.Key, e.KV.Value, e.KV.ModRevision, e.PrevKV != nil)
	}
	s.Delete(ctx, store.DeleteRequest{Key: "a"}) // revision 4
	live, _ := w.Recv(ctx)
	fmt.Printf("%s %s at %d, prev %s\n", live.Events[0].Type, live.Events[0].KV.Key, live.Events[0].KV.ModRevision, live.Events[0].PrevKV.Value)
	// Output:
	// a at revision 2: 1 (header 3)
	// created at 3
	// PUT a=1 at 2, prev false
	// PUT a=2 at 3, prev true
	// DELETE a at 4, prev 2
}
