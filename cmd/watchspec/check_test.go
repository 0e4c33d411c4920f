package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watchspec/watchspec/internal/corpus"
	"github.com/watchspec/watchspec/internal/jsonschema"
	"github.com/watchspec/watchspec/report"
)

const corpusDir = "../../traces/corpus"

// runCLIStdin is runCLI with r as standard input.
func runCLIStdin(r io.Reader, args ...string) (int, string, string) {
	old := stdin
	stdin = r
	defer func() { stdin = old }()
	return runCLI(args...)
}

func corpusFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(corpusDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func failLines(out string) []string {
	var fails []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "FAIL ") {
			fails = append(fails, line)
		}
	}
	return fails
}

// `check -` reads a trace from standard input, plain or gzip-compressed
// (issue 18: "it does not read - (stdin)").
func TestCheckReadsStdin(t *testing.T) {
	plain := corpusFile(t, "etcd-15220-progress-overtakes-events.ndjson")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	for name, in := range map[string][]byte{"plain": plain, "gzip": gz.Bytes()} {
		code, out, errOut := runCLIStdin(bytes.NewReader(in), "check", "-q", "-")
		fails := failLines(out)
		if code != 1 || len(fails) != 1 || !strings.HasPrefix(fails[0], "FAIL Bookmarkable - watch 1 of client 2") {
			t.Errorf("%s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	if code, _, errOut := runCLIStdin(strings.NewReader(""), "check", "-q", "-", "-"); code != 2 || !strings.Contains(errOut, "more than once") {
		t.Errorf("stdin twice: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLIStdin(strings.NewReader("nope\n"), "check", "-q", "-"); code != 2 || !strings.Contains(errOut, "-:1:") {
		t.Errorf("malformed stdin: exit %d, stderr %q", code, errOut)
	}
}

// Flags may follow the traces; "--" ends them (issue 18: "a flag after a
// file name is taken for a file").
func TestCheckFlagsAnywhere(t *testing.T) {
	trace := filepath.Join(corpusDir, "etcd-3.7.3-watch-registered-after-progress-answer.ndjson.gz")
	code, out, errOut := runCLI("check", trace, "-q", "--profile", "none")
	if code != 0 || errOut != "" || !strings.Contains(out, "profile: none (full conformance)") {
		t.Errorf("flags after the trace: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI("check", trace, "--json", "-q")
	if code != 0 || errOut != "" || !json.Valid([]byte(out)) {
		t.Errorf("--json after the trace: exit %d, stderr %q", code, errOut)
	}
	// After "--", "-q" is a file name: a missing file, exit 2.
	code, _, errOut = runCLI("check", "-q", "--", "-q")
	if code != 2 || !strings.Contains(errOut, "open -q") {
		t.Errorf(`"--" then "-q": exit %d, stderr %q`, code, errOut)
	}
	if code, _, errOut := runCLI("check", trace, "--nope"); code != 2 || !strings.Contains(errOut, "-nope") {
		t.Errorf("unknown flag after the trace: exit %d, stderr %q", code, errOut)
	}
}

// writeFile writes content to a new file in dir and returns its path.
func writeTemp(t *testing.T, dir, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each trace is checked and reported, whatever another holds; the exit
// status is the worst of them (issue 18: "one malformed file aborts the
// whole batch").
func TestCheckGoesOnAfterABadTrace(t *testing.T) {
	dir := t.TempDir()
	bad := writeTemp(t, dir, "bad.ndjson", []byte("{nope\n"))
	missing := filepath.Join(dir, "missing.ndjson")
	pass := filepath.Join(corpusDir, "etcd-3.7.3-watch-registered-after-progress-answer.ndjson.gz")
	fail := filepath.Join(corpusDir, "etcd-17247-duplicated-event.ndjson")
	code, out, errOut := runCLI("check", "-q", bad, fail, missing, pass)
	if code != 2 {
		t.Errorf("exit %d, want 2 (the worst)", code)
	}
	for _, want := range []string{bad + ":1:", "missing.ndjson"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not name %q:\n%s", want, errOut)
		}
	}
	if fails := failLines(out); len(fails) != 1 || !strings.Contains(fails[0], "FAIL Unique "+fail) {
		t.Errorf("the good traces were not all checked:\n%s", out)
	}
	for _, want := range []string{bad + ": not checked", missing + ": not checked", fail + ": ", pass + ": "} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks a line %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		files []string
		want  int
	}{
		{[]string{pass}, 0},
		{[]string{pass, fail}, 1},
		{[]string{fail, pass}, 1},
		{[]string{fail, bad}, 2},
		{[]string{bad, pass}, 2},
	} {
		if code, _, _ := runCLI(append([]string{"check", "-q"}, c.files...)...); code != c.want {
			t.Errorf("check %v: exit %d, want %d", c.files, code, c.want)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Traces are checked one at a time: the first is reported before the
// second is read (issue 18: "every trace is loaded into memory before any
// is checked"). The second comes from a pipe that is only written once the
// first trace's FAIL line is out; a check that read every trace first
// would wait for it forever.
func TestCheckStreamsTraceAfterTrace(t *testing.T) {
	pr, pw := io.Pipe()
	old := stdin
	stdin = pr
	defer func() { stdin = old }()
	var out, errb lockedBuffer
	done := make(chan int, 1)
	first := filepath.Join(corpusDir, "etcd-17247-duplicated-event.ndjson")
	go func() { done <- run([]string{"check", "-q", first, "-"}, &out, &errb) }()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "FAIL Unique "+first) {
		select {
		case code := <-done:
			t.Fatalf("check ended (exit %d) before reading the second trace:\n%s%s", code, out.String(), errb.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			pw.Close()
			t.Fatalf("no FAIL line for the first trace while the second was not yet readable: traces are not checked one at a time\n%s%s", out.String(), errb.String())
		}
	}
	go func() {
		pw.Write(corpusFile(t, "etcd-15220-progress-overtakes-events.ndjson"))
		pw.Close()
	}()
	if code := <-done; code != 1 {
		t.Errorf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "FAIL Bookmarkable - ") {
		t.Errorf("the second trace was not checked:\n%s", out.String())
	}
}

// Invalid UTF-8 is malformed input, exit 2 with file:line — never two
// keys rewritten into one (issue 18). The two keys differ only in a byte
// that is not UTF-8; read as U+FFFD they would be one key, and the history
// (a put on each, then a read of the first that sees its own value) would
// pass.
func TestCheckInvalidUTF8IsMalformed(t *testing.T) {
	dir := t.TempDir()
	trace := `{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T12:00:00Z"}
{"type":"op","client":1,"call":1,"return":2,"request":{"put":{"key":"k` + "\xff" + `","value":"1"}},"response":{"revision":2,"put":{}}}
{"type":"op","client":1,"call":3,"return":4,"request":{"put":{"key":"k` + "\xfe" + `","value":"2"}},"response":{"revision":3,"put":{}}}
{"type":"op","client":1,"call":5,"return":6,"request":{"range":{"key":"k` + "\xff" + `"}},"response":{"revision":3,"range":{"kvs":[{"key":"k` + "\xff" + `","value":"1","create_revision":2,"mod_revision":2,"version":1}],"count":1}}}
`
	path := writeTemp(t, dir, "utf8.ndjson", []byte(trace))
	code, out, errOut := runCLI("check", "-q", path)
	if code != 2 || !strings.Contains(errOut, path+":2: invalid UTF-8") {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	// Written as the format says, in base64, the keys stay apart and pass.
	b64 := strings.NewReplacer(`"k`+"\xff"+`"`, `{"base64":"a/8="}`, `"k`+"\xfe"+`"`, `{"base64":"a/4="}`).Replace(trace)
	path = writeTemp(t, dir, "base64.ndjson", []byte(b64))
	if code, out, errOut := runCLI("check", "-q", path); code != 0 {
		t.Errorf("the same in base64: exit %d\n%s%s", code, out, errOut)
	}
}

// A damaged gzip stream is named as such, not as invalid JSON (issue 18).
func TestCheckNamesGzipErrors(t *testing.T) {
	dir := t.TempDir()
	good := corpusFile(t, "etcd-3.7.3-watch-registered-after-progress-answer.ndjson.gz")
	corrupt := append([]byte{}, good...)
	for i := len(corrupt) / 2; i < len(corrupt)/2+64; i++ {
		corrupt[i] ^= 0x5a
	}
	for name, b := range map[string][]byte{
		"corrupt.ndjson.gz":   corrupt,
		"truncated.ndjson.gz": good[:len(good)/2],
		"header.ndjson.gz":    append([]byte{0x1f, 0x8b, 0x08, 0xff}, good[4:40]...),
	} {
		path := writeTemp(t, dir, name, b)
		code, _, errOut := runCLI("check", "-q", path)
		if code != 2 || !strings.Contains(errOut, "gzip") || strings.Contains(errOut, "invalid JSON") && !strings.Contains(errOut, "corrupt gzip") {
			t.Errorf("%s: exit %d, stderr %q", name, code, errOut)
		}
	}
	path := writeTemp(t, dir, "plain.ndjson.gz", corpusFile(t, "stale-read.ndjson"))
	if code, _, errOut := runCLI("check", "-q", path); code != 2 || !strings.Contains(errOut, "not gzip data") {
		t.Errorf("a .gz name on plain data: exit %d, stderr %q", code, errOut)
	}
}

// A negative revision or time is malformed input, exit 2 with file:line,
// not a FAIL (issue 18).
func TestCheckNegativeIsMalformed(t *testing.T) {
	dir := t.TempDir()
	base := string(corpusFile(t, "etcd-15220-progress-overtakes-events.ndjson"))
	for name, c := range map[string]struct{ old, new, line string }{
		"revision.ndjson": {`{"revision":4,"progress":true}`, `{"revision":-4,"progress":true}`, ":8:"},
		"time.ndjson":     {`"call":3000,`, `"call":-3000,`, ":2:"},
		"op.ndjson":       {`"response":{"revision":3,"put":{}}`, `"response":{"revision":-3,"put":{}}`, ":3:"},
	} {
		if !strings.Contains(base, c.old) {
			t.Fatalf("%s: the trace has no %s", name, c.old)
		}
		path := writeTemp(t, dir, name, []byte(strings.Replace(base, c.old, c.new, 1)))
		code, out, errOut := runCLI("check", "-q", path)
		if code != 2 || !strings.Contains(errOut, path+c.line) || !strings.Contains(errOut, "negative") || len(failLines(out)) > 0 {
			t.Errorf("%s: exit %d, stderr %q\n%s", name, code, errOut, out)
		}
	}
}

// schema compiles report/summary.schema.json.
func schema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	s, err := jsonschema.Compile(report.SchemaJSON)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// `watchspec check --json` over the whole corpus — and a malformed trace —
// validates against report/summary.schema.json, and says what the text
// report says: every trace, its verdict, the expected violations with
// their trace lines (docs/CORPUS.md).
func TestCheckJSONOnCorpusValidates(t *testing.T) {
	rows, err := corpus.ReadTable("../../docs/CORPUS.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := writeTemp(t, dir, "bad.ndjson", []byte(`{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T12:00:00Z"}`+"\n{nope\n"))
	args := []string{"check", "-q", "--json", "--json-file", filepath.Join(dir, "summary.json")}
	for _, row := range rows {
		args = append(args, filepath.Join(corpusDir, row.File))
	}
	args = append(args, bad)
	code, out, errOut := runCLI(args...)
	if code != 2 {
		t.Errorf("exit %d, want 2 (a malformed trace)\n%s", code, errOut)
	}
	s := schema(t)
	if err := s.Validate([]byte(out)); err != nil {
		t.Fatalf("check --json does not validate against summary.schema.json:\n%v", err)
	}
	file, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, []byte(out)) {
		t.Errorf("--json-file differs from --json")
	}
	var sum report.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Status != 2 || len(sum.Traces) != len(rows)+1 || len(sum.Properties) == 0 {
		t.Fatalf("status %d, %d traces, %d properties", sum.Status, len(sum.Traces), len(sum.Properties))
	}
	for i, row := range rows {
		tr := sum.Traces[i]
		want := map[string]bool{}
		for _, p := range row.Expected {
			want[string(p)] = true
		}
		got := map[string]bool{}
		for _, v := range tr.Violations {
			got[v.Property] = true
			if v.Kind == "other" || (v.Kind != "informer" && len(v.Lines) == 0) {
				t.Errorf("%s: violation %s is not located: kind %q, lines %v (where %q)", row.File, v.Property, v.Kind, v.Lines, v.Where)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: violations %v, want %v", row.File, got, want)
		}
		if wantStatus := min(len(want), 1); tr.Status != wantStatus {
			t.Errorf("%s: status %d, want %d", row.File, tr.Status, wantStatus)
		}
		if tr.Counts.Operations == 0 && tr.Counts.InformerEntries == 0 {
			t.Errorf("%s: counts nothing: %+v", row.File, tr.Counts)
		}
	}
	last := sum.Traces[len(rows)]
	if last.Status != 2 || last.Error == nil || last.Error.Line != 2 || !strings.Contains(last.Error.Message, "invalid JSON") {
		t.Errorf("the malformed trace: %+v", last)
	}
}

// The progress lines count operations, watches and responses as the
// summary does (issue 18). The trace holds serializable reads, which the
// linearization leaves to §2.8: the progress line used to count only the
// operations it linearized.
func TestProgressCountsAsTheSummary(t *testing.T) {
	trace := filepath.Join(corpusDir, "etcd-3.7.3-3members-kills.ndjson.gz")
	code, out, errOut := runCLI("check", trace)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	summary := regexp.MustCompile(`: (\d+) operations \((\d+) serializable reads[^)]*\), (\d+) watches, (\d+) watch responses`).FindStringSubmatch(out)
	lin := regexp.MustCompile(`linearizing (?:(\d+) of the )?(\d+) operations(?: \((\d+) serializable reads)?`).FindStringSubmatch(errOut)
	val := regexp.MustCompile(`validating (\d+) watches \((\d+) responses\)`).FindStringSubmatch(errOut)
	if summary == nil || lin == nil || val == nil {
		t.Fatalf("no counts in\nstdout:\n%s\nstderr:\n%s", out, errOut)
	}
	if lin[2] != summary[1] || lin[3] != summary[2] {
		t.Errorf("progress: %q; summary: %q", lin[0], summary[0])
	}
	if val[1] != summary[3] || val[2] != summary[4] {
		t.Errorf("progress: %q; summary: %q", val[0], summary[0])
	}
	if n, _ := strconv.Atoi(summary[2]); n == 0 {
		t.Errorf("the trace has no serializable reads: the test shows nothing")
	}
}

// `help check` prints check's help, on stdout, exit 0; `spec -h` exits 0
// with a usage that says what spec does (issue 18).
func TestHelpForEachCommand(t *testing.T) {
	for _, name := range order {
		code, out, errOut := runCLI("help", name)
		if code != 0 || !strings.Contains(out, "Usage: watchspec "+name) {
			t.Errorf("help %s: exit %d\nstdout:\n%s\nstderr:\n%s", name, code, out, errOut)
		}
	}
	code, out, errOut := runCLI("spec", "-h")
	if code != 0 || !strings.Contains(out, "Usage: watchspec spec [-long]") || !strings.Contains(out, "-long") || errOut != "" {
		t.Errorf("spec -h: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, _ = runCLI("check", "--help")
	if code != 0 || !strings.Contains(out, "Usage: watchspec check") || !strings.Contains(out, "-json") {
		t.Errorf("check --help: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCLI("help", "nope"); code != 2 || !strings.Contains(errOut, `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLI("spec", "-nope"); code != 2 || !strings.Contains(errOut, "Usage: watchspec spec") {
		t.Errorf("spec -nope: exit %d, stderr %q", code, errOut)
	}
}

// The package doc and the usage list every command (issue 12: "cmd/watchspec's
// usage lists 2 of 5 commands").
func TestDocAndUsageListEveryCommand(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	_, usage, _ := runCLI("help")
	for _, name := range order {
		if !strings.Contains(doc, "watchspec "+name+" ") {
			t.Errorf("the package doc does not list %q:\n%s", name, doc)
		}
		if !regexp.MustCompile(`(?m)^  ` + name + ` `).MatchString(usage) {
			t.Errorf("the usage does not list %q:\n%s", name, usage)
		}
	}
}

// --html DIR draws every trace, passing or not, each on a page of its own,
// even when two traces have one base name.
func TestCheckHTMLPagePerTrace(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(corpusDir, "informer-client-go-0.37.2.ndjson")
	copyDir := t.TempDir()
	same := writeTemp(t, copyDir, "informer-client-go-0.37.2.ndjson", corpusFile(t, "kubernetes-115620-relist-leaks-object.ndjson"))
	code, out, errOut := runCLI("check", "-q", "--html", dir, pass, same)
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, name := range []string{"informer-client-go-0.37.2.ndjson.html", "informer-client-go-0.37.2.ndjson-2.html"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, filepath.Join(dir, name)) {
			t.Errorf("the output does not name %s:\n%s", name, out)
		}
		if name == "informer-client-go-0.37.2.ndjson-2.html" && !strings.Contains(string(b), `class="entry violating"`) {
			t.Errorf("%s: the informer violation is not drawn", name)
		}
	}
}

// The README says, next to the main command, that the first build takes
// minutes before anything is printed (issue 18: "during the first build go
// run prints nothing for minutes, while the README promises a 30 s run"),
// and links the screenshot of the trace viewer.
func TestReadmeSaysWhatTheFirstRunDoes(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	main := strings.Index(readme, "go run ./cmd/watchspec conform")
	note := strings.Index(readme, "The first `go run` compiles")
	if main < 0 || note < 0 || note-main > 400 || !strings.Contains(readme[note:], "a few minutes") {
		t.Errorf("the README does not say, next to the main command, that the first build takes a few minutes")
	}
	shot := "docs/viewer-watch-violation.png"
	if !strings.Contains(readme, "("+shot+")") {
		t.Errorf("the README does not link %s", shot)
	}
	png, err := os.ReadFile("../../" + shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("%s is not a PNG: %v", shot, err)
	}
}
