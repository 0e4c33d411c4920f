package conformtest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/conform/brokenstore"
	"github.com/watchspec/watchspec/conform/conformtest"
	"github.com/watchspec/watchspec/impl/server"
)

// reference starts watchspec's reference server for one test.
func reference(t *testing.T) *server.Running {
	t.Helper()
	srv, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// The reference server passes both workloads: TestStore raises no false
// alarm. SPEC §2–§3.
func TestStoreReferencePasses(t *testing.T) {
	srv := reference(t)
	conformtest.TestStore(t, conformtest.Store{Endpoints: []string{srv.Endpoint()}, SingleServer: true,
		Options: conformtest.Options{Duration: time.Second, Seed: 1}})
}

// brokenEnv makes TestStoreDropsEvents run the failing case itself: the
// child process of TestStoreFailsOnBrokenStore.
const brokenEnv = "CONFORMTEST_BROKEN_CHILD"

// Run as a child only: TestStore against the reference server behind a
// proxy that drops events (brokenstore.DropEvent), without compaction so
// that each skipped event has one name, §3.3 Reliable.
func TestStoreDropsEvents(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skip("the failing case, run by TestStoreFailsOnBrokenStore")
	}
	srv := reference(t)
	p, err := brokenstore.Start(srv.Addr(), brokenstore.DropEvent(&brokenstore.Strikes{Every: 2}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conformtest.TestStore(t, conformtest.Store{Endpoints: []string{p.Endpoint()},
		Options: conformtest.Options{Duration: time.Second, Seed: 21, Workloads: []string{conform.WorkloadFull},
			Config: func(c *conform.Config) { c.CompactEvery = -1 }}})
}

// TestStore fails against a store that drops watch events, naming SPEC §3.3
// Reliable, and saves the trace and the report in the artifact directory.
func TestStoreFailsOnBrokenStore(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreDropsEvents$", "-test.v", "-test.artifacts", "-test.outputdir="+t.TempDir())
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("TestStore passed a store that drops events:\n%s", out)
	}
	for _, want := range []string{"--- FAIL: TestStoreDropsEvents/full", "Reliable §3.3 violated", "trace saved as", "report saved as"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the failing run's output lacks %q:\n%s", want, out)
		}
	}
}
