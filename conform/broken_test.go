package conform

// Deliberately broken servers (issue 5): a gRPC proxy in front of the
// reference server that breaks exactly one guarantee. Each run records the
// conformance workload through the proxy and checks it; the checker must
// name the broken property, and nothing the fault does not explain. The same
// proxy left unmodified must pass, which guards the proxy itself.

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watchspec/watchspec/conform/brokenstore"
	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// TestBrokenServers runs the workload through each broken proxy and demands
// that the checker reports the property broken and nothing else — no mutant
// needs an allowance for a second name — and that the faithful proxies pass.
func TestBrokenServers(t *testing.T) {
	for _, tc := range []struct {
		name string
		// want is the property the mutant breaks; "" for a faithful proxy.
		want spec.Property
		// every: the mutant takes its 1st opportunity, then every every-th.
		every  int64
		mutant func(*brokenstore.Strikes) *brokenstore.Mutant
		// provokes marks a faithful proxy that must have found
		// opportunities, or it controls nothing.
		provokes bool
		// noCompaction runs without compaction. A skipped event that a
		// compaction overtakes before the client reads on is, by SPEC §3
		// "One fault, one name", CompactedCancel rather than Reliable or
		// Bookmarkable — and the trace records when the client read, which
		// a slow consumer delays at will. Without compaction the fault has
		// exactly one name.
		noCompaction bool
		// leases runs lease clients (Config.Leases); restart restarts the
		// server every 700 ms on its data directory, and tells the proxy
		// (Proxy.Restarted).
		leases, restart bool
		seed            int64
	}{
		// The proxy itself: forwarding changes nothing. SPEC §2–§3.
		{name: "faithful", every: 1, mutant: func(*brokenstore.Strikes) *brokenstore.Mutant { return &brokenstore.Mutant{} }, seed: 20},
		// The proxy creating watches with a start revision only once a
		// compaction has overtaken it (silentCompaction's trigger): the
		// backend cancels them with CompactRevision, as it must, and nothing
		// is broken. SPEC §3.11.
		{name: "slow creates", every: 1, mutant: func(st *brokenstore.Strikes) *brokenstore.Mutant {
			return &brokenstore.Mutant{Create: brokenstore.SlowCreates(st)}
		}, provokes: true, seed: 26},
		// SPEC §3.3 Reliable: a dropped event between two delivered ones.
		{name: "drop an event", want: spec.Reliable, every: 2, mutant: brokenstore.DropEvent, noCompaction: true, seed: 21},
		// SPEC §3.2 Unique; the shape of etcd#17247.
		{name: "duplicate an event", want: spec.Unique, every: 3, mutant: brokenstore.DuplicateEvent, seed: 22},
		// SPEC §3.1 Ordered; the shape of etcd#15271.
		{name: "reorder events", want: spec.Ordered, every: 2, mutant: brokenstore.ReorderEvents, seed: 23},
		// SPEC §3.4 Atomic.
		{name: "split a revision", want: spec.Atomic, every: 2, mutant: brokenstore.SplitRevision, seed: 24},
		// SPEC §3.6 Bookmarkable; the shape of etcd#15220.
		{name: "progress before its events", want: spec.Bookmarkable, every: 3, mutant: brokenstore.ProgressBeforeEvents, noCompaction: true, seed: 25},
		// SPEC §3.11 CompactedCancel; the shape of etcd#17529.
		{name: "silent compaction", want: spec.CompactedCancel, every: 1, mutant: brokenstore.SilentCompaction, seed: 26},
		// SPEC §2.7 Linearizable; the shape of etcd#20418. A history that is
		// not linearizable has no committed history to check watches
		// against, so nothing else can be reported.
		{name: "stale read", want: spec.Linearizable, every: 3, mutant: brokenstore.StaleRead, seed: 27},
		// The proxy with lease clients, restarted: forwarding the Lease
		// service changes nothing. SPEC §2.9–§2.11, §3.14, §3.15.
		{name: "faithful with leases", every: 1, mutant: func(*brokenstore.Strikes) *brokenstore.Mutant { return &brokenstore.Mutant{} },
			leases: true, restart: true, seed: 28},
		// SPEC §2.11 LeaseExpiry: a lease expired before its TTL.
		{name: "early expiry", want: spec.LeaseExpiry, every: 1, mutant: brokenstore.EarlyExpiry, leases: true, seed: 29},
		// SPEC §3.15 LeaseAtomic: a revoked lease's keys deleted at two
		// revisions.
		{name: "split a lease's deletion", want: spec.LeaseAtomic, every: 1, mutant: brokenstore.SplitLeaseDeletion, leases: true, seed: 30},
		// SPEC §2.11 LeaseExpiry: leases forgotten across a restart, their
		// keys deleted before the TTL a grant or keep-alive promised.
		{name: "forget leases across a restart", want: spec.LeaseExpiry, every: 1, mutant: brokenstore.ForgetLeases, leases: true, restart: true, seed: 31},
		// SPEC §2.11 LeaseExpiry: leases forgotten across a restart, their
		// keys kept: a keep-alive or time-to-live finds a lease gone before
		// the TTL a grant or keep-alive promised.
		{name: "forget leases across a restart, keep their keys", want: spec.LeaseExpiry, every: 1, mutant: brokenstore.ForgetLeasesKeepKeys, leases: true, restart: true, seed: 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &brokenstore.Strikes{Every: tc.every}
			// No catch-up bursts: they hold compaction back while they
			// last, and the compaction mutants need compactions overtaking
			// watches within these 2 s (the bursts run in the etcd and
			// reference tests).
			cfg := Config{Duration: 2 * time.Second, Clients: 4, Watchers: 4, Seed: tc.seed, CatchUpWatches: -1}
			if tc.noCompaction {
				cfg.CompactEvery = -1
			}
			if tc.leases {
				cfg.Leases = 2
			}
			if tc.restart {
				// A restart under load may take a second: leave the
				// clients time to use the restarted server.
				cfg.Duration = 3 * time.Second
			}
			tr, raw, stats := recordBroken(t, tc.mutant(st), cfg, tc.restart)
			t.Logf("stats %+v; mutant: %d opportunities, %d applied", stats, st.Opportunities.Load(), st.Applied.Load())
			if tc.provokes && st.Opportunities.Load() == 0 {
				t.Fatal("the proxy found no opportunity: the control proves nothing; change the seed or the duration")
			}
			if tc.want != "" && st.Applied.Load() == 0 {
				t.Fatalf("the run gave the mutant no opportunity (%d seen, none applied): it broke nothing, so it proves nothing; change the seed or the duration",
					st.Opportunities.Load())
			}
			res, err := linearizability.Check(tr, linearizability.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := make(map[spec.Property]int)
			for _, v := range res.Violations {
				got[v.Property]++
			}
			t.Logf("verdict %s via %s; violations %v", res.Verdict, res.Method, got)
			ok := true
			if tc.want != "" && got[tc.want] == 0 {
				ok = false
				t.Errorf("%s was broken %d times, but the checker did not report it", tc.want, st.Applied.Load())
			}
			if tc.want != spec.Linearizable && res.Verdict != linearizability.Linearizable {
				ok = false
				t.Errorf("verdict %s: the mutant broke no key-value guarantee", res.Verdict)
			}
			for _, v := range res.Violations {
				if v.Property != tc.want {
					ok = false
					t.Errorf("unexpected %s: %s", v.Where, v.Violation)
				}
			}
			if !ok {
				keepTrace(t, raw)
			}
		})
	}
}

