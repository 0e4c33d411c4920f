package informertest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform/informertest"
)

// client-go's SharedIndexInformer passes the informer contract. SPEC §5.
func TestInformerClientGo(t *testing.T) {
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	informertest.TestInformer(t, informertest.ClientGo{})
}

const brokenEnv = "INFORMERTEST_BROKEN_CHILD"

// Run as a child only: TestInformer against client-go that never sees a
// DELETED event.
func TestInformerDropsEvents(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skip("the failing case, run by TestInformerFailsOnBrokenInformer")
	}
	klog.SetLogger(logr.Discard())
	informertest.TestInformer(t, informertest.DropsEvents(informertest.ClientGo{}))
}

// TestInformer fails on an informer that drops DELETED events, naming SPEC
// §5.2 InformerConverges. Rapid stops at the first failing scenario, but
// only about one scenario in five shows the drop (a deletion reaches the
// informer by a watch, with no relist after it), so 20 checks let the
// broken informer pass about one child run in 60 (CI saw it); with 200
// that is about 1e-19. 60 child runs failed after 0 to 26 scenarios.
func TestInformerFailsOnBrokenInformer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestInformerDropsEvents$", "-rapid.checks=200", "-rapid.nofailfile")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("TestInformer passed an informer that drops events:\n%s", out)
	}
	if !strings.Contains(string(out), "InformerConverges §5.2") {
		t.Errorf("the failing run does not name InformerConverges §5.2:\n%s", out)
	}
}

// client-go's SharedIndexInformer (resync on every third seed) passes the
// informer contract under the informer adversary. SPEC §4, §5.
func TestInformerUnderAdversaryClientGo(t *testing.T) {
	klog.SetLogger(logr.Discard())
	informertest.TestInformerUnderAdversary(t, informertest.ClientGo{}, 1, 2, 3, 4, 5, 6)
}

const brokenAdvEnv = "INFORMERTEST_BROKEN_ADVERSARY_CHILD"

// brokenSeeds are the adversary's seeds the broken-informer children run.
// Which seeds show the dropped deletion depends on the scheduling inside
// the bubble: of seeds 1..3 only seed 1 did, in each of 10 children (seed
// 3 too in one of the 5 over HTTP), so the negative tests rested on one
// seed; of seeds 1..20, 8 to 11 did in each of 12 children, seeds 1, 6,
// 9 and 10 in all 12 (2026-12-02). Ten seeds keep those four.
var brokenSeeds = []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

// Run as a child only: TestInformerUnderAdversary against client-go that
// never sees a DELETED event.
func TestInformerUnderAdversaryDropsEvents(t *testing.T) {
	if os.Getenv(brokenAdvEnv) == "" {
		t.Skip("the failing case, run by TestInformerUnderAdversaryFailsOnBrokenInformer")
	}
	klog.SetLogger(logr.Discard())
	informertest.TestInformerUnderAdversary(t, informertest.DropsEvents(informertest.ClientGo{}), brokenSeeds...)
}

// TestInformerUnderAdversary fails on an informer that drops DELETED
// events, naming SPEC §5.2 InformerConverges and the adversary's seed.
func TestInformerUnderAdversaryFailsOnBrokenInformer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestInformerUnderAdversaryDropsEvents$")
	cmd.Env = append(os.Environ(), brokenAdvEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("TestInformerUnderAdversary passed an informer that drops events:\n%s", out)
	}
	for _, want := range []string{"InformerConverges §5.2", "under the informer adversary with seed", "listwatch adversary seed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the failing run does not say %q:\n%s", want, out)
		}
	}
}

// client-go's SharedIndexInformer over HTTP — its dynamic client, REST
// client and watch decoder, from a rest.Config pointed at the adversary's
// handler — passes the informer contract under the informer adversary.
// SPEC §4, §5.
func TestInformerUnderAdversaryClientGoOverHTTP(t *testing.T) {
	klog.SetLogger(logr.Discard())
	informertest.TestInformerUnderAdversary(t, informertest.ClientGo{OverHTTP: true}, 1, 2, 3, 4, 5, 6)
}

const brokenHTTPEnv = "INFORMERTEST_BROKEN_HTTP_CHILD"

// Run as a child only: TestInformerUnderAdversary against client-go over
// HTTP whose server never sends a DELETED event.
func TestInformerOverHTTPDropsEvents(t *testing.T) {
	if os.Getenv(brokenHTTPEnv) == "" {
		t.Skip("the failing case, run by TestInformerOverHTTPFailsOnBrokenInformer")
	}
	klog.SetLogger(logr.Discard())
	informertest.TestInformerUnderAdversary(t, informertest.DropsEvents(informertest.ClientGo{OverHTTP: true}), brokenSeeds...)
}

// TestInformerUnderAdversary over HTTP fails when DELETED events are
// lost, naming SPEC §5.2 InformerConverges.
func TestInformerOverHTTPFailsOnBrokenInformer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestInformerOverHTTPDropsEvents$")
	cmd.Env = append(os.Environ(), brokenHTTPEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("TestInformerUnderAdversary over HTTP passed an informer that drops events:\n%s", out)
	}
	if !strings.Contains(string(out), "InformerConverges §5.2") {
		t.Errorf("the failing run does not name InformerConverges §5.2:\n%s", out)
	}
}
