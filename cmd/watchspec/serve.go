package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/watchspec/watchspec/impl/server"
)

const serveUsage = `Usage: watchspec serve --data-dir DIR [--listen HOST:PORT] [flags]

Serves watchspec's reference store on the etcd v3 gRPC API (KV, Watch,
Maintenance.Status, Cluster.MemberList), so that etcdctl and clientv3 work
against it: etcdctl --endpoints=http://127.0.0.1:2379 put a 1

The data lives in DIR (created if needed); every write is on disk before
it is acknowledged. Runs until SIGINT or SIGTERM, then stops
gracefully. Leases, authentication, TLS and membership changes are not
supported (docs/SERVER.md).

Exit status: 0 after a signal; 1 if serving fails; 2 for a usage error or
a data directory or address that cannot be used.

Flags:
`

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
	}
	opts := server.Options{MaxTxnOps: *maxTxnOps, MaxRequestBytes: *maxRequestBytes}
	opts.Store.Watch.ProgressInterval = *progress

	// Listen for signals before serving, so that none is missed.
	sigs := make(chan os.Signal, 1)
	notifyStop(sigs)
	defer signal.Stop(sigs)

	r, err := server.Start(*dataDir, *listen, opts)
	if err != nil {
		fmt.Fprintf(stderr, "watchspec serve: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "watchspec serve: serving the etcd v3 API on %s (data in %s, revision %d)\n",
		r.Endpoint(), *dataDir, r.Store().Revision())
	select {
	case sig := <-sigs:
		fmt.Fprintf(stderr, "watchspec serve: %v: stopping\n", sig)
		if err := r.Close(); err != nil {
			fmt.Fprintf(stderr, "watchspec serve: closing the store: %v\n", err)
			return 1
		}
		fmt.Fprintln(stderr, "watchspec serve: stopped")
		return 0
	case <-r.Done():
		err := r.Err()
		r.Close()
		fmt.Fprintf(stderr, "watchspec serve: serving failed: %v\n", err)
		return 1
	}
}
