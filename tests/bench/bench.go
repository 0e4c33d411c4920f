// Package bench measures watchspec's reference server side by side with an
// embedded etcd: `watchspec bench --vs-etcd`. Each server runs in a child
// process of its own (the hidden `watchspec bench-server` subcommand, see
// [ServeChild]), both with fsync on and their data in the same directory,
// both serving etcd's gRPC API on loopback; the driver runs the same
// clientv3 workloads against each, alternating, for several rounds, and
// reports the medians in a table whose ratio column is above 1 where
// watchspec does better. The checker's own throughput (linearizability
// checking, watch validation, the reference informer) is measured in the
// driver, for watchspec only.
//
// docs/PERFORMANCE.md describes every workload and holds the latest
// figures.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Sizes shape the workloads.
type Sizes struct {
	PutWarmup, PutDuration time.Duration // each durable-put measurement
	FanoutWatchers         [2]int        // the two live fan-out runs
	FanoutEvents           int           // events delivered per fan-out run (revisions = events / watchers)
	CatchupWatchers        int
	CatchupRevisions       int
	LatencyWatchers        int
	LatencyPuts            int // sampled puts (after a tenth as many unsampled)
	LatencyRate            int // puts/s
	MemWatchers            int
	PollClients            int
	PollKeys               int // keys under the polled prefix
	PollWriteRate          int // writes/s under it
	PollInterval           time.Duration
	PollWarmup             time.Duration
	PollDuration           time.Duration // each of the two modes
	CheckOps               int           // operations of the linearizability history
	ValidateEvents         int           // events of the validated watch stream
	InformerEvents         int           // changes through the informer
	StartupRuns            int           // fresh starts per server and round
	OverloadClients        int           // pollers of the read-overload run
	OverloadKeys           int           // keys under its polled prefix
	// OverloadWriteRate is the writes/s offered under it: more than a
	// server acknowledges under the pollers, so that the row measures what
	// the writers get. (At 100 offered both servers acknowledged all of
	// them, 99 against 101 on 2026-12-02: a ceiling, not a comparison.)
	OverloadWriteRate int
	OverloadInterval  time.Duration // each poller's period
	OverloadWarmup    time.Duration
	OverloadDuration  time.Duration
}

// FullSizes are the sizes of a normal run.
var FullSizes = Sizes{
	PutWarmup: 300 * time.Millisecond, PutDuration: 2 * time.Second,
	FanoutWatchers: [2]int{1000, 10000}, FanoutEvents: 1_000_000,
	CatchupWatchers: 1000, CatchupRevisions: 10_000,
	LatencyWatchers: 1000, LatencyPuts: 300, LatencyRate: 100,
	MemWatchers: 10_000,
	PollClients: 1000, PollKeys: 10, PollWriteRate: 100, PollInterval: 100 * time.Millisecond,
	PollWarmup: 500 * time.Millisecond, PollDuration: 4 * time.Second,
	CheckOps: 100_000, ValidateEvents: 1_000_000, InformerEvents: 100_000,
	StartupRuns:     3,
	OverloadClients: 1000, OverloadKeys: 100, OverloadWriteRate: 1000, OverloadInterval: 100 * time.Millisecond,
	OverloadWarmup: time.Second, OverloadDuration: 4 * time.Second,
}

// QuickSizes are the sizes of --quick: everything small, for tests.
var QuickSizes = Sizes{
	PutWarmup: 100 * time.Millisecond, PutDuration: 400 * time.Millisecond,
	FanoutWatchers: [2]int{100, 1000}, FanoutEvents: 20_000,
	CatchupWatchers: 100, CatchupRevisions: 500,
	LatencyWatchers: 100, LatencyPuts: 40, LatencyRate: 100,
	MemWatchers: 1000,
	PollClients: 100, PollKeys: 10, PollWriteRate: 100, PollInterval: 100 * time.Millisecond,
	PollWarmup: 300 * time.Millisecond, PollDuration: time.Second,
	CheckOps: 5_000, ValidateEvents: 30_000, InformerEvents: 5_000,
	StartupRuns:     1,
	OverloadClients: 100, OverloadKeys: 100, OverloadWriteRate: 100, OverloadInterval: 100 * time.Millisecond,
	OverloadWarmup: 300 * time.Millisecond, OverloadDuration: time.Second,
}

