package listwatch_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
)

// An informer over the adversary: whatever legal choices seed 3 makes —
// watches answered 410 or closed, bookmarks added or dropped, lists at "0"
// from old snapshots, WatchLists caught up before their end bookmark — a
// correct informer ends with the store's objects. In a test, run many
// seeds, assert what your informer or controller promises, and log
// lw.Report() when it fails: the seed replays the choices.
func Example() {
	dir, err := os.MkdirTemp("", "listwatch-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	lw := listwatch.New(3, st, informer.ConfigMaps, "", listwatch.Options{})
	inf := informer.NewSharedInformer(lw, informer.Options{Backoff: informer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	go inf.Run(ctx)

	for i := range 40 {
		key := informer.ConfigMaps.Key("default", fmt.Sprintf("cm-%d", i%8))
		if _, err := st.Put(ctx, store.PutRequest{Key: key, Value: fmt.Sprintf("v%d", i)}); err != nil {
			log.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	// Wait until the informer's cache holds what the store holds.
	for {
		want, err := st.Range(ctx, store.RangeRequest{Key: informer.ConfigMaps.Prefix(""), RangeEnd: mvcc.PrefixEnd(informer.ConfigMaps.Prefix(""))})
		if err != nil {
			log.Fatal(err)
		}
		cache := map[string]int64{} // storage key → resourceVersion
		for _, o := range inf.Indexer().List() {
			cache[o.Key] = o.ResourceVersion
		}
		same := inf.HasSynced() && len(cache) == len(want.KVs)
		for _, kv := range want.KVs {
			same = same && cache[kv.Key] == kv.ModRevision
		}
		if same {
			fmt.Println("the informer holds the store's", len(want.KVs), "objects")
			break
		}
		if ctx.Err() != nil {
			log.Fatalf("the informer never caught up\n%s", lw.Report())
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("seed", lw.Seed())
	// Output:
	// the informer holds the store's 8 objects
	// seed 3
}