// recordBroken starts the reference server behind a proxy with mutant m,
// runs the workload through the proxy (restarting the server, with
// restart), and returns the trace, as parsed and as recorded.
func recordBroken(t *testing.T, m *brokenstore.Mutant, cfg Config, restart bool) (*traces.Trace, []byte, Stats) {
	t.Helper()
	dir := t.TempDir()
	// A proxied stream may hold a graceful stop for its whole timeout.
	opts := server.Options{StopTimeout: 200 * time.Millisecond}
	srv, err := server.Start(dir, "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Close() }()
	p, err := brokenstore.Start(srv.Addr(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if restart {
		addr := srv.Addr()
		cfg.RestartEvery = 700 * time.Millisecond
		cfg.Restart = func(ctx context.Context) error {
			if err := srv.Close(); err != nil {
				return err
			}
			if srv, err = server.Start(dir, addr, opts); err != nil {
				return err
			}
			return p.Restarted(ctx)
		}
	}
	cfg.Endpoints = []string{p.Endpoint()}
	cfg.System = "watchspec reference server behind a broken proxy (" + t.Name() + ")"
	var buf bytes.Buffer
	stats, err := Record(context.Background(), cfg, &buf)
	if err != nil {
		t.Fatal(err)
	}
	raw := bytes.Clone(buf.Bytes())
	tr, err := traces.Read(&buf, t.Name()+".ndjson")
	if err != nil {
		t.Fatal(err)
	}
	return tr, raw, stats
}

// keepTrace saves the trace of a failed run, as recorded and gzipped, in
// the test's artifact directory (kept after the test with go test
// -artifacts).
func keepTrace(t *testing.T, raw []byte) {
	path := filepath.Join(t.ArtifactDir(), strings.ReplaceAll(t.Name(), "/", "_")+".ndjson.gz")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw)
	err := zw.Close()
	if err == nil {
		err = os.WriteFile(path, z.Bytes(), 0o644)
	}
	if err != nil {
		t.Logf("saving the trace: %v", err)
		return
	}
	t.Logf("trace saved as %s", path)
}
