package conform

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/traces"
)

var reusedRuns = flag.Int("conform.reused-runs", 2, "runs of the reused-store tests (the acceptance of issue 11 asks for 5)")

// useStore writes n keys outside any run's prefix and compacts the store
// at its head revision, as any store in use has been (the apiserver
// compacts every 5 minutes). It returns the compaction revision.
func useStore(t *testing.T, endpoints []string, n int) int64 {
	t.Helper()
	cli, err := dial(Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rev int64
	for i := range n {
		resp, err := cli.Put(ctx, fmt.Sprintf("/someone-else/%d", i%7), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	return rev
}

// reusedRuns runs the workload cfg runs times against endpoints, each
// time after other writes and a compaction, and demands that each passes:
// a store that is not fresh is fine (docs/CONFORMANCE.md). Issue 11.
func runReused(t *testing.T, endpoints []string, system string, cfg Config) {
	for run := range *reusedRuns {
		compacted := useStore(t, endpoints, 20+run)
		cfg := cfg
		cfg.Endpoints, cfg.System, cfg.Seed = endpoints, system, cfg.Seed+int64(run)
		cfg.Progress = t.Logf
		var buf bytes.Buffer
		stats, err := Record(context.Background(), cfg, &buf)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		tr, err := traces.Read(bytes.NewReader(buf.Bytes()), fmt.Sprintf("%s-run%d.ndjson", t.Name(), run))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d (seed %d) after a compaction at %d: base revision %d; %+v", run, cfg.Seed, compacted, tr.Header.BaseRevision, stats)
		t.Run(fmt.Sprint("run", run), func(t *testing.T) {
			checkPasses(t, tr, buf.Bytes(), true)
		})
	}
}

// Real etcd, compacted before each run and reused across runs, passes.
// Issue 11; SPEC §2.7, §3.11.
func TestEtcdReusedCompactedStore(t *testing.T) {
	cluster, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	runReused(t, cluster.Endpoints, "etcd "+etcdtest.Version, Config{Duration: 2 * time.Second, Seed: 21, Clients: 3, Watchers: 3})
}

// The reference server, compacted before each run and reused across runs,
// passes. Issue 11; SPEC §2.7, §3.11.
func TestReferenceReusedCompactedStore(t *testing.T) {
	srv, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	runReused(t, []string{srv.Endpoint()}, "watchspec-reference", Config{Duration: 2 * time.Second, Seed: 31, Clients: 3, Watchers: 3})
}
