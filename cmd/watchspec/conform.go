package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/report"
	"github.com/watchspec/watchspec/traces"
)

const conformUsage = `Usage: watchspec conform [flags]

Runs a randomized, concurrent workload through the real etcd client against
an etcd-v3 endpoint, records it (docs/TRACE_FORMAT.md), and checks the
recording against docs/SPEC.md with the same code as 'watchspec check'.

With no --endpoints, it starts watchspec's reference server in-process on a
loopback port with a temporary data directory, and restarts it on that
directory every 10 s (--restart-every): clients must ride through, resuming
watches from the last revision they saw. Against your own store, give
--endpoints: nobody else may write during the run (revisions are
store-wide). A store in use, compacted, reused from run to run is fine:
each run writes under a prefix of its own and records the revision and
the compaction in force when it starts.

The workload uses etcd as its users do: watches sharing one clientv3
stream per watching client (--watches-per-stream), progress requests on
those streams (--progress-every), bursts of catch-up watches on one stream
(--catch-up-watches), slow readers (--slow-readers), serializable reads
(--serializable), and leases (--leases: clients that grant, keep alive,
revoke and let expire the leases of keys they put, so that the server
deletes keys of its own accord; a store without the Lease API answers them
with errors and is not judged on them). See docs/CONFORMANCE.md.

A TLS endpoint (https://) takes etcdctl's flags: --cacert to verify the
server, --cert and --key when it requires client certificates.

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
	// The shapes of real use (issue 11).
	watchesPerStream int
	slowReaders      float64
	fragmentWatches  float64
	progressEvery    time.Duration
	catchUpWatches   int
	serializable     float64
	leases           int
	prefix           string
	singleServer     bool
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
	fs.IntVar(&f.watchesPerStream, "watches-per-stream", 4, "watches each watching client keeps open at once on its one watch stream (1: a stream per watch)")
	fs.Float64Var(&f.slowReaders, "slow-readers", 0.2, "fraction of watches that stop reading for a while (0: none)")
	fs.Float64Var(&f.fragmentWatches, "fragment-watches", 0, "fraction of watches that let the server fragment large responses (clientv3.WithFragment; 0: none; watchspec serve --adversary fragments them anywhere)")
	fs.DurationVar(&f.progressEvery, "progress-every", 250*time.Millisecond, "how often each watching client asks its stream for progress (0: watching clients never ask)")
	fs.IntVar(&f.catchUpWatches, "catch-up-watches", 200, "watches opened at once, burst after burst, from far behind the head on one stream (0: no bursts)")
	fs.IntVar(&f.leases, "leases", 2, "lease clients (docs/SPEC.md §2.9-§2.11, §3.15; 0: none; the kubernetes workload has none)")
	fs.Float64Var(&f.serializable, "serializable", 0.1, "fraction of reads sent serializable (served by any member from its own state; 0: none)")
	fs.BoolVar(&f.singleServer, "single-server", false, "with --endpoints: the endpoint is one server, not a cluster, so a watch from now must start after every revision answered before it was asked (docs/SPEC.md §1); always so for the embedded server")
	fs.StringVar(&f.prefix, "prefix", "", "where the run's keys live; no key may exist under it (default: a new prefix per run, /watchspec/<time>-<random>/)")
	var tlsFlags clientTLSFlags
	tlsFlags.register(fs)
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
	tlsConfig, err := conformTLS(&tlsFlags, f.endpoints)
	if err != nil {
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
	if workload == conform.WorkloadKubernetes {
		f.leases = 0 // the apiserver's requests: no lease clients
	}
	if f.seed == 0 {
		f.seed = time.Now().UnixNano() % 1_000_000_007
	}
	progress := func(string, ...any) {}
	if !f.quiet {
		progress = progressTo(stderr)
	}
	// Ctrl-C stops the workload and reports what was recorded; a second exits at once.
	intr := catchInterrupts(stderr)
	defer intr.stop()
	ctx := intr.ctx

	cfg := conform.Config{Duration: f.duration, Clients: f.clients, Watchers: f.watchers, CompactEvery: f.compactEvery,
		Seed: f.seed, Profile: f.profile, Workload: workload, Progress: progress, Prefix: f.prefix,
		WatchesPerStream: f.watchesPerStream, SlowReaders: f.slowReaders, ProgressRequestEvery: f.progressEvery,
		CatchUpWatches: f.catchUpWatches, SerializableReads: f.serializable, Leases: f.leases,
		FragmentWatches: f.fragmentWatches}
	// The flags say 0 for none; Config says negative (0 takes the default).
	if f.compactEvery == 0 {
		cfg.CompactEvery = -1
	}
	if f.slowReaders == 0 {
		cfg.SlowReaders = -1
	}
	if f.progressEvery == 0 {
		cfg.ProgressRequestEvery = -1
	}
	if f.catchUpWatches == 0 {
		cfg.CatchUpWatches = -1
	}
	if f.serializable == 0 {
		cfg.SerializableReads = -1
	}
	if f.endpoints != "" {
		cfg.Endpoints = strings.Split(f.endpoints, ",")
		if tlsConfig != nil {
			cfg.Dial = tlsDial(tlsConfig)
		}
	} else {
		progress("starting the embedded reference server (its data in a new directory under %s)", os.TempDir())
		target, cleanup, err := startEmbedded(&cfg, f.restartEvery, progress)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec conform: starting the reference server: %v\n", err)
			return 2
		}
		defer cleanup()
		intr.atExit(cleanup)
		progress("reference server at %s", target)
	}
	dir, policy, err := reportDir(f.report) // report.go: where, and which old reports go
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	out, err := createTrace(dir) // gzip-compressed
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	progress("report directory %s", dir)
	intr.during("recording")
	progress("seed %d: %d clients, %d watchers, %v, %s workload against %s", f.seed, f.clients, f.watchers, f.duration, workloadName(workload), strings.Join(cfg.Endpoints, ","))
	stats, err := conform.Record(ctx, cfg, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		discardReport(dir, f.report) // report.go: nothing was recorded
		return 2
	}
	progress("recorded %d operations (%d with unknown outcome), %d watches on %d streams (%d in catch-up bursts), %d watch responses, %d events, %d progress requests, %d headers below an earlier one, %d compactions (base revision %d, compaction in force at the start %d), %d restarts in %v",
		stats.Ops, stats.UnknownOps, stats.Watches, stats.Streams, stats.CatchUpWatches, stats.WatchResponses, stats.Events,
		stats.ProgressRequests, stats.LoweredHeaders, stats.Compactions, stats.BaseRevision, stats.BaseCompaction, stats.Restarts,
		stats.Duration.Round(time.Millisecond))
	intr.during("checking")
	t, err := traces.ReadFile(out.path)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: reading back the trace: %v\n", err)
		return 2
	}
	// Counted in the trace, as the summary counts them.
	c := report.CountsOf(t)
	progress("recorded %d operations (%d with unknown outcome), %d watches, %d watch responses, %d events, %d compactions, %d restarts in %v",
		c.Operations, c.UnknownOutcome, c.Watches, c.WatchResponses, c.Events, stats.Compactions, stats.Restarts, stats.Duration.Round(time.Millisecond))
	// The embedded reference server is one server: what it answered before
	// a watch was requested bounds where a watch from now starts (SPEC §1).
	res, err := linearizability.Check(t, linearizability.Options{Timeout: f.timeout, Progress: progress, Profile: profileOption(f.profile), SingleServer: f.endpoints == "" || f.singleServer})
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	reproduce := fmt.Sprintf("watchspec conform --seed %d --duration %v --clients %d --watchers %d --compact-every %v --workload %s --watches-per-stream %d --slow-readers %v --progress-every %v --catch-up-watches %d --serializable %v --leases %d",
		f.seed, f.duration, f.clients, f.watchers, f.compactEvery, workloadName(workload),
		f.watchesPerStream, f.slowReaders, f.progressEvery, f.catchUpWatches, f.serializable, f.leases)
	if f.fragmentWatches > 0 {
		reproduce += fmt.Sprintf(" --fragment-watches %v", f.fragmentWatches)
	}
	if f.profile != "" {
		reproduce += " --profile " + f.profile
	}
	if f.singleServer {
		reproduce += " --single-server"
	}
	status, err := conformReport(stdout, dir, policy, res, t, reproduce, intr.report()) // report.go
	if err != nil {
		fmt.Fprintf(stderr, "watchspec conform: %v\n", err)
		return 2
	}
	return status
}

// conformTLS returns the TLS configuration the client flags ask for (nil:
// plaintext), after checking that it fits the endpoints.
func conformTLS(tf *clientTLSFlags, endpoints string) (*tls.Config, error) {
	if tf.set() && endpoints == "" {
		return nil, errors.New("--cacert, --cert, --key and --insecure-skip-tls-verify are for --endpoints (the embedded reference server serves plaintext)")
	}
	cfg, err := tf.config()
	if err != nil {
		return nil, err
	}
	if endpoints != "" {
		if err := checkTLSEndpoints(strings.Split(endpoints, ","), cfg != nil); err != nil {
			return nil, err
		}
	}
	return cfg, nil
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
	case f.watchesPerStream < 1:
		return fmt.Errorf("--watches-per-stream must be at least 1, not %d", f.watchesPerStream)
	case f.slowReaders < 0 || f.slowReaders > 1:
		return fmt.Errorf("--slow-readers is a fraction between 0 and 1, not %v", f.slowReaders)
	case f.fragmentWatches < 0 || f.fragmentWatches > 1:
		return fmt.Errorf("--fragment-watches is a fraction between 0 and 1, not %v", f.fragmentWatches)
	case f.serializable < 0 || f.serializable > 1:
		return fmt.Errorf("--serializable is a fraction between 0 and 1, not %v", f.serializable)
	case f.progressEvery < 0:
		return fmt.Errorf("--progress-every must not be negative, not %v", f.progressEvery)
	case f.leases < 0:
		return fmt.Errorf("--leases must not be negative, not %d", f.leases)
	case f.catchUpWatches < 0:
		return fmt.Errorf("--catch-up-watches must not be negative, not %d", f.catchUpWatches)
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
