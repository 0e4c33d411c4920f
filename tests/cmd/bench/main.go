// Command bench measures watchspec's reference server side by side with an
// embedded etcd (the tests/bench package); `watchspec bench` builds and runs
// it from a checkout with the same flags, and so does `make bench-compare`.
// Run it from the repository root:
//
//	go run ./tests/cmd/bench --quick --vs-etcd
//
// With the hidden first argument bench-server it is one server under test,
// which the driver starts as its child.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/watchspec/watchspec/tests/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "bench-server" {
		os.Exit(runBenchServer(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(runBench(os.Args[1:], os.Stdout, os.Stderr))
}

const benchUsage = `Usage: watchspec bench [--vs-etcd] [--out DIR] [--rounds N] [--quick] [flags]

Measures watchspec's reference server (each round a fresh one in a child
process, fsync on, serving etcd's gRPC API on loopback) with the same
clientv3 workloads as an embedded etcd 3.7.3 (with --vs-etcd: 1 member,
fsync on, data on the same disk), alternating between them, for several
rounds: durable puts, live fan-out, catch-up, put→delivery latency, heap
per idle watcher, polling against watching; then the checker's own
throughput. Prints a table of the medians (metric | watchspec | etcd |
ratio, the ratio above 1 where watchspec does better) and the targets met,
and writes it to DIR/PERFORMANCE.md with a chart, DIR/performance.svg.

A full run takes about 6 to 10 minutes on 2 cores; --quick runs every
workload scaled down, once, in well under a minute (for tests: not a
measurement to quote).

Exit status: 0 done; 1 a measurement failed (the table says which); 2 usage
error, or a server could not be started.

Flags:
`

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watchspec bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	vsEtcd := fs.Bool("vs-etcd", false, "run every server workload against an embedded etcd too")
	out := fs.String("out", "", "write PERFORMANCE.md and performance.svg into `DIR` (default docs, or nowhere with --quick or --only)")
	rounds := fs.Int("rounds", 3, "rounds; the table gives the medians (--quick: 1)")
	quick := fs.Bool("quick", false, "small sizes and one round (unless --rounds): for tests")
	only := fs.String("only", "", "run only these comma-separated workloads: "+strings.Join(bench.Workloads, ","))
	workDir := fs.String("work-dir", "", "keep the servers' data under `DIR` (default: a temporary directory)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server for every workload into `DIR`")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "watchspec bench: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	roundsSet := flagSet(fs, "rounds")
	if *rounds <= 0 {
		fmt.Fprintf(stderr, "watchspec bench: --rounds must be positive, not %d\n", *rounds)
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "watchspec bench: finding this program to start the servers: %v\n", err)
		return 2
	}
	cfg := bench.Config{
		VsEtcd:        *vsEtcd,
		Rounds:        *rounds,
		Sizes:         bench.FullSizes,
		ChildCommand:  []string{exe, "bench-server"},
		WorkDir:       *workDir,
		CPUProfileDir: *cpuProfile,
		Command:       strings.TrimSpace("watchspec bench " + strings.Join(args, " ")),
		Log:           stderr,
	}
	if *quiet {
		cfg.Log = io.Discard
	}
	if *quick {
		cfg.Quick, cfg.Sizes = true, bench.QuickSizes
		if !roundsSet {
			cfg.Rounds = 1
		}
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	dir := *out
	if dir == "" && !*quick && *only == "" {
		dir = "docs"
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec bench: %v\n", err)
		return 2
	}
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, rep.Table())
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, rep.Targets())
	if dir != "" {
		md, svg, err := rep.WriteFiles(dir)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec bench: writing the report: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nwrote %s and %s (%s)\n", md, svg, rep.Elapsed.Round(1e8))
	} else {
		fmt.Fprintf(stdout, "\n(%s; no report written: give --out DIR)\n", rep.Elapsed.Round(1e8))
	}
	if f := rep.Failed(); len(f) > 0 {
		fmt.Fprintln(stderr, "watchspec bench: some measurements failed:")
		for _, e := range f {
			fmt.Fprintf(stderr, "  %s\n", e)
		}
		return 1
	}
	return 0
}

// runBenchServer is the hidden `watchspec bench-server`: one server under
// test, for `watchspec bench` (see bench.ServeChild).
func runBenchServer(args []string, stdout, stderr io.Writer) int {
	// An interrupt at the terminal reaches the whole process group: the
	// driver stops its servers itself (or they stop when its end of stdin
	// closes).
	signal.Ignore(os.Interrupt)
	return bench.ServeChild(args, os.Stdin, stdout, stderr)
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
