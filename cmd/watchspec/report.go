package main

// The files of a conformance run's report, and how a run is interrupted:
// kept apart from conform.go's flags and workload.

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/report"
	"github.com/watchspec/watchspec/traces"
)

// The report directories conform makes under the system's temporary
// directory (docs/REPORTS.md): named reportPrefix*, marked by a file
// reportMarker, and pruned at the start of every run to the newest
// keepReports — or $WATCHSPEC_KEEP_REPORTS; 0 keeps them all. A directory
// given with --report is never pruned, and nothing unmarked is touched.
const (
	reportPrefix = "watchspec-conform-"
	reportMarker = ".watchspec-conform-report"
	keepReports  = 10
	keepEnv      = "WATCHSPEC_KEEP_REPORTS"
)

// The files of a report directory.
const (
	traceFile      = "trace.ndjson.gz"
	reportText     = "report.txt"
	reportJSON     = "report.json"
	reportPageName = "report" // report.html, and report.porcupine.html beside it
)

// reportDir returns the directory for a run's report: given, created if
// needed; or, when given is "", a new one under the system's temporary
// directory, after removing old ones beyond the number kept. policy says
// what was kept and removed, for the output.
func reportDir(given string) (dir, policy string, err error) {
	if given != "" {
		return given, "", os.MkdirAll(given, 0o755)
	}
	keep, err := reportsKept()
	if err != nil {
		return "", "", err
	}
	dir, err = os.MkdirTemp("", reportPrefix)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, reportMarker), []byte("a report of watchspec conform; removed when newer ones outnumber "+keepEnv+" (default 10); see docs/REPORTS.md\n"), 0o644); err != nil {
		return "", "", err
	}
	if keep == 0 {
		return dir, fmt.Sprintf("%s=0: old reports under %s are kept", keepEnv, os.TempDir()), nil
	}
	removed, err := pruneReports(os.TempDir(), keep)
	policy = fmt.Sprintf("the newest %d reports under %s are kept (%s)", keep, os.TempDir(), keepEnv)
	if removed > 0 {
		policy += fmt.Sprintf("; removed %d older", removed)
	}
	if err != nil {
		policy += fmt.Sprintf("; could not remove an old report: %v", err)
	}
	return dir, policy, nil
}

// discardReport removes the report directory of a run that recorded
// nothing (conform.Record refused the endpoint), when conform made it;
// a directory given with --report is left as it is.
func discardReport(dir, given string) {
	if given == "" {
		os.RemoveAll(dir)
	}
}

// reportsKept is how many reports to keep: $WATCHSPEC_KEEP_REPORTS, or keepReports.
func reportsKept() (int, error) {
	v := os.Getenv(keepEnv)
	if v == "" {
		return keepReports, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a number of reports to keep (0: all)", keepEnv, v)
	}
	return n, nil
}

// pruneReports removes the marked report directories in tmp beyond the
// newest keep (by the marker's time), and returns how many it removed.
func pruneReports(tmp string, keep int) (int, error) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return 0, err
	}
	type found struct {
		path string
		made time.Time
	}
	var reports []found
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), reportPrefix) {
			continue
		}
		path := filepath.Join(tmp, e.Name())
		info, err := os.Stat(filepath.Join(path, reportMarker))
		if err != nil {
			continue // not one of ours, or not any more
		}
		reports = append(reports, found{path, info.ModTime()})
	}
	sort.Slice(reports, func(i, j int) bool {
		if !reports[i].made.Equal(reports[j].made) {
			return reports[i].made.After(reports[j].made)
		}
		return reports[i].path > reports[j].path
	})
	removed := 0
	var firstErr error
	for _, r := range reports[min(keep, len(reports)):] {
		if err := os.RemoveAll(r.path); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		removed++
	}
	return removed, firstErr
}

// gzipFile is a trace being written gzip-compressed.
type gzipFile struct {
	f    *os.File
	zw   *gzip.Writer
	path string
}

// createTrace creates dir/trace.ndjson.gz for a run's trace.
func createTrace(dir string) (*gzipFile, error) {
	path := filepath.Join(dir, traceFile)
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &gzipFile{f: f, zw: gzip.NewWriter(f), path: path}, nil
}

func (g *gzipFile) Write(p []byte) (int, error) { return g.zw.Write(p) }