// Config configures a run.
type Config struct {
	// VsEtcd runs every server workload against an embedded etcd too.
	VsEtcd bool
	// Rounds is the number of rounds (default 3); the report gives medians.
	Rounds int
	// Sizes shape the workloads (default FullSizes).
	Sizes Sizes
	// Quick records that the sizes are QuickSizes (the report says so).
	Quick bool
	// Only, if not empty, restricts the run to these workloads (see
	// [Workloads]); the other rows read "not measured".
	Only []string
	// ChildCommand starts a server child: the argv prefix to which
	// "--kind K --dir D --listen A" is appended, such as
	// [os.Executable(), "bench-server"]. Required for the server workloads.
	ChildCommand []string
	// WorkDir holds the servers' data directories (default: a new temporary
	// directory, removed at the end). Both servers use it: the same disk.
	WorkDir string
	// CPUProfileDir, if set, receives a CPU profile of the server for every
	// workload, server and round: <kind>-<workload>-r<round>.pprof.
	CPUProfileDir string
	// Command is the command line recorded in the report.
	Command string
	// Log receives progress lines (default: nowhere).
	Log io.Writer
}

// Workloads names the workloads in the order a round runs them.
var Workloads = []string{"startup", "catchup", "memory", "put1", "put16", "fanout1", "fanout2", "latency", "poll", "overload", "checker"}

func (c *Config) setDefaults() error {
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Sizes == (Sizes{}) {
		c.Sizes = FullSizes
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	for _, w := range c.Only {
		if !slices.Contains(Workloads, w) {
			return fmt.Errorf("unknown workload %q (known: %s)", w, strings.Join(Workloads, ", "))
		}
	}
	return nil
}

func (c *Config) selected(w string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, w) }

// Run runs the benchmark and returns its report. The error is for a run
// that could not take place (a server that does not start); a measurement
// that fails is recorded in the report (see [Report.Failed]).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	rep := newReport(cfg)
	rep.Machine = describeMachine()
	start := time.Now()
	needServers := false
	for _, w := range Workloads[:len(Workloads)-1] {
		needServers = needServers || cfg.selected(w)
	}
	if needServers {
		if len(cfg.ChildCommand) == 0 {
			return nil, errors.New("bench: Config.ChildCommand is required to start the servers")
		}
		work := cfg.WorkDir
		if work == "" {
			dir, err := os.MkdirTemp("", "watchspec-bench-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(dir)
			work = dir
		}
		d := time.Second
		if cfg.Quick {
			d = 200 * time.Millisecond
		}
		if n, err := measureFsync(work, d); err == nil {
			rep.Machine.Fsync = fmt.Sprintf("%s/s (4 KiB write + fdatasync, one after the other, in the servers' directory)", thousands(n))
			rep.Machine.FsyncPerSec = n
		}
		if cfg.CPUProfileDir != "" {
			if err := os.MkdirAll(cfg.CPUProfileDir, 0o755); err != nil {
				return nil, err
			}
		}
		for round := 1; round <= cfg.Rounds; round++ {
			if err := runRound(ctx, &cfg, rep, work, round); err != nil {
				return nil, err
			}
		}
	}
	if cfg.selected("checker") {
		if err := runChecker(ctx, &cfg, rep); err != nil {
			return nil, err
		}
	}
	rep.Elapsed = time.Since(start)
	rep.Machine.LoadAfter = loadAverage()
	rep.finish()
	return rep, nil
}

