// Package conformtest checks an etcd-v3 store from its own go test, in one
// call: [TestStore] runs watchspec's conformance workloads (package conform)
// against the store as subtests, checks each recorded trace against
// docs/SPEC.md (package linearizability) and reports every violated
// property with t.Errorf. It is the store-side counterpart of
// testing/fstest.TestFS.
//
//	func TestConformance(t *testing.T) {
//		conformtest.TestStore(t, conformtest.Store{Endpoints: []string{endpoint}})
//	}
//
// The caller makes the store and says how to reach it: [Store.Dial] adds
// TLS, credentials or an in-memory listener's dialer to each client; a
// [Store.Restart] or [Store.Disrupt] hook restarts or kills the store while
// the clients ride through; [Store.Profile] names the allowances the store
// is checked under (docs/SPEC.md §9, for instance "kine").
//
// When a workload fails, the trace as recorded (gzipped ndjson,
// docs/TRACE_FORMAT.md) and the HTML report (package report) are saved in
// the subtest's artifact directory, t.ArtifactDir(), and the test says
// where: run go test with -artifacts to keep them, and `watchspec check
// <trace>` to check the trace again.
//
// What the checker relies on holds here because the workload arranges it:
// nobody else may write to the store while the test runs (revisions are
// store-wide; the workload's keys live under a prefix of their own, so a
// store reused from run to run is fine), and every value written is unique.
package conformtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/report"
	"github.com/watchspec/watchspec/traces"
)

// Store is the store under test, as the caller made it, and how long to
// test it. Only Endpoints is required.
type Store struct {
	// Endpoints are the store's client URLs, as for clientv3.Config.
	Endpoints []string
	// Dial connects one client of a run: it gets the run's client
	// configuration (Endpoints, timeouts, a silent logger) and may add TLS,
	// credentials or DialOptions before calling clientv3.New. Default:
	// clientv3.New.
	Dial func(clientv3.Config) (*clientv3.Client, error)
	// Restart, when set, restarts the store every RestartEvery while the
	// workload runs; clients must ride through it.
	Restart func(context.Context) error
	// Disrupt, when set, is called every RestartEvery instead of Restart:
	// it kills or restarts the store (or a member of it) and says what it
	// did.
	Disrupt func(context.Context) (conform.Disruption, error)
	// Profile names the allowances the store is checked under (docs/SPEC.md
	// §9: "" holds it to etcd's guarantees; see linearizability.Profiles).
	Profile string
	// SingleServer says the endpoints are one server, not a cluster: a
	// watch from now must then start after every revision answered before
	// it was asked (SPEC §1; linearizability.Options.SingleServer).
	SingleServer bool
	// Name and Version name the store in the traces (default "store under test").
	Name, Version string
	// Options tune the runs.
	Options Options
}

// Options tune [TestStore]. The defaults suit go test: two short runs.
type Options struct {
	// Duration of each workload's run (default 2s).
	Duration time.Duration
	// Seed of the workloads' choices (0: from the clock; logged either
	// way, so a failure can be replayed with the same choices).
	Seed int64
	// Workloads to run, each as a subtest named after it (default: both,
	// conform.WorkloadFull as "full" and conform.WorkloadKubernetes as
	// "kubernetes").
	Workloads []string
	// RestartEvery is the period of Restart or Disrupt (default 1s).
	RestartEvery time.Duration
	// Timeout bounds porcupine's search for a linearization (default 1m;
	// a search that runs out fails the test as undecided).
	Timeout time.Duration
	// Config, when set, adjusts each run's configuration last — clients,
	// watchers, compaction (conform.Config's fields).
	Config func(*conform.Config)
}

// maxReported bounds the violations reported one by one per workload; the
// rest are counted by property.
const maxReported = 50

