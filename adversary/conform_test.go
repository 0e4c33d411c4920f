package adversary_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/watchspec/watchspec/adversary"
	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/conform/conformtest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

var (
	seedsFlag    = flag.Int("adversary.seeds", 20, "how many seeds TestConformUnderAdversary runs (env ADVERSARY_SEEDS too)")
	firstFlag    = flag.Int64("adversary.first", 1, "the first seed TestConformUnderAdversary runs")
	searchFlag   = flag.Int("adversary.search", 0, "TestFindCatchingSeeds: search seeds 1..N for those that catch each buggy cache")
	durationFlag = flag.Duration("adversary.duration", 0, "TestEveryKindExercised: how long to run the workload under one adversary (0: skip; make adversary runs 60s)")
)

func seeds() int {
	if s := os.Getenv("ADVERSARY_SEEDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return *seedsFlag
}

// runConform runs the conformance workload against an adversary for d and
// checks its trace; it returns the adversary's report.
func runConform(t *testing.T, seed int64, d time.Duration, clients, watchers int) adversary.Report {
	t.Helper()
	srv, err := adversary.Start(seed, adversary.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := conform.Config{Endpoints: []string{srv.Endpoint()}, Duration: d, Seed: seed,
		Clients: clients, Watchers: watchers, CatchUpWatches: 20, CompactEvery: 100 * time.Millisecond,
		ProgressRequestEvery: 100 * time.Millisecond, FragmentWatches: 0.3,
		System: "watchspec-reference", SystemVersion: fmt.Sprintf("adversary seed %d", seed)}
	var buf bytes.Buffer
	if _, err := conform.Record(context.Background(), cfg, &buf); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	rep := srv.Report()
	tr, err := traces.Read(bytes.NewReader(buf.Bytes()), fmt.Sprintf("adversary-seed-%d.ndjson", seed))
	if err != nil {
		t.Fatalf("seed %d: the trace does not read back: %v", seed, err)
	}
	res, err := linearizability.Check(tr, linearizability.Options{SingleServer: true, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if conformtest.Report(t, res) {
		name := fmt.Sprintf("adversary-seed-%d.ndjson", seed)
		if werr := os.WriteFile(t.ArtifactDir()+"/"+name, buf.Bytes(), 0o644); werr == nil {
			t.Logf("trace kept: %s/%s", t.ArtifactDir(), name)
		}
		t.Errorf("seed %d: a legal adversary's trace failed the check (a checker or adversary bug: the choices are below)\n%s", seed, rep)
		for _, c := range rep.Choices {
			t.Log(c)
		}
	}
	return rep
}

// SPEC §3 (every watch property), §2.7 Linearizable: every choice the
// adversary makes is legal, so the conformance workload's trace passes the
// check under every seed. go test runs 20 seeds; -adversary.seeds=N (or
// ADVERSARY_SEEDS=N) runs N, from -adversary.first.
func TestConformUnderAdversary(t *testing.T) {
	n := seeds()
	if testing.Short() {
		n = min(n, 3)
	}
	total := map[string]int64{}
	start := time.Now()
	passed := 0
	for i := range n {
		seed := *firstFlag + int64(i)
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rep := runConform(t, seed, 700*time.Millisecond, 2, 2)
			for k, c := range rep.Counts {
				total[k] += c
			}
		})
		if ok {
			passed++
		}
	}
	t.Logf("%d of %d seeds (%d..%d) passed in %v; choices made: %v", passed, n, *firstFlag, *firstFlag+int64(n)-1,
		time.Since(start).Round(time.Millisecond), total)
}

// SPEC §3, §2.7: the long run of make adversary — the conformance workload
// for -adversary.duration under the adversary with seed -adversary.first;
// the trace passes the check, and the adversary made every kind of choice.
func TestEveryKindExercised(t *testing.T) {
	if *durationFlag == 0 {
		t.Skip("-adversary.duration=60s runs it (make adversary)")
	}
	seed := *firstFlag
	t.Logf("seed %d (-adversary.first=%d replays it)", seed, seed)
	start := time.Now()
	rep := runConform(t, seed, *durationFlag, 4, 4)
	t.Logf("%v, the check included\n%s", time.Since(start).Round(time.Second), rep)
	for _, k := range adversary.Kinds() {
		if rep.Counts[k.String()] == 0 {
			t.Errorf("the adversary never made a choice of kind %s (%s)", k, k.Section())
		}
	}
}
