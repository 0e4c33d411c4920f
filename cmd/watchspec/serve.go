package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
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
Maintenance.Status, Cluster.MemberList), so that etcdctl and clientv3 work
against it: etcdctl --endpoints=http://127.0.0.1:2379 put a 1

The data lives in DIR: a new or empty directory starts a new store (and is
left as it was if serving cannot start). Every write is on disk before it
is acknowledged. Before serving, the whole directory is verified; a damaged
one is refused. Runs until SIGINT or SIGTERM, then stops gracefully.
Leases, authentication, TLS and membership changes are not supported
(docs/SERVER.md).

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
	}
	switch {
	case *checkFlag:
		return serveCheck(*dataDir, stdout, stderr)
	case *recoverFlag:
		return serveRecover(*dataDir, stdout, stderr)
	}
	opts := server.Options{MaxTxnOps: *maxTxnOps, MaxRequestBytes: *maxRequestBytes}
	opts.Store.Watch.ProgressInterval = *progress

	// Listen for signals before serving, so that none is missed.
	sigs := make(chan os.Signal, 1)
	notifyStop(sigs)
	defer signal.Stop(sigs)

	created := newDataDir(*dataDir)
	r, err := server.Start(*dataDir, *listen, opts)
	if err != nil {
		created.undo()
		return startFailed(*dataDir, err, stderr)
	}
	fmt.Fprintf(stderr, "watchspec serve: serving the etcd v3 API on %s (data in %s, revision %d)\n",
		r.Endpoint(), *dataDir, r.Store().Revision())
	select {
	case sig := <-sigs:
		fmt.Fprintf(stderr, "watchspec serve: %v: stopping\n", sig)
		if err := r.Close(); err != nil {
			fmt.Fprintf(stderr, "watchspec serve: closing the store: %v\n", err)
			return exitServeFailed
		}
		fmt.Fprintln(stderr, "watchspec serve: stopped")
		return 0
	case <-r.Done():
		err := r.Err()
		r.Close()
		fmt.Fprintf(stderr, "watchspec serve: serving failed: %v\n", err)
		return exitServeFailed
	}
}

// startFailed says why serving could not start, and how to go on.
func startFailed(dir string, err error, stderr io.Writer) int {
	msg := strings.TrimPrefix(err.Error(), "server: opening the store: ")
	switch {
	case errors.Is(err, store.ErrCorrupt):
		fmt.Fprintf(stderr, "watchspec serve: refusing to serve %s: %s\n", dir, msg)
		fmt.Fprintf(stderr, "watchspec serve: run 'watchspec serve --check --data-dir %s' for the full report, and 'watchspec serve --recover --data-dir %s' to keep what can be recovered (docs/SERVER.md, \"Damaged data\")\n", dir, dir)
		return exitDamaged
	case errors.Is(err, store.ErrLocked), errors.Is(err, store.ErrNotStore):
		fmt.Fprintf(stderr, "watchspec serve: cannot use %s: %s\n", dir, msg)
		return exitUnusableDir
	}
	fmt.Fprintf(stderr, "watchspec serve: %v\n", err)
	return exitUsage
}

// serveCheck runs --check.
func serveCheck(dir string, stdout, stderr io.Writer) int {
	rep, err := store.Check(dir)
	if err != nil {
		return startFailed(dir, err, stderr)
	}
	fmt.Fprint(stdout, rep)
	if !rep.OK() {
		fmt.Fprintf(stderr, "watchspec serve: %s is damaged; 'watchspec serve --recover --data-dir %s' keeps what can be recovered\n", dir, dir)
		return exitDamaged
	}
	return 0
}

// serveRecover runs --recover.
func serveRecover(dir string, stdout, stderr io.Writer) int {
	rep, err := store.Recover(dir)
	if err != nil {
		if errors.Is(err, store.ErrLocked) || errors.Is(err, store.ErrNotStore) {
			return startFailed(dir, err, stderr)
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
