package kuberecord_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform/informertest"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	harness "github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record/kuberecord"
)

// A controller's informer, recorded while it runs, then checked. The store
// here is watchspec's reference store behind client-go's ListWatch, its
// writes recorded by the test recorder; against a cluster, lw is your
// cache.ListWatch and the writes are your writers', recorded (see the
// package doc).
func ExampleRecorder() {
	klog.SetLogger(logr.Discard())
	dir, _ := os.MkdirTemp("", "kuberecord")
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	prefix := configMaps.Prefix("")
	writes := harness.NewRecorder(st, prefix)
	ctx := context.Background()

	// The recorder, and the informer over the recorded ListerWatcher.
	rec, err := kuberecord.New(kuberecord.Options{Prefix: prefix, Object: configMapObject, Revision: st.Revision})
	if err != nil {
		fmt.Println(err)
		return
	}
	var inf cache.SharedIndexInformer
	informertest.ClientGo{NewInformer: func(lw cache.ListerWatcher, example runtime.Object, opts cache.SharedIndexInformerOptions) cache.SharedIndexInformer {
		inf = cache.NewSharedIndexInformerWithOptions(rec.NewListerWatcher(lw), example, opts)
		return inf
	}}.New(informer.NewStoreListWatch(st, informer.ConfigMaps, "", informer.StoreOptions{}), informertest.Config{})

	// The controller's handler, recorded: it notes the last resourceVersion
	// it saw, so that the run can wait until it caught up.
	var seen atomic.Int64
	note := func(obj any) {
		if m, err := meta.Accessor(obj); err == nil {
			if rv, ok := k8s.ParseRV(m.GetResourceVersion()); ok {
				seen.Store(rv)
			}
		}
	}
	rec.AddEventHandler(inf, cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, o any) { note(o) }, DeleteFunc: note})

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); rec.Run(rctx, inf) }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) // the writes then reach it as watch events
	writes.Put(ctx, configMaps.Key("ns", "a"), "v1")
	writes.Put(ctx, configMaps.Key("ns", "b"), "v2")
	writes.Put(ctx, configMaps.Key("ns", "a"), "v3")
	writes.Delete(ctx, configMaps.Key("ns", "b"))
	for deadline := time.Now().Add(time.Minute); seen.Load() < st.Revision(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // wait until the controller caught up
			fmt.Println("the controller did not catch up with the writes")
			break
		}
	}
	rec.Quiesced()
	cancel()
	<-done
	rec.Finish(inf)

	// The trace: the informer's records with every write of the store.
	tr, err := rec.Trace(traces.Header{System: "client-go", UniqueValues: true, BaseCompactRevision: &neverCompacted}, writes.Trace("", "").Ops)
	if err != nil {
		fmt.Println(err)
		return
	}
	path := filepath.Join(dir, "informer.ndjson") // `watchspec check` reads it too
	if err := traces.WriteFile(path, tr); err != nil {
		fmt.Println(err)
		return
	}
	back, err := traces.ReadFile(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := linearizability.Check(back, linearizability.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("violations:", res.Err())
	// Output:
	// violations: <nil>
}
