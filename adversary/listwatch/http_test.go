package listwatch_test

import (
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform/informertest"
)

func TestQuickHTTP(t *testing.T) {
	klog.SetLogger(logr.Discard())
	for seed := int64(1); seed <= 4; seed++ {
		rep := runSeed(t, informertest.ClientGo{OverHTTP: true}, seed)
		t.Log(seed, rep.Counts)
	}
}
