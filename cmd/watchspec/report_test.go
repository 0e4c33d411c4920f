package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/watchspec/watchspec/report"
)

// When the test binary is run with WATCHSPEC_TEST_MAIN=1 it is watchspec
// itself: the tests that need a process of their own (to send it Ctrl-C)
// run it so.
// With WATCHSPEC_TEST_HOLD=PHASE, the run stops for good when it enters
// PHASE, as if that phase took forever.
func init() {
	if os.Getenv("WATCHSPEC_TEST_MAIN") == "1" {
		if hold := os.Getenv("WATCHSPEC_TEST_HOLD"); hold != "" {
			enteringPhase = func(phase string) {
				if phase == hold {
					fmt.Fprintf(os.Stderr, "test: holding the run in phase %s\n", phase)
					select {}
				}
			}
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
}

// Old reports under the system's temporary directory are pruned to the
// newest ones at the next run; unmarked directories and --report
// directories are never touched (issue 18: reports "never cleaned up").
func TestReportDirKeepsTheNewest(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv(keepEnv, "")
	base := time.Now().Add(-time.Hour)
	var made []string
	for i := 0; i < 12; i++ {
		dir := filepath.Join(tmp, reportPrefix+"old"+string(rune('a'+i)))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(dir, reportMarker)
		os.WriteFile(marker, nil, 0o644)
		os.WriteFile(filepath.Join(dir, traceFile), []byte("x"), 0o644)
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(marker, at, at); err != nil {
			t.Fatal(err)
		}
		made = append(made, dir)
	}
	mine := filepath.Join(tmp, reportPrefix+"not-a-report")
	os.Mkdir(mine, 0o755)
	given := filepath.Join(tmp, "given")

	dir, policy, err := reportDir("")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), reportPrefix) {
		t.Errorf("report directory %s is not under the temporary directory %s", dir, tmp)
	}
	if !strings.Contains(policy, "newest 10") || !strings.Contains(policy, "removed 3 older") {
		t.Errorf("policy %q", policy)
	}
	for i, d := range made {
		_, err := os.Stat(d)
		if gone := errors.Is(err, os.ErrNotExist); gone != (i < 3) {
			t.Errorf("%s (the %d-th oldest): removed %v", d, i+1, gone)
		}
	}
	for _, d := range []string{dir, mine} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if d, policy, err := reportDir(given); err != nil || d != given || policy != "" {
		t.Errorf("--report: %s, %q, %v", d, policy, err)
	}
	// The number kept is configurable; 0 keeps every report.
	t.Setenv(keepEnv, "0")
	if _, policy, err := reportDir(""); err != nil || !strings.Contains(policy, "kept") {
		t.Errorf("%s=0: %q, %v", keepEnv, policy, err)
	}
	t.Setenv(keepEnv, "2")
	if _, _, err := reportDir(""); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, reportPrefix+"*", reportMarker))
	if len(left) != 2 {
		t.Errorf("%s=2 left %d reports: %v", keepEnv, len(left), left)
	}
	t.Setenv(keepEnv, "many")
	if _, _, err := reportDir(""); err == nil {
		t.Errorf("%s=many: no error", keepEnv)
	}
}

// A run that recorded nothing (an unreachable endpoint) leaves no report
// directory behind.
func TestConformRefusedLeavesNoReport(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, _, errOut := runCLI("conform", "-q", "--endpoints", "http://127.0.0.1:1", "--duration", "1s")
	if code != 2 || errOut == "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, reportPrefix+"*")); len(left) > 0 {
		t.Errorf("a run that recorded nothing left %v", left)
	}
}

// The first interrupt cancels the run and is reported with when and
// during what; the second runs the cleanups and exits 130 at once.
func TestInterrupts(t *testing.T) {
	sig := make(chan os.Signal)
	var stderr lockedBuffer
	exited := make(chan int, 1)
	in := newInterrupts(sig, &stderr, func(code int) { exited <- code })
	defer in.stop()
	if in.report() != nil {
		t.Fatal("an interruption before any interrupt")
	}
	cleaned := make(chan struct{})
	in.atExit(func() { close(cleaned) })
	in.during("recording")
	sig <- os.Interrupt
	<-in.ctx.Done()
	r := in.report()
	if r == nil || r.While != "recording" || !strings.HasPrefix(r.String(), "interrupted after ") {
		t.Fatalf("report %+v", r)
	}
	if !strings.Contains(stderr.String(), "Ctrl-C again to exit at once") {
		t.Errorf("stderr %q", stderr.String())
	}
	in.during("checking")
	sig <- os.Interrupt
	if code := <-exited; code != 130 {
		t.Errorf("exit %d, want 130", code)
	}
	<-cleaned
	if r := in.report(); r.While != "recording" {
		t.Errorf("the second interrupt changed the report: %+v", r)
	}
}

