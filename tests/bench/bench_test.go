package bench

import (
	"bufio"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeReport is a finished report with made-up figures: watchspec twice as
// good as etcd on every comparison.
func fakeReport() *Report {
	r := newReport(Config{Sizes: QuickSizes, Rounds: 3, VsEtcd: true, Quick: true, Command: "watchspec bench --quick"})
	r.Machine = Machine{CPU: "Test CPU", Cores: 2}
	for _, row := range r.Rows {
		for i := range 3 {
			v := float64(100 + i)
			r.add(row.ID, KindReference, v)
			if !row.def.wsOnly {
				if row.def.lowerBetter {
					r.add(row.ID, KindEtcd, 2*v)
				} else {
					r.add(row.ID, KindEtcd, v/2)
				}
			}
		}
	}
	r.finish()
	return r
}

func TestTableShapeAndRatios(t *testing.T) {
	r := fakeReport()
	lines := strings.Split(strings.TrimSpace(r.Table()), "\n")
	if lines[0] != Header {
		t.Fatalf("header %q, want %q", lines[0], Header)
	}
	labels := MetricLabels(QuickSizes)
	if len(lines) != 2+len(labels) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 2+len(labels), r.Table())
	}
	columns := len(strings.Split(strings.Trim(Header, "|"), "|"))
	for i, l := range lines[2:] {
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != columns || strings.TrimSpace(cells[0]) != labels[i] {
			t.Errorf("row %d: %q", i, l)
		}
		// The goal column states the goal and its verdict, or "—".
		goal := strings.TrimSpace(cells[len(cells)-1])
		row := r.Rows[0]
		for _, rr := range r.Rows {
			if rr.Metric == labels[i] {
				row = rr
			}
		}
		switch {
		case row.Goal == "" && goal != "—":
			t.Errorf("row %q without a goal: goal cell %q", labels[i], goal)
		case row.Goal != "" && !strings.HasPrefix(goal, row.Goal+": "):
			t.Errorf("row %q: goal cell %q, want %q and a verdict", labels[i], goal, row.Goal)
		}
	}
	for _, row := range r.Rows {
		switch {
		case row.def.wsOnly && !math.IsNaN(row.Ratio):
			t.Errorf("%s: ratio %v for a watchspec-only figure", row.ID, row.Ratio)
		case !row.def.wsOnly && math.Abs(row.Ratio-2) > 1e-9:
			t.Errorf("%s: ratio %v, want 2 (watchspec twice as good)", row.ID, row.Ratio)
		}
		if row.WSMedian != 101 {
			t.Errorf("%s: median %v, want 101", row.ID, row.WSMedian)
		}
	}
	if !strings.Contains(r.Targets(), "met") {
		t.Errorf("targets:\n%s", r.Targets())
	}
}

func TestMissingFigures(t *testing.T) {
	r := newReport(Config{Sizes: QuickSizes, Rounds: 1})
	r.fail([]string{"put1"}, KindReference, errors.New("boom"))
	r.finish()
	tab := r.Table()
	if !strings.Contains(tab, "| durable puts/s, 1 writer | failed | not measured | — | ≥ 1.5× etcd: not judged |") {
		t.Errorf("table:\n%s", tab)
	}
	if f := r.Failed(); len(f) != 1 || !strings.Contains(f[0], "boom") {
		t.Errorf("Failed() = %q", f)
	}
	if !strings.Contains(r.Targets(), "needs --vs-etcd") {
		t.Errorf("targets:\n%s", r.Targets())
	}
}

