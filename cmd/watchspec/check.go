package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/report"
	"github.com/watchspec/watchspec/traces"
)

const checkUsage = `Usage: watchspec check [flags] TRACE...

Checks recorded traces (docs/TRACE_FORMAT.md; gzip-compressed or not)
against docs/SPEC.md: the key-value operations for linearizability, the
revisions of writes, every watch stream and the informer run. A TRACE of
"-" is read from standard input. Flags may come before or after the
traces; "--" ends them.

Traces are checked one at a time, each read, checked and let go before the
next: one that is unreadable or malformed is reported on stderr
("file:line: what is wrong") and the others are still checked. Prints one
line per violation, beginning "FAIL <Property>", as each trace is checked;
then a line per trace, the profile in force and a table of the properties
checked. --json prints the same as JSON instead (report/summary.schema.json,
docs/REPORTS.md); --html DIR draws each trace as a page in DIR.

A trace is checked under the profile of allowances its header names, if any
(docs/SPEC.md §9); --profile NAME checks every trace under NAME instead, and
--profile none for full conformance.

Exit status, the worst over the traces: 0 every property holds; 1 a
property is violated (or linearizability could not be decided in time); 2
a trace is unreadable or malformed, or the command line is wrong.

Flags:
`

// checkFlags are the options of `watchspec check`.
type checkFlags struct {
	html     string
	json     bool
	jsonFile string
	timeout  time.Duration
	quiet    bool
	profile  string
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	var f checkFlags
	fs := flag.NewFlagSet("watchspec check", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), checkUsage); fs.PrintDefaults() }
	fs.StringVar(&f.html, "html", "", "draw each trace as a self-contained page `DIR/<trace>.html` (and porcupine's view of a history that is not linearizable beside it)")
	fs.BoolVar(&f.json, "json", false, "print the JSON summary on stdout instead of the text report")
	fs.StringVar(&f.jsonFile, "json-file", "", "also write the JSON summary to `FILE`")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up searching for a linearization after `D`")
	fs.BoolVar(&f.quiet, "q", false, "no progress messages on stderr")
	fs.StringVar(&f.profile, "profile", "", "check under the profile `NAME` (docs/SPEC.md §9; \"none\": full conformance; default: the trace's own)")
	files, code, ok := parseFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	profileOpt, err := linearizability.ProfileOption(f.profile)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec check: --profile: %v\n", err)
		return 2
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "watchspec check: no trace given (\"-\" reads standard input)")
		fs.Usage()
		return 2
	}
	if f.timeout <= 0 {
		fmt.Fprintf(stderr, "watchspec check: --timeout must be positive, not %v\n", f.timeout)
		return 2
	}
	stdins := 0
	for _, name := range files {
		if name == "-" {
			stdins++
		}
	}
	if stdins > 1 {
		fmt.Fprintln(stderr, "watchspec check: \"-\" (standard input) is given more than once")
		return 2
	}
	opts := linearizability.Options{Timeout: f.timeout, Profile: profileOpt}
	if !f.quiet {
		opts.Progress = progressTo(stderr)
	}
	text := stdout
	if f.json {
		text = io.Discard
	}
	s := report.NewSummary("watchspec check")
	pages := pageNames{}
	// One trace at a time: read, check, report, let go.
	for _, name := range files {
		t, err := readTrace(name)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec check: %v\n", err)
			s.AddError(name, err)
			continue
		}
		res, err := linearizability.Check(t, opts)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec check: %s: %v\n", name, err)
			s.AddError(name, fmt.Errorf("%s: %v", name, err))
			continue
		}
		tr := s.Add(res, t)
		if f.html != "" {
			if err := writePages(f.html, pages.next(name), tr, res, t, &report.HTMLOptions{Tool: "watchspec check"}); err != nil {
				fmt.Fprintf(stderr, "watchspec check: drawing %s: %v\n", name, err)
				return 2
			}
		}
		tr.WriteFailures(text)
	}
	s.WriteTable(text)
	if f.json {
		if err := s.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "watchspec check: %v\n", err)
			return 2
		}
	}
	if f.jsonFile != "" {
		if err := writeJSONFile(f.jsonFile, s); err != nil {
			fmt.Fprintf(stderr, "watchspec check: --json-file: %v\n", err)
			return 2
		}
	}
	return s.Status
}

// readTrace reads the trace name: a file, or standard input for "-".
func readTrace(name string) (*traces.Trace, error) {
	if name == "-" {
		return traces.Read(stdin, "-")
	}
	return traces.ReadFile(name)
}

// pageNames gives each trace a page name of its own in one directory.
type pageNames map[string]bool

func (p pageNames) next(trace string) string {
	base := filepath.Base(trace)
	if trace == "-" {
		base = "stdin"
	}
	name := base
	for i := 2; p[name]; i++ {
		name = base + "-" + strconv.Itoa(i)
	}
	p[name] = true
	return name
}

// writePages draws the trace viewer's page of one trace as dir/name.html
// and, for a history that is not linearizable, porcupine's view beside it
// as dir/name.porcupine.html, which the page links; it records both paths
// in tr.
func writePages(dir, name string, tr *report.Trace, res *linearizability.Result, t *traces.Trace, opts *report.HTMLOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if res.Verdict == linearizability.NotLinearizable {
		path := filepath.Join(dir, name+".porcupine.html")
		if err := writeFile(path, res.Visualize); err != nil {
			return err
		}
		tr.Porcupine = path
		opts.PorcupineHref = filepath.Base(path)
	}
	path := filepath.Join(dir, name+".html")
	if err := writeFile(path, func(w io.Writer) error { return report.WriteHTML(w, res, t, opts) }); err != nil {
		return err
	}
	tr.HTML = path
	return nil
}

// writeFile creates path and fills it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeJSONFile(path string, s *report.Summary) error {
	return writeFile(path, s.WriteJSON)
}

// progressTo prints progress messages with the time since the start.
func progressTo(w io.Writer) func(string, ...any) {
	start := time.Now()
	return func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		fmt.Fprintf(w, "[%6.1fs] %s\n", time.Since(start).Seconds(), strings.TrimRight(msg, "\n"))
	}
}
