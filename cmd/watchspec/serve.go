package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/impl/store"
)

const serveUsage = `Usage: watchspec serve --data-dir DIR [--listen HOST:PORT] [flags]
       watchspec serve --check --data-dir DIR
       watchspec serve --recover --data-dir DIR

Serves watchspec's reference store on the etcd v3 gRPC API (KV, Watch,
Maintenance.Status and Alarm, Cluster.MemberList), so that etcdctl and
clientv3 work against it: etcdctl --endpoints=http://127.0.0.1:2379 put a 1

The same port answers HTTP as etcd's does: /health, /livez, /readyz,
/version and Prometheus /metrics (--listen-metrics-urls serves them on
more ports). With --cert-file and --key-file it serves TLS only; with
--trusted-ca-file (and --client-cert-auth) clients need a certificate
signed by that CA. Serving plaintext on an address other than loopback
logs a warning.

The data lives in DIR: a new or empty directory starts a new store (and is
left as it was if serving cannot start). Every write is on disk before it
is acknowledged. Before serving, the whole directory is verified; a damaged
one is refused. When the disk is full, the NOSPACE alarm is raised and
puts fail with etcd's "database space exceeded" until space is freed and
the alarm disarmed (etcdctl alarm disarm); no restart is needed. Runs until
SIGINT or SIGTERM, then stops gracefully.
With --adversary SEED it is a legal adversary of watch clients: wherever
docs/SPEC.md leaves a server a choice, it takes an unusual one drawn from
SEED and logs it; on stopping it prints how often it made each kind of
choice (docs/ADVERSARY.md). Leases are served as etcd serves
them and kept in DIR: after a restart each lease has its full TTL again.
Authentication and membership changes are not supported (docs/SERVER.md).

The server logs (log/slog) to stderr: serving, stopping, alarms,
compactions, refusals. --log-format json for one JSON object a line.

--check verifies a stopped data directory and prints what it found;
--recover rebuilds a damaged one from what still verifies (the damaged
files are moved into DIR/damaged-<time>) and prints what was kept and lost.

Exit status: 0 after a signal (--check: the data is sound; --recover: it
was rebuilt); 1 if serving fails; 2 for a usage error or an address that
cannot be used; 3 if the data is damaged (the server refuses it; --check
found damage; --recover could not rebuild it); 4 if the data directory
cannot be used: locked by another process, or holding something other
than a watchspec store.

Flags:
`

// Exit codes of watchspec serve.
const (
	exitServeFailed = 1
	exitUsage       = 2
	exitDamaged     = 3
	exitUnusableDir = 4
)