// A conform run with no --report writes its report under the system's
// temporary directory, names it and the policy for old ones, writes the
// trace gzip-compressed and the summary as JSON valid against its schema,
// and says what it is doing from its first line (issue 18).
func TestConformDefaultReport(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	code, out, errOut := runCLI("conform", "--duration", "1s", "--clients", "2", "--watchers", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	first, _, _ := strings.Cut(errOut, "\n")
	if !strings.Contains(first, "starting the embedded reference server") {
		t.Errorf("the first line does not say what conform is doing: %q", first)
	}
	m := regexp.MustCompile(`(?m)^report: (\S+) \((.*)\)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no report line:\n%s", out)
	}
	dir := m[1]
	if filepath.Dir(dir) != tmp {
		t.Errorf("report directory %s, not under %s", dir, tmp)
	}
	if !strings.Contains(out, "old reports: the newest 10 reports under "+tmp+" are kept") {
		t.Errorf("the output does not state the policy for old reports:\n%s", out)
	}
	for _, f := range strings.Split(m[2], ", ") {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, traceFile))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s is not gzip data: %v", traceFile, err)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		t.Errorf("%s: %v", traceFile, err)
	}
	js, err := os.ReadFile(filepath.Join(dir, reportJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := schema(t).Validate(js); err != nil {
		t.Errorf("report.json does not validate: %v", err)
	}
	var s report.Summary
	json.Unmarshal(js, &s)
	if s.Tool != "watchspec conform" || s.ReportDir != dir || !strings.HasPrefix(s.Reproduce, "watchspec conform --seed ") || s.Interrupted != nil {
		t.Errorf("summary: tool %q, dir %q, reproduce %q, interrupted %v", s.Tool, s.ReportDir, s.Reproduce, s.Interrupted)
	}
	// The recorded counts are the summary's.
	rec := regexp.MustCompile(`recorded (\d+) operations \((\d+) with unknown outcome\), (\d+) watches, (\d+) watch responses`).FindStringSubmatch(errOut)
	if rec == nil || len(s.Traces) != 1 {
		t.Fatalf("no recorded line:\n%s", errOut)
	}
	c := s.Traces[0].Counts
	if got, want := strings.Join(rec[1:5], " "), fmt.Sprint(c.Operations, " ", c.UnknownOutcome, " ", c.Watches, " ", c.WatchResponses); got != want {
		t.Errorf("progress %q; summary counts %+v", rec[0], c)
	}
}

// conformProcess is `watchspec conform` in a process of its own (this
// test binary, see init), for a test that interrupts it.
type conformProcess struct {
	cmd    *exec.Cmd
	stdout lockedBuffer
	lines  chan string // stderr, line by line
	done   chan error
	mu     sync.Mutex
	stderr strings.Builder
}

func startConform(t *testing.T, env []string, args ...string) *conformProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &conformProcess{cmd: exec.Command(exe, append([]string{"conform"}, args...)...), lines: make(chan string, 1000), done: make(chan error, 1)}
	p.cmd.Env = append(append(os.Environ(), "WATCHSPEC_TEST_MAIN=1"), env...)
	p.cmd.Stdout = &p.stdout
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

func (p *conformProcess) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitFor reads stderr until a line contains s (a generous bound: the
// machine may be loaded; the run itself is minutes long).
func (p *conformProcess) waitFor(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(3 * time.Minute)
	for {
		select {
		case line := <-p.lines:
			if strings.Contains(line, s) {
				return
			}
		case err := <-p.done:
			t.Fatalf("conform ended (%v) before printing %q:\n%s%s", err, s, p.stdout.String(), p.stderrText())
		case <-timeout:
			t.Fatalf("no %q from conform:\n%s", s, p.stderrText())
		}
	}
}

// wait returns the exit code, failing when the process does not end in
// time (3 minutes, against a --duration of 10 minutes).
func (p *conformProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(3 * time.Minute):
		t.Fatalf("conform did not end after the interrupt:\n%s", p.stderrText())
	}
	return -1
}

// Ctrl-C stops the run; the report says "interrupted after N s" — on
// stdout, in report.txt, report.json and report.html (issue 18: "the report
// does not say the run was interrupted").
func TestConformInterruptedReportSaysSo(t *testing.T) {
	dir := t.TempDir()
	p := startConform(t, []string{"TMPDIR=" + t.TempDir()}, "--duration", "10m", "--clients", "2", "--watchers", "2", "--report", dir)
	p.waitFor(t, "1s: ") // the workload is running
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, p.stdout.String(), p.stderrText())
	}
	re := regexp.MustCompile(`interrupted after \d+ s while recording`)
	if !re.MatchString(p.stdout.String()) {
		t.Errorf("stdout does not say the run was interrupted:\n%s", p.stdout.String())
	}
	for _, f := range []string{reportText, reportJSON, "report.html"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !re.Match(b) && !(f == reportJSON && bytes.Contains(b, []byte(`"while": "recording"`))) {
			t.Errorf("%s does not say the run was interrupted", f)
		}
	}
}

// A second Ctrl-C exits at once, exit 130, without waiting for the check
// (issue 18: "a second Ctrl-C is ignored, and the check may then run for
// up to --timeout"). The run is held in its check, as if it took forever.
func TestConformSecondInterruptExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	p := startConform(t, []string{"WATCHSPEC_TEST_HOLD=checking", "TMPDIR=" + t.TempDir()}, "--duration", "10m", "--clients", "2", "--watchers", "2", "--report", dir)
	p.waitFor(t, "1s: ")
	p.cmd.Process.Signal(syscall.SIGINT)
	p.waitFor(t, "holding the run in phase checking")
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t); code != 130 {
		t.Errorf("exit %d, want 130\n%s", code, p.stderrText())
	}
	if !strings.Contains(p.stderrText(), "exiting at once") {
		t.Errorf("stderr does not say so:\n%s", p.stderrText())
	}
}