// runRound measures the start-up of each kind of server, then starts a
// fresh server of each kind and runs every other server workload on each in
// turn; the order of the servers alternates between rounds.
func runRound(ctx context.Context, cfg *Config, rep *Report, work string, round int) error {
	kinds := []string{KindReference}
	if cfg.VsEtcd {
		kinds = append(kinds, KindEtcd)
		if round%2 == 0 {
			slices.Reverse(kinds)
		}
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "round %d/%d: "+format+"\n", append([]any{round, cfg.Rounds}, args...)...)
	}
	if cfg.selected("startup") {
		// Alone on the machine (no other server runs), one start after the
		// other.
		for _, k := range kinds {
			var toPut, toReady []float64
			var failed error
			for i := range max(1, cfg.Sizes.StartupRuns) {
				dir := filepath.Join(work, fmt.Sprintf("r%d-start%d-%s", round, i, k))
				p, r, err := measureStartup(ctx, cfg.ChildCommand, k, dir)
				if err != nil {
					failed = err
					break
				}
				toPut, toReady = append(toPut, p.Seconds()), append(toReady, r.Seconds())
			}
			if failed != nil {
				rep.fail([]string{"startup"}, k, failed)
				logf("startup  %-9s %v", k, failed)
				continue
			}
			v := median(toPut)
			rep.add("startup", k, v)
			note := fmt.Sprintf("start-up: serving (its ready line) after %.0f ms, first put acknowledged after %.0f ms (medians of %d)",
				median(toReady)*1e3, v*1e3, len(toPut))
			rep.addNote("startup", k, note)
			logf("%-8s %-9s %s", "startup", k, note)
		}
	}
	others := false
	for _, w := range serverWorkloads(cfg.Sizes) {
		others = others || cfg.selected(w.name)
	}
	if !others {
		return nil
	}
	children := make([]*child, len(kinds))
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := filepath.Join(work, fmt.Sprintf("r%d-%s", round, k))
			children[i], errs[i] = startChild(ctx, cfg.ChildCommand, k, dir)
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range children {
			if c != nil {
				c.stop()
				os.RemoveAll(c.dir)
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s := cfg.Sizes
	for _, w := range serverWorkloads(s) {
		if !cfg.selected(w.name) {
			continue
		}
		for _, c := range children {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if w.prep != nil {
				if err := w.prep(ctx, c); err != nil {
					rep.fail(w.ids, c.kind, err)
					logf("%s on %s: preparing: %v", w.name, c.kind, err)
					continue
				}
			}
			if cfg.CPUProfileDir != "" {
				p := filepath.Join(cfg.CPUProfileDir, fmt.Sprintf("%s-%s-r%d.pprof", c.kind, w.name, round))
				if _, err := c.call(ctx, "profile-start "+p); err != nil {
					return err
				}
			}
			t0, cpu0 := time.Now(), processCPU()
			scpu0, _ := c.cpu(ctx)
			vals, note, err := w.run(ctx, c)
			scpu1, _ := c.cpu(ctx)
			cpu := processCPU() - cpu0
			if cfg.CPUProfileDir != "" {
				if _, perr := c.call(ctx, "profile-stop"); perr != nil {
					return perr
				}
			}
			if err != nil {
				rep.fail(w.ids, c.kind, err)
				logf("%s on %s: %v", w.name, c.kind, err)
				continue
			}
			var parts []string
			for i, id := range w.ids {
				rep.add(id, c.kind, vals[i])
				parts = append(parts, rep.def(id).format(vals[i]))
			}
			if note != "" {
				rep.addNote(w.name, c.kind, note)
			}
			logf("%-8s %-9s %s (%.1fs; CPU: server %.1fs, driver %.1fs) %s", w.name, c.kind, strings.Join(parts, ", "),
				time.Since(t0).Seconds(), scpu1-scpu0, cpu.Seconds(), note)
		}
	}
	return nil
}

// serverWorkload is one workload run on each server.
type serverWorkload struct {
	name string
	ids  []string // the metrics it measures
	prep func(ctx context.Context, c *child) error
	run  func(ctx context.Context, c *child) (vals []float64, note string, err error)
}

func serverWorkloads(s Sizes) []serverWorkload {
	fanout := func(i int) serverWorkload {
		w := s.FanoutWatchers[i]
		revs := max(1, s.FanoutEvents/w)
		return serverWorkload{name: fmt.Sprintf("fanout%d", i+1), ids: []string{fmt.Sprintf("fanout%d", i+1), fmt.Sprintf("fanout%dcpu", i+1)},
			run: func(ctx context.Context, c *child) ([]float64, string, error) {
				r, err := measureFanout(ctx, c.endpoint, fmt.Sprintf("bench/fan%d/", i+1), w, revs)
				return []float64{r.eventsPerSec, r.clientCPU}, fmt.Sprintf("%.1f events per response; the writers put %.0f/s, done with %.1f%% of the events delivered",
					r.perResponse, r.writerRate, 100*r.deliveredAtWritersDone), err
			}}
	}
	puts := func(name string, writers int) serverWorkload {
		ids := []string{name, name + "cpu", name + "srv"}
		if writers == 1 {
			// One writer also measures the round trip its every put waits for.
			ids = append(ids, name+"rtt")
		}
		return serverWorkload{name: name, ids: ids,
			run: func(ctx context.Context, c *child) ([]float64, string, error) {
				r, err := measurePuts(ctx, c, writers, s.PutWarmup, s.PutDuration)
				vals := []float64{r.perSec, r.driverCPU, r.serverCPU}
				note := fmt.Sprintf("CPU per put: driver %.1f µs, server %.1f µs", r.driverCPU*1e6, r.serverCPU*1e6)
				if err != nil || writers > 1 {
					return vals, note, err
				}
				rtt, err := measureRoundTrip(ctx, c.endpoint, s.PutWarmup, s.PutDuration/2)
				return append(vals, rtt), fmt.Sprintf("%s; a serializable Get's round trip %.1f µs", note, rtt*1e6), err
			}}
	}
	return []serverWorkload{
		{name: "catchup", ids: []string{"catchup", "clientcpu"},
			// The store's first writes: the watches from revision 1 replay
			// exactly these revisions.
			prep: func(ctx context.Context, c *child) error {
				_, err := writeN(ctx, c.endpoint, "bench/cu/", s.CatchupRevisions, writers16)
				return err
			},
			run: func(ctx context.Context, c *child) ([]float64, string, error) {
				r, err := measureCatchup(ctx, c.endpoint, "bench/cu/", s.CatchupWatchers, s.CatchupRevisions)
				return []float64{r.eventsPerSec, r.clientCPU}, fmt.Sprintf("%.1f events per response", r.perResponse), err
			}},
		{name: "memory", ids: []string{"memory"},
			run: func(ctx context.Context, c *child) ([]float64, string, error) {
				heap, stack, err := measureMemory(ctx, c, "bench/mem/", s.MemWatchers)
				return []float64{heap}, fmt.Sprintf("goroutine stacks %.0f B per watcher", stack), err
			}},
		puts("put1", 1),
		puts("put16", writers16),
		fanout(0),
		fanout(1),
		{name: "latency", ids: []string{"latency50", "latency99"},
			run: func(ctx context.Context, c *child) ([]float64, string, error) {
				l, err := measureLatency(ctx, c.endpoint, "bench/lat/", s.LatencyWatchers, s.LatencyPuts, s.LatencyRate)
				return []float64{l.p50.Seconds(), l.p99.Seconds()}, "", err
			}},
		{name: "poll", ids: []string{"pollcpu", "pollbytes", "watchcpu", "watchbytes"},
			run: func(ctx context.Context, c *child) ([]float64, string, error) {
				ps, err := startPollWriter(ctx, c.endpoint, "bench/poll/", s.PollKeys, s.PollWriteRate)
				if err != nil {
					return nil, "", err
				}
				p, err := measurePolling(ctx, c, ps, s.PollClients, s.PollInterval, s.PollWarmup, s.PollDuration)
				var w pollResult
				if err == nil {
					w, err = measureWatching(ctx, c, ps, s.PollClients, s.PollWarmup, s.PollDuration)
				}
				err = errors.Join(err, ps.stop())
				note := fmt.Sprintf("polling: %.0f writes/s, %.0f polls/s, %.0f changes/s delivered, clients sent %.0f B per change; "+
					"watching: %.0f writes/s, %.0f changes/s delivered, clients sent %.2f B per change",
					p.writesPerSec, p.requestsPerSec, p.changesPerSec, p.sentPerChange, w.writesPerSec, w.changesPerSec, w.sentPerChange)
				return []float64{p.cpuPerChange, p.bytesPerChange, w.cpuPerChange, w.bytesPerChange}, note, err
			}},
		{name: "overload", ids: []string{"overload"},
			run: func(ctx context.Context, c *child) ([]float64, string, error) {
				p, err := measureOverload(ctx, c, s)
				return []float64{p.writesPerSec}, fmt.Sprintf("under read overload: %.0f writes/s acknowledged of %d offered, %.0f polls/s answered",
					p.writesPerSec, s.OverloadWriteRate, p.requestsPerSec), err
			}},
	}
}

// runChecker measures the checker's throughput, in this process, once per
// round.
func runChecker(ctx context.Context, cfg *Config, rep *Report) error {
	s := cfg.Sizes
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "checker: "+format+"\n", args...) }
	t0 := time.Now()
	tr := checkHistory(s.CheckOps)
	vin := newValidationInput(s.ValidateEvents)
	iin, ierr := newInformerInput(ctx, s.InformerEvents)
	if ierr != nil {
		rep.fail([]string{"informer"}, KindReference, ierr)
	} else {
		defer iin.close()
	}
	logf("inputs ready (%.1fs)", time.Since(t0).Seconds())
	for round := 1; round <= cfg.Rounds; round++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if v, err := measureCheck(tr); err != nil {
			rep.fail([]string{"check"}, KindReference, err)
		} else {
			rep.add("check", KindReference, v)
			logf("round %d: linearizability.Check %s", round, rep.def("check").format(v))
		}
		if v, err := measureValidation(vin); err != nil {
			rep.fail([]string{"validate"}, KindReference, err)
		} else {
			rep.add("validate", KindReference, v)
			logf("round %d: watch validation %s", round, rep.def("validate").format(v))
		}
		if iin != nil {
			if v, err := measureInformer(ctx, iin); err != nil {
				rep.fail([]string{"informer"}, KindReference, err)
			} else {
				rep.add("informer", KindReference, v)
				logf("round %d: informer %s", round, rep.def("informer").format(v))
			}
		}
	}
	return nil
}

// measureFsync returns how many 4 KiB write + fdatasync pairs a file in dir
// takes per second, one after the other: the disk's bound on sequential
// durable writes.
func measureFsync(dir string, d time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := f.WriteAt(buf, int64(n%256)*4096); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