// notifyStop arranges for the signals that stop `watchspec serve` to be
// sent on c; tests replace it.
var notifyStop = func(c chan<- os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watchspec serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	dataDir := fs.String("data-dir", "", "keep the store's data in `DIR` (required)")
	listen := fs.String("listen", "127.0.0.1:2379", "serve on `HOST:PORT` (port 0 picks a free one)")
	maxTxnOps := fs.Int("max-txn-ops", server.DefaultMaxTxnOps, "most comparisons or operations per branch of a transaction (etcd's --max-txn-ops)")
	maxRequestBytes := fs.Int("max-request-bytes", server.DefaultMaxRequestBytes, "largest write request in bytes (etcd's --max-request-bytes)")
	progress := fs.Duration("watch-progress-notify-interval", 10*time.Minute, "period of progress notifications for watches that ask for them (etcd's flag of the same name)")
	checkFlag := fs.Bool("check", false, "verify the stopped data directory and exit (0: sound, 3: damaged)")
	recoverFlag := fs.Bool("recover", false, "rebuild a damaged data directory from what still verifies, and exit")
	metricsURLs := fs.String("listen-metrics-urls", "", "also serve /metrics, /health, /livez and /readyz on these comma-separated `URLs` (http://HOST:PORT, or https:// with --cert-file; etcd's flag of the same name)")
	metricsLevel := fs.String("metrics", "basic", "`basic` or extensive: extensive adds the gRPC latency histograms (etcd's --metrics)")
	logLevel := fs.String("log-level", "info", "log `LEVEL`: debug, info, warn or error (etcd's --log-level)")
	logFormat := fs.String("log-format", "text", "log `FORMAT`: text (key=value lines) or json (one object a line)")
	advSeed := fs.String("adversary", "", "serve as a legal adversary of watch clients, its choices drawn from `SEED` (an integer): responses split and joined, watches held back, progress dropped or delayed, streams and connections reset — each logged; the same seed replays them (docs/ADVERSARY.md)")
	var tlsFlags serverTLSFlags
	tlsFlags.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() != 0:
		fmt.Fprintf(stderr, "watchspec serve: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	case *dataDir == "":
		fmt.Fprintln(stderr, "watchspec serve: --data-dir is required")
		fs.Usage()
		return 2
	case *maxTxnOps <= 0:
		fmt.Fprintf(stderr, "watchspec serve: --max-txn-ops must be positive, not %d\n", *maxTxnOps)
		return 2
	case *maxRequestBytes <= 0:
		fmt.Fprintf(stderr, "watchspec serve: --max-request-bytes must be positive, not %d\n", *maxRequestBytes)
		return 2
	case *progress <= 0:
		fmt.Fprintf(stderr, "watchspec serve: --watch-progress-notify-interval must be positive, not %v\n", *progress)
		return 2
	case *checkFlag && *recoverFlag:
		fmt.Fprintln(stderr, "watchspec serve: --check and --recover exclude each other")
		return 2
	case *metricsLevel != "basic" && *metricsLevel != "extensive":
		fmt.Fprintf(stderr, "watchspec serve: --metrics is basic or extensive, not %q\n", *metricsLevel)
		return 2
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec serve: %v\n", err)
		return 2
	}
	switch {
	case *checkFlag:
		return serveCheck(*dataDir, logger, stdout, stderr)
	case *recoverFlag:
		return serveRecover(*dataDir, logger, stdout, stderr)
	}
	tlsConfig, err := tlsFlags.config()
	if err != nil {
		fmt.Fprintf(stderr, "watchspec serve: %v\n", err)
		return 2
	}
	opts := server.Options{MaxTxnOps: *maxTxnOps, MaxRequestBytes: *maxRequestBytes, TLS: tlsConfig,
		Logger: logger, ExtensiveMetrics: *metricsLevel == "extensive"}
	if *metricsURLs != "" {
		opts.MetricsURLs = strings.Split(*metricsURLs, ",")
	}
	opts.Store.Watch.ProgressInterval = *progress
	var adv *server.Adversary
	if *advSeed != "" {
		seed, err := strconv.ParseInt(*advSeed, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "watchspec serve: --adversary takes an integer seed, not %q\n", *advSeed)
			return 2
		}
		adv = server.NewAdversary(seed)
		adv.Log = func(c server.Choice) {
			logger.Info("adversary "+c.Kind.String()+": "+c.Detail, "seed", c.Seed, "seq", c.Seq, "kind", c.Kind.String(),
				"spec", c.Kind.Section(), "stream", c.Stream, "watch", c.WatchID, "revision", c.Revision)
		}
		opts.Adversary = adv
		progressSet := false
		fs.Visit(func(f *flag.Flag) { progressSet = progressSet || f.Name == "watch-progress-notify-interval" })
		if !progressSet {
			opts.Store.Watch.ProgressInterval = 0 // the adversary's choice
		}
	}

	// Listen for signals before serving, so that none is missed.
	sigs := make(chan os.Signal, 1)
	notifyStop(sigs)
	defer signal.Stop(sigs)

	created := newDataDir(*dataDir)
	r, err := server.Start(*dataDir, *listen, opts)
	if err != nil {
		created.undo()
		return startFailed(*dataDir, err, logger, stderr)
	}
	attrs := []any{"endpoint", r.Endpoint(), "data-dir", *dataDir, "revision", r.Store().Revision(),
		"tls", tlsConfig != nil, "client-cert-auth", tlsConfig != nil && tlsConfig.ClientAuth == tls.RequireAndVerifyClientCert}
	if urls := r.MetricsURLs(); len(urls) > 0 {
		attrs = append(attrs, "metrics-urls", strings.Join(urls, ","))
	}
	if adv != nil {
		attrs = append(attrs, "adversary-seed", adv.Seed())
	}
	logger.Info("serving the etcd v3 API on "+r.Endpoint(), attrs...)
	select {
	case sig := <-sigs:
		logger.Info("stopping", "signal", sig.String())
		err := r.Close()
		if adv != nil {
			fmt.Fprint(stdout, adv.Report())
		}
		if err != nil {
			logger.Error("closing the store failed", "data-dir", *dataDir, "err", err)
			return exitServeFailed
		}
		logger.Info("stopped", "data-dir", *dataDir)
		return 0
	case <-r.Done():
		err := r.Err()
		r.Close()
		logger.Error("serving failed", "err", err)
		return exitServeFailed
	}
}

