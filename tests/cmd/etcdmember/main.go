// Command etcdmember runs one etcd member (go.etcd.io/etcd/server/v3/embed,
// the version this module's go.mod pins and the root module's
// internal/etcdtest names) from flags. internal/etcdtest builds it once and
// runs every member of its clusters as a child process, so that the root
// module (what third parties import) does not link etcd's server, and so
// that a test can kill a member for real (SIGKILL: no graceful shutdown, no
// fsync beyond what etcd already did). It prints "ready" on stdout once the
// member serves clients, and closes the member gracefully on SIGTERM or
// SIGINT.
//
// It is not meant to be run by hand, though it can be (from tests/):
//
//	go run ./cmd/etcdmember --name m0 --data-dir /tmp/m0 \
//	    --client http://127.0.0.1:2379 --peer http://127.0.0.1:2380 \
//	    --initial-cluster m0=http://127.0.0.1:2380
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// member is what one member needs.
type member struct {
	name, dir          string
	clientURL, peerURL string
	// initialCluster is name=peerURL,... of every member.
	initialCluster string
	// existing restarts a member of a cluster that already exists.
	existing               bool
	progressNotifyInterval time.Duration
}

func main() {
	var m member
	flag.StringVar(&m.name, "name", "m0", "member name")
	flag.StringVar(&m.dir, "data-dir", "", "data directory (required)")
	flag.StringVar(&m.clientURL, "client", "", "client URL to listen on and advertise (required)")
	flag.StringVar(&m.peerURL, "peer", "", "peer URL to listen on and advertise (required)")
	flag.StringVar(&m.initialCluster, "initial-cluster", "", "name=peerURL,... of every member (required)")
	flag.BoolVar(&m.existing, "existing", false, "join the cluster as it is (a restart), rather than bootstrapping it")
	flag.DurationVar(&m.progressNotifyInterval, "progress-notify-interval", 0, "watch progress-notify interval (0: etcd's default)")
	flag.Parse()
	if m.dir == "" || m.clientURL == "" || m.peerURL == "" || m.initialCluster == "" {
		fmt.Fprintln(os.Stderr, "etcdmember: --data-dir, --client, --peer and --initial-cluster are required")
		os.Exit(2)
	}
	e, err := start(m)
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

// start starts the member and waits until it serves clients (at most a
// minute).
func start(m member) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	client, err := url.Parse(m.clientURL)
	if err != nil {
		return nil, fmt.Errorf("--client: %v", err)
	}
	peer, err := url.Parse(m.peerURL)
	if err != nil {
		return nil, fmt.Errorf("--peer: %v", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = m.initialCluster
	if m.existing {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"/dev/null"}
	if m.progressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = m.progressNotifyInterval
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd member %s: %v", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd member %s failed: %v", m.name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd member %s did not become ready within 60s", m.name)
	}
}
