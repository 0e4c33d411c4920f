package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
)

// Header is the header row of the table: the columns, exactly.
const Header = "| metric | watchspec | etcd | ratio | goal |"

// metricDef is one row of the table.
type metricDef struct {
	id          string
	label       string
	unit        string // how values are printed: see format
	lowerBetter bool
	wsOnly      bool    // no etcd comparison
	hidden      bool    // not a row of the table: a figure for the limits section
	goalRatio   float64 // target: ratio ≥ goalRatio (0: none)
	goalMax     float64 // target: watchspec's value ≤ goalMax (0: none)
	goalMin     float64 // target: watchspec's value ≥ goalMin (0: none)
	goal        string  // the target as the report states it
}

func metricDefs(s Sizes) []metricDef {
	n := func(v int) string { return thousands(float64(v)) }
	poll := fmt.Sprintf("%s clients, every %v, %d writes/s", n(s.PollClients), s.PollInterval, s.PollWriteRate)
	return []metricDef{
		{id: "put1", label: "durable puts/s, 1 writer", unit: "/s", goalRatio: 1.5, goal: "≥ 1.5× etcd"},
		{id: "put16", label: "durable puts/s, 16 writers", unit: "/s", goalRatio: 2, goal: "≥ 2× etcd"},
		{id: "overload", label: fmt.Sprintf("acknowledged writes/s under read overload (%s clients polling %d keys every %v, %d writes/s offered)",
			n(s.OverloadClients), s.OverloadKeys, s.OverloadInterval, s.OverloadWriteRate), unit: "/s", goalRatio: 1, goal: "≥ 1× etcd"},
		{id: "startup", label: "start-up: process start to the first acknowledged put (fresh data directory)", unit: "s", lowerBetter: true},
		{id: "fanout1", label: fmt.Sprintf("live fan-out events/s, %s watchers", n(s.FanoutWatchers[0])), unit: "/s", goalRatio: 2, goal: "≥ 2× etcd"},
		{id: "fanout2", label: fmt.Sprintf("live fan-out events/s, %s watchers", n(s.FanoutWatchers[1])), unit: "/s", goalRatio: 2, goal: "≥ 2× etcd"},
		{id: "catchup", label: fmt.Sprintf("catch-up events/s, %s revisions to %s watchers from revision 1", n(s.CatchupRevisions), n(s.CatchupWatchers)),
			unit: "/s", goalRatio: 2, goal: "≥ 2× etcd"},
		{id: "clientcpu", label: "catch-up: the client's CPU per delivered event (clientv3 connections of the driver)", unit: "cpu", lowerBetter: true},
		{id: "latency50", label: fmt.Sprintf("put→delivery latency p50, %s watchers", n(s.LatencyWatchers)), unit: "s", lowerBetter: true},
		{id: "latency99", label: fmt.Sprintf("put→delivery latency p99, %s watchers", n(s.LatencyWatchers)), unit: "s", lowerBetter: true,
			goalRatio: 1, goal: "≥ 1× etcd"},
		{id: "memory", label: fmt.Sprintf("server heap per idle watcher, %s watchers", n(s.MemWatchers)), unit: "B", lowerBetter: true,
			goalMax: 1024, goal: "≤ 1 KiB"},
		{id: "pollcpu", label: "polling: server CPU per delivered change (" + poll + ")", unit: "cpu", lowerBetter: true},
		{id: "pollbytes", label: "polling: bytes sent per delivered change", unit: "B", lowerBetter: true},
		{id: "watchcpu", label: "watching: server CPU per delivered change (same clients and writes)", unit: "cpu", lowerBetter: true},
		{id: "watchbytes", label: "watching: bytes sent per delivered change", unit: "B", lowerBetter: true},
		{id: "check", label: fmt.Sprintf("checker: linearizability.Check, %s-op history", n(s.CheckOps)), unit: "s", lowerBetter: true, wsOnly: true,
			goalMax: 10 * float64(s.CheckOps) / 100_000, goal: fmt.Sprintf("< %.3g s", 10*float64(s.CheckOps)/100_000)},
		{id: "validate", label: fmt.Sprintf("checker: watch validation events/s, %s events", n(s.ValidateEvents)), unit: "/s", wsOnly: true,
			goalMin: 200_000, goal: fmt.Sprintf("%s events in < %.3g s", n(s.ValidateEvents), float64(s.ValidateEvents)/200_000)},
		{id: "informer", label: fmt.Sprintf("checker: informer events/s, Reflector → DeltaFIFO → Indexer → handler, %s changes", n(s.InformerEvents)),
			unit: "/s", wsOnly: true},
		// For the limits section: the driver's CPU per event in the fan-out
		// runs (the writers' included).
		{id: "fanout1cpu", label: "fan-out 1: the client's CPU per delivered event", unit: "cpu", lowerBetter: true, hidden: true},
		{id: "fanout2cpu", label: "fan-out 2: the client's CPU per delivered event", unit: "cpu", lowerBetter: true, hidden: true},
		// The CPU per acknowledged put of the driver (clientv3) and of the
		// server (getrusage of its process: the kernel's work in its
		// fdatasyncs and its sockets included).
		{id: "put1cpu", label: "durable puts, 1 writer: the driver's CPU per put", unit: "cpu", lowerBetter: true, hidden: true},
		{id: "put1srv", label: "durable puts, 1 writer: the server's CPU per put", unit: "cpu", lowerBetter: true, hidden: true},
		// The loopback round trip of one client's serializable Get: with
		// the disk's fdatasync, the least a single writer's put waits for.
		{id: "put1rtt", label: "durable puts, 1 writer: one round trip of a serializable Get", unit: "s", lowerBetter: true, hidden: true},
		{id: "put16cpu", label: "durable puts, 16 writers: the driver's CPU per put", unit: "cpu", lowerBetter: true, hidden: true},
		{id: "put16srv", label: "durable puts, 16 writers: the server's CPU per put", unit: "cpu", lowerBetter: true, hidden: true},
	}
}