// The limits section states every durable-put figure as a fraction of the
// disk's fdatasync rate, one writer's against its round trip plus an
// fdatasync, and the catch-up and fan-out figures against the bound the
// client's own CPU per event sets on the machine's cores.
func TestLimits(t *testing.T) {
	r := newReport(Config{Sizes: QuickSizes, Rounds: 1, VsEtcd: true})
	r.Machine = Machine{Cores: 2, FsyncPerSec: 1000}
	for _, f := range []struct {
		id       string
		ws, etcd float64
	}{
		{"put1", 500, 250}, {"put16", 4000, 2000},
		{"catchup", 1e6, 500e3}, {"clientcpu", 0.5e-6, 1e-6},
		{"fanout1", 400e3, 200e3}, {"fanout1cpu", 2e-6, 2e-6},
		{"put16cpu", 100e-6, 120e-6}, {"put16srv", 60e-6, 130e-6},
		{"put1rtt", 500e-6, 1000e-6},
	} {
		r.add(f.id, KindReference, f.ws)
		r.add(f.id, KindEtcd, f.etcd)
	}
	r.finish()
	l := r.Limits()
	for _, want := range []string{
		"1,000 fdatasyncs/s",
		"watchspec 500/s = 0.50 of the disk's rate", "etcd 250/s = 0.25 of the disk's rate",
		"watchspec 4,000/s = 4.00 of the disk's rate",
		// catch-up: 2 cores / 0.5 µs = 4M events/s; 1M is 0.25 of it.
		"watchspec: the client spends 0.50 µs per event, so 2 cores deliver at most 4M events/s even to a server that costs nothing; it got 1M = 0.25 of that",
		"etcd: the client spends 1.00 µs per event, so 2 cores deliver at most 2M events/s",
		"live fan-out events/s, 100 watchers — watchspec: the client spends 2.00 µs per event",
		// puts: 2 cores / (100 + 60 µs) = 12.5k puts/s; 4,000 is 0.32 of it.
		"durable puts/s, 16 writers — watchspec: driver 100.0 µs + server 60.0 µs = 160.0 µs per put, so 2 cores put at most 12.5k/s; it got 4,000 = 0.32 of that",
		"etcd: driver 120.0 µs + server 130.0 µs = 250.0 µs per put",
		// one writer: 1 / (500 µs + 1 ms) = 667/s; 500 is 0.75 of it.
		"durable puts/s, 1 writer — watchspec: 500 µs + 1000 µs, so at most 667/s; it got 500 = 0.75 of that; etcd: 1000 µs + 1000 µs, so at most 500/s; it got 250 = 0.50 of that",
	} {
		if !strings.Contains(l, want) {
			t.Errorf("limits lack %q:\n%s", want, l)
		}
	}
	if strings.Contains(l, "durable puts/s, 1 writer — watchspec: driver") {
		t.Errorf("limits state the CPU of a put run whose CPU was not measured:\n%s", l)
	}
	if strings.Contains(l, "fan-out events/s, 1,000 watchers") {
		t.Errorf("limits state a fan-out run that was not measured:\n%s", l)
	}
	if md := r.Markdown(""); !strings.Contains(md, "## The physical limits") {
		t.Errorf("the report has no limits section")
	}
}

func TestSVGIsWellFormed(t *testing.T) {
	empty := newReport(Config{Sizes: FullSizes})
	empty.finish()
	for _, r := range []*Report{fakeReport(), empty, newReport(Config{Sizes: FullSizes})} {
		d := xml.NewDecoder(strings.NewReader(r.SVG()))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, r.SVG())
			}
		}
	}
}

func TestWriteFilesKeepsTheAnalysis(t *testing.T) {
	dir := t.TempDir()
	r := fakeReport()
	if _, _, err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "PERFORMANCE.md")
	b, _ := os.ReadFile(md)
	os.WriteFile(md, append(b, "\n## Analysis\n\nHand-written.\n"...), 0o644)
	if _, _, err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(md)
	if strings.Count(string(b), "Hand-written.") != 1 || strings.Count(string(b), KeepMarker) != 1 {
		t.Errorf("the analysis after the marker was not kept once:\n%s", b)
	}
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{thousands(1234567), "1,234,567"}, {thousands(12), "12"}, {rate(2_345_678), "2.35M"}, {rate(45_678), "45.7k"},
		{rate(1234.4), "1,234"}, {metricDef{unit: "s"}.format(0.0123), "12.3 ms"}, {metricDef{unit: "B"}.format(290.4), "290 B"},
		{metricDef{unit: "cpu"}.format(15.7e-6), "15.7 µs"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if median([]float64{3, 1, 2}) != 2 || median([]float64{4, 1, 3, 2}) != 2.5 || !math.IsNaN(median(nil)) {
		t.Error("median")
	}
	if s := stampOf([]byte(value(1234567, valueSize))); s != 1234567 {
		t.Errorf("stamp %d", s)
	}
	if len(value(1, valueSize)) != valueSize {
		t.Error("value size")
	}
}

// The child protocol, on a reference server in this process.
func TestServeChild(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- ServeChild([]string{"--kind", KindReference, "--dir", t.TempDir()}, inR, outW, io.Discard)
		outW.Close()
	}()
	out := bufio.NewReader(outR)
	line := func() string {
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(l)
	}
	if l := line(); !strings.HasPrefix(l, "ready http://127.0.0.1:") {
		t.Fatalf("first line %q", l)
	}
	for _, c := range []struct{ cmd, want string }{{"mem", "ok "}, {"cpu", "ok "}, {"nope", "err "}, {"profile-stop", "ok"}} {
		io.WriteString(inW, c.cmd+"\n")
		if l := line(); !strings.HasPrefix(l, c.want) {
			t.Errorf("%s: %q, want %q...", c.cmd, l, c.want)
		}
	}
	io.WriteString(inW, "quit\n")
	line()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not stop")
	}
	if code := ServeChild([]string{"--kind", "nope", "--dir", "x"}, strings.NewReader(""), io.Discard, io.Discard); code != 2 {
		t.Errorf("bad kind: exit %d, want 2", code)
	}
}