// Close ends the gzip stream and closes the file.
func (g *gzipFile) Close() error {
	err := g.zw.Close()
	if cerr := g.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// interrupts turns Ctrl-C into a graceful stop and a second Ctrl-C into
// an exit at once. The first cancels ctx: the workload stops, and what it
// recorded is checked and reported as "interrupted after N s". The second
// runs the registered cleanups (for at most a second) and exits 130.
type interrupts struct {
	ctx    context.Context
	cancel context.CancelFunc
	start  time.Time
	stderr io.Writer
	exit   func(int)
	stopCh chan struct{}

	mu         sync.Mutex
	phase      string
	firstPhase string        // the phase the first came in
	at         time.Duration // since start, when the first came
	n          int
	cleanups   []func()
}

// catchInterrupts starts watching for os.Interrupt; stop ends it.
func catchInterrupts(stderr io.Writer) *interrupts {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt)
	in := newInterrupts(sig, stderr, os.Exit)
	go func() {
		<-in.stopCh
		signal.Stop(sig)
	}()
	return in
}

// newInterrupts handles the signals that arrive on sig.
func newInterrupts(sig <-chan os.Signal, stderr io.Writer, exit func(int)) *interrupts {
	ctx, cancel := context.WithCancel(context.Background())
	in := &interrupts{ctx: ctx, cancel: cancel, start: time.Now(), stderr: stderr, exit: exit, stopCh: make(chan struct{}), phase: "starting"}
	go func() {
		for {
			select {
			case <-in.stopCh:
				return
			case <-sig:
				in.interrupted()
			}
		}
	}()
	return in
}

func (in *interrupts) interrupted() {
	in.mu.Lock()
	in.n++
	n, phase := in.n, in.phase
	if n == 1 {
		in.at, in.firstPhase = time.Since(in.start), phase
	}
	cleanups := in.cleanups
	in.mu.Unlock()
	if n == 1 {
		fmt.Fprintf(in.stderr, "watchspec conform: interrupted after %.0f s while %s: stopping the workload, then checking and reporting what was recorded; press Ctrl-C again to exit at once\n", in.at.Seconds(), phase)
		in.cancel()
		return
	}
	fmt.Fprintln(in.stderr, "watchspec conform: interrupted again: exiting at once, without a report")
	done := make(chan struct{})
	go func() {
		for _, c := range cleanups {
			c()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	in.exit(130)
}

// during says what the run is doing now, for the report of an interruption.
func (in *interrupts) during(phase string) {
	in.mu.Lock()
	in.phase = phase
	in.mu.Unlock()
	enteringPhase(phase)
}

// enteringPhase is called as a run enters each phase: a seam for the test
// that interrupts a run while it checks.
var enteringPhase = func(phase string) {}

// atExit registers a cleanup to run before an exit at once.
func (in *interrupts) atExit(f func()) {
	in.mu.Lock()
	in.cleanups = append(in.cleanups, f)
	in.mu.Unlock()
}

// report is the interruption to report, or nil when there was none.
func (in *interrupts) report() *report.Interruption {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.n == 0 {
		return nil
	}
	return &report.Interruption{AfterSeconds: in.at.Seconds(), While: in.firstPhase}
}

func (in *interrupts) stop() {
	select {
	case <-in.stopCh:
	default:
		close(in.stopCh)
	}
	in.cancel()
}

// conformReport writes a conformance run's report into dir — report.txt
// (what stdout shows, and the command that repeats the run), report.json
// (the summary), report.html (the trace viewer) and, for a history that
// is not linearizable, report.porcupine.html — prints the text report on
// stdout, names the files, and returns the exit status.
func conformReport(stdout io.Writer, dir, policy string, res *linearizability.Result, t *traces.Trace, reproduce string, intr *report.Interruption) (int, error) {
	s := report.NewSummary("watchspec conform")
	s.Reproduce, s.Interrupted, s.ReportDir = reproduce, intr, dir
	tr := s.Add(res, t)
	opts := &report.HTMLOptions{Tool: "watchspec conform", Reproduce: reproduce, Interrupted: intr}
	if err := writePages(dir, reportPageName, tr, res, t, opts); err != nil {
		return 2, fmt.Errorf("drawing the report: %v", err)
	}
	var text strings.Builder
	w := io.MultiWriter(stdout, &text)
	tr.WriteFailures(w)
	s.WriteTable(w)
	fmt.Fprintf(w, "\nreproduce the workload with: %s\n", reproduce)
	if err := os.WriteFile(filepath.Join(dir, reportText), []byte(text.String()), 0o644); err != nil {
		return 2, err
	}
	if err := writeJSONFile(filepath.Join(dir, reportJSON), s); err != nil {
		return 2, err
	}
	files := []string{traceFile, reportText, reportJSON, filepath.Base(tr.HTML)}
	if tr.Porcupine != "" {
		files = append(files, filepath.Base(tr.Porcupine))
	}
	fmt.Fprintf(stdout, "\nreport: %s (%s)\n", dir, strings.Join(files, ", "))
	if policy != "" {
		fmt.Fprintf(stdout, "old reports: %s\n", policy)
	}
	return s.Status, nil
}
