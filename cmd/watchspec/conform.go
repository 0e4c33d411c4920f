package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

const conformUsage = `Usage: watchspec conform [flags]

Runs a randomized, concurrent workload through the real etcd client against
an etcd-v3 endpoint, records it (docs/TRACE_FORMAT.md), and checks the
recording against docs/SPEC.md with the same code as 'watchspec check'.

With no --endpoints, it starts watchspec's reference server in-process on a
loopback port with a temporary data directory, and restarts it on that
directory every 10 s (--restart-every): clients must ride through, resuming
watches from the last revision they saw. Against your own store, give --endpoints: the store must
hold no keys under the run's prefix and have no other writers during the
run (revisions are store-wide). See docs/CONFORMANCE.md.

--workload kubernetes sends only what the Kubernetes apiserver sends (for a
store such as kine that implements no more); --profile NAME checks under a
profile of documented allowances (docs/SPEC.md §9) and implies its workload.

Exit status: 0 every property holds; 1 a property is violated; 2 usage or
connection error.

Flags:
`

// conformFlags are the options of a conformance run.
type conformFlags struct {
	endpoints    string
	duration     time.Duration
	clients      int
	watchers     int
	compactEvery time.Duration
	seed         int64
	report       string
	restartEvery time.Duration
	timeout      time.Duration
	profile      string
	workload     string
	quiet        bool
}

func runConform(args []string, stdout, stderr io.Writer) int {
	var f conformFlags
	fs := flag.NewFlagSet("watchspec conform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, conformUsage); fs.PrintDefaults() }
	fs.StringVar(&f.endpoints, "endpoints", "", "comma-separated etcd-v3 `URLs` to test (default: the embedded reference server)")
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "how long the workload runs")
	fs.IntVar(&f.clients, "clients", 8, "concurrent key-value clients")
	fs.IntVar(&f.watchers, "watchers", 8, "concurrent watching clients")
	fs.DurationVar(&f.compactEvery, "compact-every", 150*time.Millisecond, "compaction period (0: never compact)")
	fs.Int64Var(&f.seed, "seed", 0, "random seed (0: derived from the clock, and printed)")
	fs.StringVar(&f.report, "report", "", "directory for the trace and report (default: a new directory under the system's temporary directory)")
	fs.DurationVar(&f.restartEvery, "restart-every", 10*time.Second, "restart the embedded reference server this often, on its data directory (embedded only; 0: never)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up searching for a linearization after this long")
	fs.StringVar(&f.profile, "profile", "", "check under the profile of allowances `NAME` (docs/SPEC.md §9; default: none, full conformance)")
	fs.StringVar(&f.workload, "workload", "", "the requests' shape: \"full\" (the whole etcd API) or \"kubernetes\" (only what the apiserver sends); default: the profile's, else full")
	fs.BoolVar(&f.quiet, "q", false, "no progress messages on stderr")
	kf := addKubeFlags(fs) // --kubeconfig: the Kubernetes workload (kube.go)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if kf.kubeconfig != "" {
		return runConformKube(kf, &f, fs, stdout, stderr)
	}
	if f.endpoints != "" && !flagSet(fs, "restart-every") {
		f.restartEvery = 0 // the default applies to the embedded server only
	}
	if err := f.validate(fs); err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	profile, _ := linearizability.LookupProfile(f.profile) // validated
	workload := conform.WorkloadFull
	switch {
	case f.workload == "kubernetes":
		workload = conform.WorkloadKubernetes
	case f.workload == "" && profile != nil:
		workload = profile.Workload
	}
	if profile != nil && workload != profile.Workload {
		fmt.Fprintf(stderr, "watchspec conform: warning: profile %s describes the %q workload, not %q\n", profile.Name, profile.Workload, f.workload)
	}
	if profile == nil {
		f.profile = ""
	}
	if f.seed == 0 {
		f.seed = time.Now().UnixNano() % 1_000_000_007
	}
	progress := func(string, ...any) {}
	if !f.quiet {
		progress = progressTo(stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg := conform.Config{Duration: f.duration, Clients: f.clients, Watchers: f.watchers, CompactEvery: f.compactEvery,
		Seed: f.seed, Profile: f.profile, Workload: workload, Progress: progress}
	if f.compactEvery == 0 {
		cfg.CompactEvery = -1
	}
	if f.endpoints != "" {
		cfg.Endpoints = strings.Split(f.endpoints, ",")
	} else {
		target, cleanup, err := startEmbedded(&cfg, f.restartEvery, progress)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec conform: starting the reference server: %v\n", err)
			return 2
		}
		defer cleanup()
		progress("reference server at %s", target)
	}
	dir := f.report
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "watchspec-conform-"); err != nil {
			fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
			return 2
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	tracePath := filepath.Join(dir, "trace.ndjson")
	out, err := os.Create(tracePath)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	progress("seed %d: %d clients, %d watchers, %v, %s workload against %s", f.seed, f.clients, f.watchers, f.duration, workloadName(workload), strings.Join(cfg.Endpoints, ","))
	stats, err := conform.Record(ctx, cfg, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	progress("recorded %d operations (%d with unknown outcome), %d watches, %d watch responses, %d events, %d compactions, %d restarts in %v",
		stats.Ops, stats.UnknownOps, stats.Watches, stats.WatchResponses, stats.Events, stats.Compactions, stats.Restarts, stats.Duration.Round(time.Millisecond))
	t, err := traces.ReadFile(tracePath)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: reading back the trace: %v\n", err)
		return 2
	}
	// The embedded reference server is one server: what it answered before
	// a watch was requested bounds where a watch from now starts (SPEC §1).
	res, err := linearizability.Check(t, linearizability.Options{Timeout: f.timeout, Progress: progress, Profile: profileOption(f.profile), SingleServer: f.endpoints == ""})
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	html, err := res.WriteHTML(dir)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: writing the visualisation: %v\n", err)
		return 2
	}
	var summary strings.Builder
	status := report(io.MultiWriter(stdout, &summary), []*linearizability.Result{res}, map[*linearizability.Result]string{res: html})
	fmt.Fprintf(&summary, "\nseed %d; reproduce the workload with: watchspec conform --seed %d --duration %v --clients %d --watchers %d --compact-every %v --workload %s",
		f.seed, f.seed, f.duration, f.clients, f.watchers, f.compactEvery, workloadName(workload))
	if f.profile != "" {
		fmt.Fprintf(&summary, " --profile %s", f.profile)
	}
	fmt.Fprintln(&summary)
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(summary.String()), 0o644); err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "\nreport: %s (trace.ndjson, report.txt", dir)
	if html != "" {
		fmt.Fprintf(stdout, ", %s", filepath.Base(html))
	}
	fmt.Fprintln(stdout, ")")
	return status
}

