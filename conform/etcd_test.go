package conform

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

// recordEtcd runs the workload against a fresh embedded etcd and returns the trace.
func recordEtcd(t *testing.T, members int, cfg Config) (*traces.Trace, Stats) {
	t.Helper()
	cluster, err := etcdtest.Start(etcdtest.Options{Members: members})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg.Endpoints = cluster.Endpoints
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

// Real etcd passes every property: no false positives. SPEC §2–§3.
func TestEtcdOneMember(t *testing.T) {
	tr, stats := recordEtcd(t, 1, Config{Duration: 3 * time.Second, Seed: 1, Clients: 4, Watchers: 4})
	t.Logf("stats %+v", stats)
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
}