// TestStore runs each workload of s.Options against the store as a subtest
// of t, one after the other (revisions are store-wide: runs must not
// overlap), checks each trace and reports every violation with t.Errorf,
// naming the property and its SPEC section. A store that cannot be used at
// all (unreachable, keys already under the run's prefix) fails the subtest
// with t.Fatal.
func TestStore(t *testing.T, s Store) {
	t.Helper()
	if len(s.Endpoints) == 0 {
		t.Fatal("conformtest.TestStore: Store.Endpoints is empty: give the store's client URLs")
	}
	o := s.Options
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000
	}
	if o.Workloads == nil {
		o.Workloads = []string{conform.WorkloadFull, conform.WorkloadKubernetes}
	}
	if o.RestartEvery <= 0 {
		o.RestartEvery = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if s.Name == "" {
		s.Name = "store under test"
	}
	for i, w := range o.Workloads {
		name := w
		if name == conform.WorkloadFull {
			name = "full"
		}
		t.Run(name, func(t *testing.T) {
			seed := o.Seed + int64(i)
			t.Logf("seed %d (Options.Seed %d replays this run's choices)", seed, o.Seed)
			cfg := conform.Config{Endpoints: s.Endpoints, Dial: s.Dial, Duration: o.Duration, Seed: seed,
				Clients: 4, Watchers: 4, Workload: w, Profile: s.Profile, System: s.Name, SystemVersion: s.Version,
				Restart: s.Restart, Disrupt: s.Disrupt, Progress: t.Logf}
			if s.Restart != nil || s.Disrupt != nil {
				cfg.RestartEvery = o.RestartEvery
			}
			if o.Config != nil {
				o.Config(&cfg)
			}
			var buf bytes.Buffer
			stats, err := conform.Record(t.Context(), cfg, &buf)
			if err != nil {
				t.Fatalf("running the %s workload against %v: %v", name, s.Endpoints, err)
			}
			t.Logf("%d operations (%d of unknown outcome), %d watches, %d events, %d compactions, %d restarts, %d kills",
				stats.Ops, stats.UnknownOps, stats.Watches, stats.Events, stats.Compactions, stats.Restarts, stats.Kills)
			raw := buf.Bytes()
			tr, err := traces.Read(bytes.NewReader(raw), traceName(t))
			if err != nil {
				save(t, raw, nil, nil)
				t.Fatalf("the recorded trace does not read back (a watchspec bug): %v", err)
			}
			res, err := linearizability.Check(tr, linearizability.Options{Timeout: o.Timeout, SingleServer: s.SingleServer})
			if err != nil {
				save(t, raw, nil, nil)
				t.Fatalf("the trace cannot be checked: %v", err)
			}
			if Report(t, res) {
				save(t, raw, res, tr)
			}
		})
	}
}

// Report reports every violation in res with t.Errorf — property, SPEC
// section, where in the trace and what — the first fifty one by one and
// the rest counted by property, and fails t when the verdict is not
// linearizable. It reports whether anything failed. [TestStore] calls it;
// call it yourself for a trace you recorded another way (package
// traces/record).
func Report(t testing.TB, res *linearizability.Result) bool {
	t.Helper()
	err := res.Err()
	var verr *linearizability.ViolationsError
	if !errors.As(err, &verr) {
		t.Logf("every property holds (%s by %s; %d operations, %d watches)", res.Verdict, res.Method, res.Ops, res.Watches)
		return false
	}
	counts := map[spec.Property]int{}
	for i, v := range verr.Violations {
		counts[v.Property]++
		if i < maxReported {
			t.Errorf("%s %s violated: %s: %s", v.Property, v.Property.Section(), v.Where, v.Message)
		}
	}
	if len(verr.Violations) > maxReported {
		var parts []string
		for p, n := range counts {
			parts = append(parts, fmt.Sprintf("%s %s: %d", p, p.Section(), n))
		}
		sort.Strings(parts)
		t.Errorf("%d violations in all (%s)", len(verr.Violations), strings.Join(parts, ", "))
	}
	if res.Verdict != linearizability.Linearizable && len(verr.Violations) == 0 {
		t.Errorf("verdict %s: nothing was shown to hold (raise Options.Timeout)", res.Verdict)
	}
	return true
}

// traceName is the file name of the current subtest's trace.
func traceName(t *testing.T) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".ndjson"
}

// save keeps a failed run where go test users look: the trace as recorded
// (so that the lines the violations name are its lines), gzipped, and the
// HTML report when there is a result, in t.ArtifactDir().
func save(t *testing.T, raw []byte, res *linearizability.Result, tr *traces.Trace) {
	t.Helper()
	dir := t.ArtifactDir()
	path := filepath.Join(dir, traceName(t)+".gz")
	if err := writeGzip(path, raw); err != nil {
		t.Logf("saving the trace: %v", err)
		return
	}
	t.Logf("trace saved as %s (go test -artifacts keeps it; `watchspec check %s` checks it again)", path, path)
	if res == nil {
		return
	}
	html := filepath.Join(dir, strings.TrimSuffix(traceName(t), ".ndjson")+".html")
	f, err := os.Create(html)
	if err == nil {
		err = report.WriteHTML(f, res, tr, nil)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Logf("writing the report: %v", err)
		return
	}
	t.Logf("report saved as %s", html)
}

func writeGzip(path string, raw []byte) error {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw) // a bytes.Buffer does not fail
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, z.Bytes(), 0o644)
}
