package conformance

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/conform/brokenstore"
	"github.com/watchspec/watchspec/conform/conformtest"
	"github.com/watchspec/watchspec/conform/informertest"
)

// The negative cases: the same helpers, pointed at a broken store and a
// broken informer, must fail naming the property broken. Each runs in a
// child test process (brokenEnv set), whose failure is the expected outcome.

const brokenEnv = "CONFORMANCE_EXAMPLE_BROKEN"

// TestBrokenStore is run as a child: embedded etcd behind a proxy that drops
// watch events (compaction off, so each skipped event is §3.3's alone).
func TestBrokenStore(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skip("run by TestHelpersFailOnBrokenSubjects")
	}
	p, err := brokenstore.Start(startEtcd(t), brokenstore.DropEvent(&brokenstore.Strikes{Every: 2}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conformtest.TestStore(t, conformtest.Store{Endpoints: []string{p.Endpoint()}, Options: conformtest.Options{
		Workloads: []string{conform.WorkloadFull}, Config: func(c *conform.Config) { c.CompactEvery = -1 }}})
}

// TestBrokenInformer is run as a child: client-go that never sees a DELETED
// event.
func TestBrokenInformer(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skip("run by TestHelpersFailOnBrokenSubjects")
	}
	klog.SetLogger(logr.Discard())
	informertest.TestInformer(t, informertest.DropsEvents(informertest.ClientGo{}))
}

// The store helper fails on a store that drops events, naming SPEC §3.3
// Reliable; the informer helper fails on an informer that drops deletions,
// naming SPEC §5.2 InformerConverges. 200 checks, though rapid stops at the
// first failure: only about one scenario in five shows the informer's drop,
// so 20 checks passed the broken informer about one run in 60.
func TestHelpersFailOnBrokenSubjects(t *testing.T) {
	for test, want := range map[string]string{"TestBrokenStore": "Reliable §3.3", "TestBrokenInformer": "InformerConverges §5.2"} {
		t.Run(test, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-rapid.checks=200", "-rapid.nofailfile")
			cmd.Env = append(os.Environ(), brokenEnv+"=1")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s passed; it must fail:\n%s", test, out)
			}
			if !strings.Contains(string(out), want) {
				t.Errorf("%s failed without naming %s:\n%s", test, want, out)
			}
		})
	}
}
