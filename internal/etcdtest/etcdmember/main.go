// Command etcdmember runs one etcd member (go.etcd.io/etcd/server/v3/embed,
// the version internal/etcdtest names) from flags, so that a test can run a
// cluster's members as child processes and kill one for real (SIGKILL: no
// graceful shutdown, no fsync beyond what etcd already did). It prints
// "ready" on stdout once the member serves clients, and closes the member
// gracefully on SIGTERM or SIGINT.
//
// internal/etcdtest builds and starts it (Options.Processes); it is not meant
// to be run by hand, though it can be:
//
//	go run ./internal/etcdtest/etcdmember --name m0 --data-dir /tmp/m0 \
//	    --client http://127.0.0.1:2379 --peer http://127.0.0.1:2380 \
//	    --initial-cluster m0=http://127.0.0.1:2380
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/watchspec/watchspec/internal/etcdtest"
)

func main() {
	var m etcdtest.MemberConfig
	flag.StringVar(&m.Name, "name", "m0", "member name")
	flag.StringVar(&m.Dir, "data-dir", "", "data directory (required)")
	flag.StringVar(&m.ClientURL, "client", "", "client URL to listen on and advertise (required)")
	flag.StringVar(&m.PeerURL, "peer", "", "peer URL to listen on and advertise (required)")
	flag.StringVar(&m.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member (required)")
	flag.BoolVar(&m.Existing, "existing", false, "join the cluster as it is (a restart), rather than bootstrapping it")
	flag.DurationVar(&m.ProgressNotifyInterval, "progress-notify-interval", 0, "watch progress-notify interval (0: etcd's default)")
	flag.Parse()
	if m.Dir == "" || m.ClientURL == "" || m.PeerURL == "" || m.InitialCluster == "" {
		fmt.Fprintln(os.Stderr, "etcdmember: --data-dir, --client, --peer and --initial-cluster are required")
		os.Exit(2)
	}
	e, err := etcdtest.StartMember(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcdmember: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		e.Close()
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcdmember: %v\n", err)
		e.Close()
		os.Exit(1)
	}
}
