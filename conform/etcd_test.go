package conform

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// recordEtcd runs the workload against a fresh embedded etcd and returns the
// trace. With restartMember ≥ 0, that member is restarted every second.
func recordEtcd(t *testing.T, members, restartMember int, cfg Config) (*traces.Trace, Stats) {
	t.Helper()
	cluster, err := etcdtest.Start(etcdtest.Options{Members: members})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg.Endpoints = cluster.Endpoints
	if restartMember >= 0 {
		cfg.Restart = func(context.Context) error { return cluster.Restart(restartMember) }
		cfg.RestartEvery = time.Second
	}
	cfg.System, cfg.SystemVersion = "etcd", etcdtest.Version
	cfg.Progress = t.Logf
	var buf bytes.Buffer
	stats, err := Record(context.Background(), cfg, &buf)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Read(&buf, t.Name()+".ndjson")
	if err != nil {
		t.Fatal(err)
	}
	return tr, stats
}

// checkPasses checks a trace and demands that every property holds.
func checkPasses(t *testing.T, tr *traces.Trace) *linearizability.Result {
	t.Helper()
	res, err := linearizability.Check(tr, linearizability.Options{Progress: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Violations {
		t.Errorf("%s: %s", v.Where, v.Violation)
	}
	if res.Verdict != linearizability.Linearizable {
		t.Errorf("verdict %s", res.Verdict)
	}
	t.Logf("checks %v via %s", res.Checks, res.Method)
	if t.Failed() {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("watchspec-%s-%d.ndjson", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano()))
		if err := traces.WriteFile(path, tr); err != nil {
			t.Logf("saving the trace: %v", err)
		} else {
			t.Logf("trace saved as %s", path)
		}
	}
	return res
}

// Real etcd (1 member) passes every property: no false positives. SPEC §2–§3.
func TestEtcdOneMember(t *testing.T) {
	tr, stats := recordEtcd(t, 1, -1, Config{Duration: 3 * time.Second, Seed: 1, Clients: 4, Watchers: 4})
	t.Logf("stats %+v", stats)
	res := checkPasses(t, tr)
	for _, p := range []spec.Property{spec.Linearizable, spec.Reliable, spec.Bookmarkable, spec.CompactedCancel, spec.PrevKV, spec.WriteRevision} {
		if res.Checks[p] == 0 {
			t.Errorf("the workload never exercised %s", p)
		}
	}
}

// A 3-member etcd cluster with one member restarted every second, clients
// riding through it, passes every property. SPEC §2–§3.
func TestEtcdThreeMembersWithRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member cluster")
	}
	tr, stats := recordEtcd(t, 3, 1, Config{Duration: 3 * time.Second, Seed: 2, Clients: 4, Watchers: 4})
	t.Logf("stats %+v", stats)
	if stats.Restarts == 0 {
		t.Fatal("no member was restarted")
	}
	checkPasses(t, tr)
}
