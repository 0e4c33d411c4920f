// Command kine serves kine (github.com/k3s-io/kine, the version
// tests/kinetest pins) over SQLite on a loopback port, as the tests of
// tests/kine start it, so that any etcd-v3 client can be pointed at it by
// hand — above all `watchspec conform`:
//
//	cd tests && go run ./cmd/kine &
//	# it prints: kine 0.17.5 serving at http://127.0.0.1:PORT (data in DIR)
//	cd .. && go run ./cmd/watchspec conform --endpoints http://127.0.0.1:PORT --profile kine
//
// With --client-compaction kine acts on clients' compactions: check it
// under --profile kine-compacting.
// docs/FINDINGS.md says what such runs find. It stops on SIGINT or SIGTERM
// and removes the data directory it made (--dir keeps yours).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/watchspec/watchspec/tests/kinetest"
)

func main() {
	var opts kinetest.Options
	flag.StringVar(&opts.Dir, "dir", "", "directory for the SQLite database (default: a new temporary directory, removed on exit)")
	flag.BoolVar(&opts.ClientCompaction, "client-compaction", false, "act on clients' compaction requests (kine's Kubernetes test setup); by default kine acknowledges them without compacting")
	flag.DurationVar(&opts.NotifyInterval, "notify-interval", 500*time.Millisecond, "kine's watch progress-notify interval")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kine: unexpected arguments %q (see -h)\n", flag.Args())
		os.Exit(2)
	}
	s, err := kinetest.Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kine: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kine %s serving at %s (data in %s)\n", kinetest.Version, s.Endpoints[0], s.Dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if err := s.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "kine: closing: %v\n", err)
		os.Exit(1)
	}
	if f := kinetest.Fatals(); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "kine logged fatal errors: %q\n", f)
		os.Exit(1)
	}
}
