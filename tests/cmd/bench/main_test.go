package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/tests/bench"
)

// TestMain lets the test binary serve as the server child of the bench,
// which re-executes its own program with the hidden bench-server
// subcommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "bench-server" {
		os.Exit(runBenchServer(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e strings.Builder
	code = runBench(args, &o, &e)
	return code, o.String(), e.String()
}

// `watchspec bench --quick --vs-etcd` runs every workload against both
// servers and prints the table: the exact columns and one row per metric.
// The figures are not checked: timing belongs to the benchmark.
func TestBenchQuickVsEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers and runs every workload: skipped with -short")
	}
	if raceEnabled {
		t.Skip("too slow under the race detector")
	}
	out := t.TempDir()
	code, stdout, stderr := runCLI("--quick", "--vs-etcd", "-q", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	checkTable(t, "stdout", stdout)
	md, err := os.ReadFile(filepath.Join(out, "PERFORMANCE.md"))
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, "PERFORMANCE.md", string(md))
	for _, want := range []string{"| CPU |", "| Go |", "| etcd |", "watchspec bench --quick --vs-etcd", "## Targets", "performance.svg"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("PERFORMANCE.md does not mention %q", want)
		}
	}
	svg, err := os.ReadFile(filepath.Join(out, "performance.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "</svg>") {
		t.Errorf("performance.svg is not an SVG:\n%.200s", svg)
	}
}

// checkTable finds the table in text and checks its shape: the header,
// then one row per metric with a cell per column, a figure for each system
// it compares (the ratio may be "—" when a figure is not positive), and its
// goal.
func checkTable(t *testing.T, where, text string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	start := -1
	for i, l := range lines {
		if l == bench.Header {
			start = i
			break
		}
	}
	if start < 0 || start+1 >= len(lines) || !strings.HasPrefix(lines[start+1], "|---") {
		t.Fatalf("%s: no table headed %q:\n%s", where, bench.Header, text)
	}
	rows := map[string][]string{}
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if want := len(strings.Split(strings.Trim(bench.Header, "|"), "|")); len(cells) != want {
			t.Errorf("%s: row with %d cells, want %d: %s", where, len(cells), want, l)
			continue
		}
		rows[cells[0]] = cells
	}
	labels := bench.MetricLabels(bench.QuickSizes)
	if len(rows) != len(labels) {
		t.Errorf("%s: %d rows, want %d", where, len(rows), len(labels))
	}
	for _, label := range labels {
		cells, ok := rows[label]
		if !ok {
			t.Errorf("%s: no row %q", where, label)
			continue
		}
		checker := strings.HasPrefix(label, "checker:")
		for i, c := range cells[1:4] { // watchspec, etcd, ratio
			switch {
			case c == "" || c == "failed" || c == "not measured":
				t.Errorf("%s: row %q, column %d: %q", where, label, i+2, c)
			case checker && i > 0 && c != "—":
				t.Errorf("%s: checker row %q has an etcd figure or ratio %q", where, label, c)
			case !checker && i < 2 && c == "—":
				t.Errorf("%s: row %q lacks a figure in column %d", where, label, i+2)
			}
		}
	}
}
