package informer_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
)

// A SharedInformer over ConfigMaps in the reference store, with an index
// by the "app" label and two handlers: one logs every change, the other
// counts the objects it sees.
func Example() {
	dir, err := os.MkdirTemp("", "informer-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	ctx := context.Background()

	configMaps := informer.NewConfigMapClient(st)
	web := &informer.ConfigMap{ObjectMeta: informer.ObjectMeta{Namespace: "prod", Name: "web", Labels: map[string]string{"app": "web"}},
		Data: map[string]string{"replicas": "2"}}
	if _, err := configMaps.Create(ctx, web); err != nil {
		panic(err)
	}

	byApp := func(o informer.Object) ([]string, error) {
		cm, err := configMaps.Decode(o)
		if err != nil {
			return nil, err
		}
		return []string{cm.Labels["app"]}, nil
	}
	inf := informer.NewSharedInformer(configMaps.Raw().ListWatch("", informer.StoreOptions{}),
		informer.Options{Indexers: informer.Indexers{"app": byApp, informer.NamespaceIndex: informer.IndexByNamespace}})

	// Handler 1 logs what happens; handler 2 keeps a count. Each has its
	// own goroutine: the log is collected and printed at the end.
	var mu sync.Mutex
	var log []string
	seen := make(chan struct{}, 16)
	say := func(format string, args ...any) {
		mu.Lock()
		log = append(log, fmt.Sprintf(format, args...))
		mu.Unlock()
		seen <- struct{}{}
	}
	if _, err := inf.AddEventHandler(informer.HandlerFuncs{
		AddFunc: func(o informer.Object, initial bool) {
			say("add %s/%s (initial list: %v)", o.Namespace, o.Name, initial)
		},
		UpdateFunc: func(old, new informer.Object) {
			cm, _ := configMaps.Decode(new)
			say("update %s/%s: replicas=%s", new.Namespace, new.Name, cm.Data["replicas"])
		},
		DeleteFunc: func(o informer.Object, _ bool) { say("delete %s/%s", o.Namespace, o.Name) },
	}); err != nil {
		panic(err)
	}
	var count sync.WaitGroup
	live := 0
	count.Add(4) // one call per change below
	counter, err := inf.AddEventHandler(informer.HandlerFuncs{
		AddFunc:    func(informer.Object, bool) { live++; count.Done() },
		UpdateFunc: func(informer.Object, informer.Object) { count.Done() },
		DeleteFunc: func(informer.Object, bool) { live--; count.Done() },
	})
	if err != nil {
		panic(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { inf.Run(runCtx); close(stopped) }()
	<-seen // the initial list
	for !counter.HasSynced() {
		time.Sleep(time.Millisecond) // client-go: cache.WaitForCacheSync
	}

	api := &informer.ConfigMap{ObjectMeta: informer.ObjectMeta{Namespace: "prod", Name: "api", Labels: map[string]string{"app": "api"}}}
	if _, err := configMaps.Create(ctx, api); err != nil {
		panic(err)
	}
	<-seen
	web.Data["replicas"] = "3"
	if _, err := configMaps.Update(ctx, web); err != nil {
		panic(err)
	}
	<-seen
	if err := configMaps.Delete(ctx, "prod", "api"); err != nil {
		panic(err)
	}
	<-seen
	count.Wait()

	webs, _ := inf.Indexer().ByIndex("app", "web")
	prod, _ := inf.Indexer().IndexKeys(informer.NamespaceIndex, "prod")
	stop()
	<-stopped
	for _, l := range log {
		fmt.Println(l)
	}
	fmt.Println("objects labelled app=web:", len(webs))
	fmt.Println("keys in namespace prod:", prod)
	fmt.Println("live objects counted:", live)
	// Output:
	// add prod/web (initial list: true)
	// add prod/api (initial list: false)
	// update prod/web: replicas=3
	// delete prod/api
	// objects labelled app=web: 1
	// keys in namespace prod: [prod/web]
	// live objects counted: 1
}
