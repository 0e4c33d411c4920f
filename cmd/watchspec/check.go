package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

const checkUsage = `Usage: watchspec check [--html DIR] [--timeout D] [--profile NAME] TRACE...

Checks recorded traces (docs/TRACE_FORMAT.md) against docs/SPEC.md: the
key-value operations for linearizability, the revisions of writes, and every
watch stream. Prints one line per violation, beginning "FAIL <Property>",
then the profile in force and a table of the properties checked.

A trace is checked under the profile of allowances its header names, if any
(docs/SPEC.md §9); --profile NAME checks every trace under NAME instead, and
--profile none for full conformance.

Exit status: 0 every property holds; 1 a property is violated (or
linearizability could not be decided in time); 2 a trace is unreadable or
malformed, or the command line is wrong.

Flags:
`

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watchspec check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage); fs.PrintDefaults() }
	html := fs.String("html", "", "write porcupine's visualisation of a non-linearizable history into `DIR`")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up searching for a linearization after `D`")
	quiet := fs.Bool("q", false, "no progress messages on stderr")
	profile := fs.String("profile", "", "check under the profile `NAME` (docs/SPEC.md §9; \"none\": full conformance; default: the trace's own)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	profileOpt, err := linearizability.ProfileOption(*profile)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec check: --profile: %v\n", err)
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "watchspec check: no trace given")
		fs.Usage()
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "watchspec check: --timeout must be positive, not %v\n", *timeout)
		return 2
	}
	// Read everything first: a malformed trace is a usage error, whatever the others hold.
	var ts []*traces.Trace
	for _, path := range fs.Args() {
		t, err := traces.ReadFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec check: %v\n", err)
			return 2
		}
		ts = append(ts, t)
	}
	opts := linearizability.Options{Timeout: *timeout, Profile: profileOpt}
	if !*quiet {
		opts.Progress = progressTo(stderr)
	}
	var results []*linearizability.Result
	drawn := map[*linearizability.Result]string{}
	for _, t := range ts {
		res, err := linearizability.Check(t, opts)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec check: %s: %v\n", t.Name, err)
			return 2
		}
		if *html != "" {
			if drawn[res], err = res.WriteHTML(*html); err != nil {
				fmt.Fprintf(stderr, "watchspec check: writing the visualisation of %s: %v\n", t.Name, err)
				return 2
			}
		}
		results = append(results, res)
	}
	return report(stdout, results, drawn)
}

// progressTo prints progress messages with the time since the start.
func progressTo(w io.Writer) func(string, ...any) {
	start := time.Now()
	return func(format string, args ...any) {
		fmt.Fprintf(w, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}
