package informertest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/conform/informertest"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
)

// A controller's own test under the informer adversary: seeds 1 to 20,
// each a workload over the adversary of that seed, every run held to the
// informer contract.
func ExampleTestInformerUnderAdversary() {
	var t *testing.T // the *testing.T of your TestXxx
	informertest.TestInformerUnderAdversary(t, informertest.ClientGo{})
	// Other seeds: informertest.TestInformerUnderAdversary(t, subject, 101, 102)
}

// client-go's SharedIndexInformer over the informer adversary with seed 4,
// through ClientGoListerWatcher: whatever legal choices it makes, the
// informer's cache ends equal to the store.
func ExampleClientGoListerWatcher() {
	klog.SetLogger(logr.Discard()) // client-go logs every watch the adversary ends
	dir, err := os.MkdirTemp("", "clientgo-adversary")
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

	lw := listwatch.New(4, st, informer.ConfigMaps, "", listwatch.Options{})
	inf := cache.NewSharedIndexInformer(informertest.ClientGoListerWatcher(lw), &unstructured.Unstructured{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)

	for i := range 20 {
		key := informer.ConfigMaps.Key("default", fmt.Sprintf("cm-%d", i%5))
		if _, err := st.Put(ctx, store.PutRequest{Key: key, Value: fmt.Sprintf("v%d", i)}); err != nil {
			log.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	for {
		want := map[string]string{} // namespace/name → resourceVersion
		r, err := st.Range(ctx, store.RangeRequest{Key: informer.ConfigMaps.Prefix(""), RangeEnd: mvcc.PrefixEnd(informer.ConfigMaps.Prefix(""))})
		if err != nil {
			log.Fatal(err)
		}
		for _, kv := range r.KVs {
			want["default/"+kv.Key[len(informer.ConfigMaps.Prefix("default")):]] = fmt.Sprint(kv.ModRevision)
		}
		same := inf.HasSynced() && len(inf.GetStore().ListKeys()) == len(want)
		for k, rv := range want {
			o, ok, _ := inf.GetStore().GetByKey(k)
			same = same && ok && o.(*unstructured.Unstructured).GetResourceVersion() == rv
		}
		if same {
			fmt.Println("client-go's cache holds the store's", len(want), "objects")
			break
		}
		if ctx.Err() != nil {
			log.Fatalf("client-go never caught up\n%s", lw.Report())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: client-go's cache holds the store's 5 objects
}
