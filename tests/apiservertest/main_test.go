package apiservertest

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// TestMain silences klog once, before any apiserver starts: klog.SetLogger
// is not safe while a server's goroutines (which outlive Close a little)
// log.
func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
