package informertest_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/watchspec/watchspec/conform/informertest"
)

// A controller's own test: its informer setup, over the harness's
// ListerWatcher, is held to the informer contract; and the same test must
// fail on a deliberately broken informer.
func ExampleTestInformer() {
	var t *testing.T // the *testing.T of your TestXxx
	mySetup := func(lw cache.ListerWatcher, example runtime.Object, opts cache.SharedIndexInformerOptions) cache.SharedIndexInformer {
		opts.Indexers = cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		return cache.NewSharedIndexInformerWithOptions(lw, example, opts)
	}
	informertest.TestInformer(t, informertest.ClientGo{NewInformer: mySetup})
	// In a negative test (see examples/conformance), this must fail naming
	// InformerConverges §5.2:
	//	informertest.TestInformer(t, informertest.DropsEvents(informertest.ClientGo{}))
}