// format prints a value of the metric.
func (d metricDef) format(v float64) string {
	switch d.unit {
	case "/s":
		return rate(v)
	case "s":
		switch {
		case v >= 1:
			return fmt.Sprintf("%.2f s", v)
		case v >= 0.001:
			return fmt.Sprintf("%.3g ms", v*1e3)
		}
		return fmt.Sprintf("%.3g µs", v*1e6)
	case "cpu":
		return fmt.Sprintf("%.3g µs", v*1e6)
	case "B":
		if v >= 10_000 {
			return fmt.Sprintf("%.1f KiB", v/1024)
		}
		return fmt.Sprintf("%.0f B", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// rate prints a per-second figure with three significant digits.
func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return thousands(math.Round(v))
}

// thousands prints an integer with comma separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Row is one figure of the report.
type Row struct {
	ID, Metric string
	// WS and Etcd are the per-round values; WSMedian and EtcdMedian their
	// medians (NaN when not measured).
	WS, Etcd             []float64
	WSMedian, EtcdMedian float64
	// Ratio is above 1 where watchspec does better (NaN when not measured).
	Ratio float64
	// Goal states the target, if any; Met says whether it was met (nil: not
	// judged).
	Goal string
	Met  *bool
	// Errors of the rounds that failed, by system.
	WSErr, EtcdErr []string

	def metricDef
}

// Machine describes where the run took place.
type Machine struct {
	CPU                   string
	Cores                 int
	Memory                string
	GoVersion             string
	EtcdVersion           string
	OS                    string
	LoadBefore, LoadAfter string
	Fsync                 string  // the disk's fdatasync rate, if measured
	FsyncPerSec           float64 // the same, a number (0: not measured)
}

// Report is the result of a run.
type Report struct {
	Config  Config
	Date    time.Time
	Machine Machine
	Rows    []*Row
	Notes   []string
	Elapsed time.Duration
}

func newReport(cfg Config) *Report {
	r := &Report{Config: cfg, Date: time.Now()}
	for _, d := range metricDefs(cfg.Sizes) {
		r.Rows = append(r.Rows, &Row{ID: d.id, Metric: d.label, Goal: d.goal, def: d})
	}
	return r
}

func (r *Report) row(id string) *Row {
	for _, row := range r.Rows {
		if row.ID == id {
			return row
		}
	}
	panic("bench: no metric " + id)
}

func (r *Report) def(id string) metricDef { return r.row(id).def }

func (r *Report) add(id, kind string, v float64) {
	row := r.row(id)
	if kind == KindEtcd {
		row.Etcd = append(row.Etcd, v)
	} else {
		row.WS = append(row.WS, v)
	}
}

func (r *Report) fail(ids []string, kind string, err error) {
	for _, id := range ids {
		row := r.row(id)
		if kind == KindEtcd {
			row.EtcdErr = append(row.EtcdErr, err.Error())
		} else {
			row.WSErr = append(row.WSErr, err.Error())
		}
	}
}

func (r *Report) addNote(workload, kind, note string) {
	r.Notes = append(r.Notes, fmt.Sprintf("%s, %s: %s", workload, systemName(kind), note))
}

func systemName(kind string) string {
	if kind == KindEtcd {
		return "etcd"
	}
	return "watchspec"
}

// Failed lists the measurements that failed.
func (r *Report) Failed() []string {
	var out []string
	for _, row := range r.Rows {
		for _, e := range row.WSErr {
			out = append(out, fmt.Sprintf("%s (watchspec): %s", row.Metric, e))
		}
		for _, e := range row.EtcdErr {
			out = append(out, fmt.Sprintf("%s (etcd): %s", row.Metric, e))
		}
	}
	return out
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *Report) finish() {
	for _, row := range r.Rows {
		d := row.def
		row.WSMedian, row.EtcdMedian = median(row.WS), median(row.Etcd)
		row.Ratio = math.NaN()
		if !d.wsOnly && row.WSMedian > 0 && row.EtcdMedian > 0 {
			if d.lowerBetter {
				row.Ratio = row.EtcdMedian / row.WSMedian
			} else {
				row.Ratio = row.WSMedian / row.EtcdMedian
			}
		}
		var met *bool
		judge := func(ok bool) { met = &ok }
		switch {
		case d.goalRatio > 0 && !math.IsNaN(row.Ratio):
			judge(row.Ratio >= d.goalRatio)
		case d.goalMax > 0 && !math.IsNaN(row.WSMedian):
			judge(row.WSMedian <= d.goalMax)
		case d.goalMin > 0 && !math.IsNaN(row.WSMedian):
			judge(row.WSMedian >= d.goalMin)
		}
		row.Met = met
	}
}

func (row *Row) cell(kind string) string {
	d := row.def
	vals, med, errs := row.WS, row.WSMedian, row.WSErr
	if kind == KindEtcd {
		if d.wsOnly {
			return "—"
		}
		vals, med, errs = row.Etcd, row.EtcdMedian, row.EtcdErr
	}
	switch {
	case len(vals) > 0:
		return d.format(med)
	case len(errs) > 0:
		return "failed"
	}
	return "not measured"
}

func (row *Row) ratioCell() string {
	if math.IsNaN(row.Ratio) {
		return "—"
	}
	return fmt.Sprintf("%.2f", row.Ratio)
}

// goalCell states a row's goal and whether it was met.
func (row *Row) goalCell() string {
	switch {
	case row.Goal == "":
		return "—"
	case row.Met == nil:
		return row.Goal + ": not judged"
	case *row.Met:
		return row.Goal + ": met"
	}
	return row.Goal + ": **missed**"
}

// Table returns the markdown table: metric | watchspec | etcd | ratio |
// goal.
func (r *Report) Table() string {
	var b strings.Builder
	b.WriteString(Header + "\n|---|---:|---:|---:|---|\n")
	for _, row := range r.Rows {
		if row.def.hidden {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.Metric, row.cell(KindReference), row.cell(KindEtcd), row.ratioCell(), row.goalCell())
	}
	return b.String()
}

// Targets returns the targets as a markdown list, each marked met or missed.
func (r *Report) Targets() string {
	var b strings.Builder
	for _, row := range r.Rows {
		if row.Goal == "" || row.def.hidden {
			continue
		}
		verdict := "not judged (not measured"
		if !row.def.wsOnly && row.def.goalRatio > 0 && !r.Config.VsEtcd {
			verdict += "; needs --vs-etcd"
		}
		verdict += ")"
		if row.Met != nil {
			verdict = "**missed**"
			if *row.Met {
				verdict = "met"
			}
		}
		got := row.cell(KindReference)
		if row.def.goalRatio > 0 {
			got = row.ratioCell() + "×"
		}
		fmt.Fprintf(&b, "- %s — goal %s, got %s: %s\n", row.Metric, row.Goal, got, verdict)
	}
	return b.String()
}

// Limits states how close each figure bound by the machine is to its
// physical limit: every durable-put figure as a fraction of the disk's
// sequential fdatasync rate; one writer's against the round trip and the
// fdatasync each of its puts waits for; every durable-put figure against
// the CPU the driver and the server spend per put; and the catch-up and
// fan-out figures against what the client's own CPU per delivered event
// allows on this machine's cores, whatever the server does.
func (r *Report) Limits() string {
	var b strings.Builder
	systems := []string{KindReference}
	if r.Config.VsEtcd {
		systems = append(systems, KindEtcd)
	}
	med := func(id, kind string) float64 {
		row := r.row(id)
		if kind == KindEtcd {
			return row.EtcdMedian
		}
		return row.WSMedian
	}
	ok := func(v float64) bool { return !math.IsNaN(v) && v > 0 }
	if f := r.Machine.FsyncPerSec; f > 0 {
		fmt.Fprintf(&b, "- **The disk**: %s fdatasyncs/s, one after the other. A server that acknowledges each put after one fdatasync of its own reaches at most that with one writer (fraction 1.00); with 16 writers a group commit shares one among several puts (above 1).\n",
			thousands(f))
		for _, id := range []string{"put1", "put16"} {
			var parts []string
			for _, k := range systems {
				if v := med(id, k); ok(v) {
					parts = append(parts, fmt.Sprintf("%s %s/s = %.2f of the disk's rate", systemName(k), rate(v), v/f))
				}
			}
			if len(parts) > 0 {
				fmt.Fprintf(&b, "  - %s: %s\n", r.row(id).Metric, strings.Join(parts, "; "))
			}
		}
		var parts []string
		for _, k := range systems {
			v, rtt := med("put1", k), med("put1rtt", k)
			if !ok(v) || !ok(rtt) {
				continue
			}
			limit := 1 / (rtt + 1/f)
			parts = append(parts, fmt.Sprintf("%s: %.0f µs + %.0f µs, so at most %s/s; it got %s = %.2f of that",
				systemName(k), rtt*1e6, 1e6/f, rate(limit), rate(v), v/limit))
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "- **One writer's wait**: each put of a single writer waits for at least one round trip to the server (measured as a serializable Get of one key: the loopback, gRPC and the server's dispatch, no log) and one fdatasync (the disk's rate above), one after the other; so one writer puts at most one per their sum, whatever the CPU.\n  - %s — %s\n",
				r.row("put1").Metric, strings.Join(parts, "; "))
		}
	}
	cores := float64(max(1, r.Machine.Cores))
	for _, id := range []string{"put1", "put16"} {
		var parts []string
		for _, k := range systems {
			v, dcpu, scpu := med(id, k), med(id+"cpu", k), med(id+"srv", k)
			if !ok(v) || !ok(dcpu) || !ok(scpu) {
				continue
			}
			limit := cores / (dcpu + scpu)
			parts = append(parts, fmt.Sprintf("%s: driver %.1f µs + server %.1f µs = %.1f µs per put, so %.0f cores put at most %s/s; it got %s = %.2f of that",
				systemName(k), dcpu*1e6, scpu*1e6, (dcpu+scpu)*1e6, cores, rate(limit), rate(v), v/limit))
		}
		if len(parts) > 0 {
			if !strings.Contains(b.String(), "**CPU per put**") {
				b.WriteString("- **CPU per put**: the driver (clientv3) and the server share the machine's cores, and the server's CPU (getrusage) includes the kernel's work in its fdatasyncs and sockets; their sum per put bounds the put rate whatever the disk. A rate near that bound is CPU-bound: a higher one needs less CPU per put, on either side.\n")
			}
			fmt.Fprintf(&b, "  - %s — %s\n", r.row(id).Metric, strings.Join(parts, "; "))
		}
	}
	for _, c := range []struct{ id, cpu, what string }{
		{"catchup", "clientcpu", "catch-up"},
		{"fanout1", "fanout1cpu", r.row("fanout1").Metric},
		{"fanout2", "fanout2cpu", r.row("fanout2").Metric},
	} {
		var parts []string
		for _, k := range systems {
			v, cpu := med(c.id, k), med(c.cpu, k)
			if !ok(v) || !ok(cpu) {
				continue
			}
			limit := cores / cpu
			parts = append(parts, fmt.Sprintf("%s: the client spends %.2f µs per event, so %.0f cores deliver at most %s events/s even to a server that costs nothing; it got %s = %.2f of that",
				systemName(k), cpu*1e6, cores, rate(limit), rate(v), v/limit))
		}
		if len(parts) > 0 {
			if b.Len() == 0 || !strings.Contains(b.String(), "**The client**") {
				b.WriteString("- **The client**: the driver shares the machine's cores with the server; its own CPU per delivered event (clientv3's receiving of the server's responses, fewer and larger responses cost it less) bounds delivery whatever the server does. For the fan-out runs it includes the 16 writers' puts.\n")
			}
			fmt.Fprintf(&b, "  - %s — %s\n", c.what, strings.Join(parts, "; "))
		}
	}
	return b.String()
}

// describeMachine reads the machine's description.
func describeMachine() Machine {
	m := Machine{GoVersion: runtime.Version(), EtcdVersion: version.Version, OS: runtime.GOOS + "/" + runtime.GOARCH,
		LoadBefore: loadAverage(), Cores: runtime.NumCPU()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		cores := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "model name":
				if m.CPU == "" {
					m.CPU = strings.TrimSpace(v)
				}
			case "processor":
				cores++
			}
		}
		f.Close()
		if cores > 0 {
			m.Cores = cores
		}
	}
	if m.CPU == "" {
		m.CPU = "unknown"
	}
	m.Memory = "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.Memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	return m
}

// loadAverage returns the 1, 5 and 15-minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// MetricLabels returns the metric column of every row the report has for
// the given sizes, in order.
func MetricLabels(s Sizes) []string {
	var out []string
	for _, d := range metricDefs(s) {
		if !d.hidden {
			out = append(out, d.label)
		}
	}
	return out
}
