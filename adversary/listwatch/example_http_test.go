package listwatch_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
)

// The adversary over HTTP: an unmodified client-go — here a
// SharedIndexInformer on the dynamic client, from a rest.Config whose Host
// is the test server — lists and watches ConfigMaps through it, meeting
// seed 5's legal choices on the wire: ERROR 410 events, closed streams,
// bookmarks, stale lists at "0", a WatchList caught up before its end
// bookmark. A correct client ends with the store's objects; in a test,
// run many seeds and log lw.Report() when your controller breaks.
func ExampleListWatch_Handler() {
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	dir, err := os.MkdirTemp("", "listwatch-http-example")
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

	lw := listwatch.New(5, st, informer.ConfigMaps, "", listwatch.Options{})
	srv := httptest.NewServer(lw.Handler())
	defer srv.Close()

	// Your client, unmodified: a rest.Config pointed at the server.
	dc, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		log.Fatal(err)
	}
	cms := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cms.Watch(ctx, o)
		},
	}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		inf.RunWithContext(ctx)
	}()
	defer func() { cancel(); <-stopped }() // before srv.Close, which waits for the informer's watch to end

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
		same := inf.HasSynced() && len(inf.GetStore().List()) == len(want.KVs)
		for _, kv := range want.KVs {
			obj, ok, _ := inf.GetStore().GetByKey("default/" + kv.Key[len(informer.ConfigMaps.Prefix("default")):])
			u, _ := obj.(*unstructured.Unstructured)
			same = same && ok && u.GetResourceVersion() == fmt.Sprint(kv.ModRevision)
		}
		if same {
			fmt.Println("client-go's informer holds the store's", len(want.KVs), "objects")
			break
		}
		if ctx.Err() != nil {
			log.Fatalf("the informer never caught up\n%s", lw.Report())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// client-go's informer holds the store's 8 objects
}
