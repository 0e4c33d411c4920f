package conform

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

var (
	etcdRuns     = flag.Int("conform.runs", 1, "consecutive runs of TestEtcdOneMember and TestEtcdThreeMembersWithKills (the acceptance of issue 11 asks for 10)")
	etcdDuration = flag.Duration("conform.duration", 3*time.Second, "duration of each run of the etcd tests")
)

// recordEtcd runs the workload against a fresh embedded etcd and returns the
// trace, read and as recorded. With restartMember ≥ 0, that member is
// restarted every second.
func recordEtcd(t *testing.T, members, restartMember int, cfg Config) (*traces.Trace, []byte, Stats) {
	t.Helper()
	cluster, err := etcdtest.Start(etcdtest.Options{Members: members})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	if restartMember >= 0 {
		cfg.Restart = func(context.Context) error { return cluster.Restart(restartMember) }
		cfg.RestartEvery = time.Second
	}
	return recordOn(t, cluster, cfg)
}

// recordOn runs the workload against cluster and returns the trace, read
// and as recorded.
func recordOn(t *testing.T, cluster *etcdtest.Cluster, cfg Config) (*traces.Trace, []byte, Stats) {
	t.Helper()
	cfg.Endpoints = cluster.Endpoints
	cfg.System, cfg.SystemVersion = "etcd", etcdtest.Version
	cfg.Progress = t.Logf
	var buf bytes.Buffer
	stats, err := Record(context.Background(), cfg, &buf)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := traces.Read(bytes.NewReader(buf.Bytes()), t.Name()+".ndjson")
	if err != nil {
		keepTrace(t, buf.Bytes())
		t.Fatal(err)
	}
	return tr, buf.Bytes(), stats
}

// checkPasses checks a trace and demands that every property holds; a
// trace that fails is saved in the test's artifact directory, as recorded
// (raw), so that the lines the violations name are its lines. single says
// the trace comes from one server, not a cluster (linearizability.Options
// SingleServer: the tighter bound on where a watch from now starts).
func checkPasses(t *testing.T, tr *traces.Trace, raw []byte, single bool) *linearizability.Result {
	t.Helper()
	res, err := linearizability.Check(tr, linearizability.Options{Progress: t.Logf, SingleServer: single})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[spec.Property]int{}
	violations := withoutKnownEtcdRaces(t, tr, res)
	for i, v := range violations {
		counts[v.Property]++
		if i < 20 {
			t.Errorf("%s: %s", v.Where, v.Violation)
		}
	}
	if len(violations) > 0 {
		t.Errorf("%d violations: %v", len(violations), counts)
	}
	if res.Verdict != linearizability.Linearizable {
		t.Errorf("verdict %s", res.Verdict)
	}
	t.Logf("checks %v via %s", res.Checks, res.Method)
	if t.Failed() {
		logEvidence(t, tr, res)
		keepTrace(t, raw)
		if html, err := res.WriteHTML(t.ArtifactDir()); html != "" || err != nil {
			t.Logf("visualisation: %s %v", html, err)
		}
	}
	return res
}

// logStats reports what a run did, for the figures of issue 11.
func logStats(t *testing.T, s Stats) {
	t.Helper()
	t.Logf("%d ops (%d unknown, %d serializable reads); %d watches on %d shared streams (%d in catch-up bursts); %d responses, %d events, %d progress notifications for %d progress requests; %d headers below an earlier one (victim re-sends, failover); %d watches resumed across a disruption; %d compactions (base compaction %d, base revision %d); %d restarts, %d kills; %v",
		s.Ops, s.UnknownOps, s.SerializableReads, s.Watches, s.Streams, s.CatchUpWatches, s.WatchResponses, s.Events,
		s.ProgressNotifies, s.ProgressRequests, s.LoweredHeaders, s.Resumed, s.Compactions, s.BaseCompaction, s.BaseRevision,
		s.Restarts, s.Kills, s.Duration.Round(time.Millisecond))
}