func (f *conformFlags) validate(fs *flag.FlagSet) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case f.duration <= 0:
		return fmt.Errorf("--duration must be positive, not %v", f.duration)
	case f.clients < 1:
		return fmt.Errorf("--clients must be at least 1, not %d", f.clients)
	case f.watchers < 0:
		return fmt.Errorf("--watchers must not be negative, not %d", f.watchers)
	case f.compactEvery < 0:
		return fmt.Errorf("--compact-every must not be negative, not %v", f.compactEvery)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, not %v", f.timeout)
	case f.restartEvery < 0:
		return fmt.Errorf("--restart-every must not be negative, not %v", f.restartEvery)
	case f.restartEvery > 0 && f.endpoints != "":
		return errors.New("--restart-every restarts the embedded reference server; it cannot restart --endpoints")
	case f.workload != "" && f.workload != "full" && f.workload != "kubernetes":
		return fmt.Errorf("--workload %q is neither \"full\" nor \"kubernetes\"", f.workload)
	}
	if _, err := linearizability.LookupProfile(f.profile); err != nil {
		return fmt.Errorf("--profile: %v", err)
	}
	for _, e := range strings.Split(f.endpoints, ",") {
		if f.endpoints != "" && strings.TrimSpace(e) == "" {
			return fmt.Errorf("--endpoints %q has an empty entry", f.endpoints)
		}
	}
	return nil
}

func workloadName(w string) string {
	if w == conform.WorkloadFull {
		return "full"
	}
	return w
}

// profileOption is the checker's profile option for --profile: the run is
// checked under exactly the profile given, none meaning full conformance.
func profileOption(name string) *linearizability.Profile {
	if name == "" {
		return linearizability.FullConformance
	}
	p, _ := linearizability.ProfileOption(name) // validated
	return p
}

// flagSet reports whether the command line set the flag called name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
