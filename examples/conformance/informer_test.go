package conformance

import (
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform/informertest"
)

// client-go's SharedIndexInformer, set up as a controller would, keeps the
// informer contract. SPEC §5.
func TestInformerConforms(t *testing.T) {
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	informertest.TestInformer(t, informertest.ClientGo{NewInformer: cache.NewSharedIndexInformerWithOptions})
}