// checkLeasesUsed demands that a run with lease clients granted leases,
// put keys with them and saw one expire, and that the checker judged the
// server's deletions (§3.14, §3.15, §2.11) and the leased puts (§2.10).
func checkLeasesUsed(t *testing.T, res *linearizability.Result, s Stats) {
	t.Helper()
	t.Logf("leases: %d grants, %d leased puts, %d keep-alives, %d revokes, %d expiries seen", s.LeaseGrants, s.LeasedPuts, s.KeepAlives, s.LeaseRevokes, s.LeaseExpiries)
	if s.LeaseGrants == 0 || s.LeasedPuts == 0 || s.LeaseExpiries == 0 {
		t.Errorf("the lease clients never granted a lease, put with one or saw one expire: %+v", s)
	}
	for _, p := range []spec.Property{spec.LeaseAttach, spec.LeaseDeletes, spec.LeaseAtomic, spec.LeaseExpiry} {
		if res.Checks[p] == 0 {
			t.Errorf("the workload never exercised %s", p)
		}
	}
}

// runSeed returns (and prints) the seed of run i of a test whose first run
// has seed first.
func runSeed(t *testing.T, first int64, i int) int64 {
	s := first + int64(i)
	t.Logf("seed %d", s)
	return s
}

// Real etcd (1 member) passes every property with the workload's defaults:
// watches sharing streams, progress requests on them, catch-up bursts,
// slow readers, compaction. No false positives. SPEC §2–§3; issue 11.
func TestEtcdOneMember(t *testing.T) {
	for i := range *etcdRuns {
		t.Run(fmt.Sprint("run", i), func(t *testing.T) {
			tr, raw, stats := recordEtcd(t, 1, -1, Config{Duration: *etcdDuration, Seed: runSeed(t, 1, i), Clients: 4, Watchers: 4, Leases: 2})
			logStats(t, stats)
			res := checkPasses(t, tr, raw, true)
			for _, p := range []spec.Property{spec.Linearizable, spec.Reliable, spec.Bookmarkable, spec.CompactedCancel, spec.PrevKV, spec.WriteRevision} {
				if res.Checks[p] == 0 {
					t.Errorf("the workload never exercised %s", p)
				}
			}
			if stats.Streams == 0 || stats.CatchUpWatches == 0 || stats.ProgressRequests == 0 {
				t.Errorf("the workload never shared a stream, opened catch-up watches or requested progress: %+v", stats)
			}
			checkLeasesUsed(t, res, stats)
		})
	}
}

// A 3-member etcd cluster with one member restarted every second, clients
// riding through it, passes every property. SPEC §2–§3.
func TestEtcdThreeMembersWithRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member cluster")
	}
	tr, raw, stats := recordEtcd(t, 3, 1, Config{Duration: 3 * time.Second, Seed: 2, Clients: 4, Watchers: 4, Leases: 2})
	logStats(t, stats)
	if stats.Restarts == 0 {
		t.Fatal("no member was restarted")
	}
	res := checkPasses(t, tr, raw, false)
	checkLeasesUsed(t, res, stats)
}

// killOrRestart returns a Disrupt for cluster: on odd calls it kills a member
// (SIGKILL; every other time the leader) and starts it again after a
// while, on even calls it restarts one gracefully.
func killOrRestart(cluster *etcdtest.Cluster, seed int64) func(context.Context) (Disruption, error) {
	rng := rand.New(rand.NewPCG(uint64(seed), 77))
	n := 0
	return func(ctx context.Context) (Disruption, error) {
		n++
		kill := n%2 == 1
		text, err := cluster.KillOrRestart(ctx, rng, kill, n%4 == 1, time.Duration(100+rng.IntN(500))*time.Millisecond)
		return Disruption{Kill: kill, Text: text}, err
	}
}

// A 3-member etcd cluster whose members run as processes, killed (SIGKILL)
// and restarted every second while the workload's defaults run: clientv3
// resumes watches on another member, serializable reads are served by
// members behind. Every property holds. SPEC §2–§3; issue 11.
func TestEtcdThreeMembersWithKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member cluster of processes")
	}
	for i := range *etcdRuns {
		t.Run(fmt.Sprint("run", i), func(t *testing.T) {
			cluster, err := etcdtest.Start(etcdtest.Options{Members: 3, Processes: true})
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			seed := runSeed(t, 2, i)
			cfg := Config{Duration: *etcdDuration, Seed: seed, Clients: 4, Watchers: 4, Leases: 2,
				Disrupt: killOrRestart(cluster, seed), RestartEvery: time.Second}
			tr, raw, stats := recordOn(t, cluster, cfg)
			logStats(t, stats)
			if stats.Kills == 0 {
				t.Error("no member was killed")
			}
			res := checkPasses(t, tr, raw, false)
			checkLeasesUsed(t, res, stats)
		})
	}
}
