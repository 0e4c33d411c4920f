package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/internal/etcdtest"
)

var (
	endpointRuns     = flag.Int("conform.endpoint-runs", 1, "runs of TestConformEndpointsReused against each store (the acceptance of issue 11 asks for 5)")
	endpointDuration = flag.Duration("conform.endpoint-duration", 2*time.Second, "--duration of each run of TestConformEndpointsReused")
)

// useStore makes the store behind endpoint one in use: writes to keys of
// nobody's run, then a compaction (the apiserver compacts every 5 minutes).
func useStore(t *testing.T, endpoint string, n int) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rev int64
	for i := range n {
		resp, err := cli.Put(ctx, fmt.Sprintf("/someone-else/%d", i%5), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev-3); err != nil {
		t.Fatal(err)
	}
	return rev - 3
}

var recordedRE = regexp.MustCompile(`recorded .*`)

// conformReused runs `watchspec conform --endpoints endpoint` *endpointRuns
// times on one store, compacting it before each run: every run must pass.
func conformReused(t *testing.T, endpoint string) {
	for i := range *endpointRuns {
		compacted := useStore(t, endpoint, 20)
		dir := t.TempDir()
		code, out, errOut := runCLI("conform", "--endpoints", endpoint, "--single-server", "--duration", endpointDuration.String(),
			"--clients", "3", "--watchers", "3", "--seed", fmt.Sprint(100+i), "--report", dir)
		t.Logf("run %d (seed %d), after a compaction at %d: exit %d; %s", i, 100+i, compacted, code, recordedRE.FindString(errOut))
		if code != 0 {
			saved := filepath.Join(t.ArtifactDir(), fmt.Sprintf("run%d-trace.ndjson.gz", i))
			if raw, err := os.ReadFile(filepath.Join(dir, traceFile)); err == nil && os.WriteFile(saved, raw, 0o644) == nil {
				t.Logf("trace saved as %s", saved)
			}
			t.Errorf("run %d: exit %d\n%s", i, code, out)
		}
		if !strings.Contains(errOut, fmt.Sprintf("compaction in force at the start %d", compacted)) {
			t.Errorf("run %d did not learn the compaction at %d: %s", i, compacted, recordedRE.FindString(errOut))
		}
	}
}

// `watchspec conform --endpoints` passes against a real etcd 3.7.3 and
// against `watchspec serve`, each used (other keys written) and compacted
// before every run, and reused across runs: a store that is not fresh is
// fine (docs/CONFORMANCE.md). Issue 11.
func TestConformEndpointsReused(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		cluster, err := etcdtest.Start(etcdtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		conformReused(t, cluster.Endpoints[0])
	})
	t.Run("serve", func(t *testing.T) {
		p := startServe(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0")
		defer p.stop(t)
		conformReused(t, p.endpoint(t))
	})
}

// The flags that shape real use are validated, and each can be turned off:
// the shape before issue 11 (one watch per stream, no bursts, progress
// requests, slow readers or serializable reads) still runs and passes.
func TestConformShapeFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--watches-per-stream", "0"}, {"--slow-readers", "1.5"}, {"--slow-readers", "-0.1"},
		{"--serializable", "2"}, {"--progress-every", "-1s"}, {"--catch-up-watches", "-1"}, {"--leases", "-1"},
		{"--fragment-watches", "1.5"}, {"--fragment-watches", "-1"},
	} {
		code, _, errOut := runCLI(append([]string{"conform", "-q"}, args...)...)
		if code != 2 || !strings.Contains(errOut, args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming the flag", args, code, errOut)
		}
	}
	dir := t.TempDir()
	code, out, errOut := runCLI("conform", "-q", "--duration", "1s", "--clients", "2", "--watchers", "2", "--report", dir,
		"--watches-per-stream", "1", "--catch-up-watches", "0", "--serializable", "0", "--progress-every", "0", "--slow-readers", "0", "--leases", "0", "--fragment-watches", "0.5")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "--watches-per-stream 1 --slow-readers 0 --progress-every 0s --catch-up-watches 0 --serializable 0 --leases 0 --fragment-watches 0.5") {
		t.Errorf("report.txt does not say how to reproduce the shape:\n%s", report)
	}
}