// newLogger returns the logger of `watchspec serve`: slog to w, in text
// or JSON, at the level given.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	switch level {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level is debug, info, warn or error, not %q", level)
	}
	ho := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	}
	return nil, fmt.Errorf("--log-format is text or json, not %q", format)
}

// startFailed logs why serving could not start, and how to go on, and
// returns the exit code.
func startFailed(dir string, err error, logger *slog.Logger, stderr io.Writer) int {
	msg := strings.TrimPrefix(err.Error(), "server: opening the store: ")
	switch {
	case errors.Is(err, store.ErrCorrupt):
		logger.Error("refusing to serve "+dir+": "+msg, "data-dir", dir, "exit", exitDamaged)
		fmt.Fprintf(stderr, "watchspec serve: run 'watchspec serve --check --data-dir %s' for the full report, and 'watchspec serve --recover --data-dir %s' to keep what can be recovered (docs/SERVER.md, \"Damaged data\")\n", dir, dir)
		return exitDamaged
	case errors.Is(err, store.ErrLocked), errors.Is(err, store.ErrNotStore):
		logger.Error("cannot use "+dir+": "+msg, "data-dir", dir, "exit", exitUnusableDir)
		return exitUnusableDir
	}
	logger.Error("cannot serve: "+strings.TrimPrefix(msg, "server: "), "data-dir", dir, "exit", exitUsage)
	return exitUsage
}

// serveCheck runs --check.
func serveCheck(dir string, logger *slog.Logger, stdout, stderr io.Writer) int {
	rep, err := store.Check(dir)
	if err != nil {
		return startFailed(dir, err, logger, stderr)
	}
	fmt.Fprint(stdout, rep)
	if !rep.OK() {
		fmt.Fprintf(stderr, "watchspec serve: %s is damaged; 'watchspec serve --recover --data-dir %s' keeps what can be recovered\n", dir, dir)
		return exitDamaged
	}
	return 0
}

// serveRecover runs --recover.
func serveRecover(dir string, logger *slog.Logger, stdout, stderr io.Writer) int {
	rep, err := store.Recover(dir)
	if err != nil {
		if errors.Is(err, store.ErrLocked) || errors.Is(err, store.ErrNotStore) {
			return startFailed(dir, err, logger, stderr)
		}
		fmt.Fprintf(stderr, "watchspec serve: recover %s: %v\n", dir, err)
		return exitDamaged
	}
	fmt.Fprint(stdout, rep)
	fmt.Fprintf(stderr, "watchspec serve: %s rebuilt; serve it again without --recover\n", dir)
	return 0
}

// createdDir remembers what a start may create in a data directory that
// is new or empty, so that a start that fails leaves it as it was.
type createdDir struct {
	remove string // the topmost directory that did not exist, or "" if none
	empty  string // a directory that existed and was empty, or ""
}

func newDataDir(dir string) createdDir {
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil && len(entries) == 0:
		return createdDir{empty: dir}
	case errors.Is(err, os.ErrNotExist):
		top := filepath.Clean(dir)
		for {
			parent := filepath.Dir(top)
			if parent == top {
				break
			}
			if _, err := os.Stat(parent); err == nil {
				break
			}
			top = parent
		}
		return createdDir{remove: top}
	}
	return createdDir{}
}

func (c createdDir) undo() {
	if c.remove != "" {
		os.RemoveAll(c.remove)
	}
	if c.empty != "" {
		entries, _ := os.ReadDir(c.empty)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(c.empty, e.Name()))
		}
	}
}
