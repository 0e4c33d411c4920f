// Package etcdtest starts real etcd servers (go.etcd.io/etcd/server/v3/embed)
// in-process on loopback ports, for tests and for recording traces.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Version is the etcd version these servers run.
const Version = "3.7.3"

// Cluster is a running etcd cluster.
type Cluster struct {
	// Endpoints are the members' client URLs.
	Endpoints []string
	members   []*member
	tempDir   string // removed by Close when Start made it
}

type member struct {
	cfg *embed.Config
	e   *embed.Etcd
}

// Options shape a cluster.
type Options struct {
	// Members is the cluster size (default 1).
	Members int
	// Dir holds the members' data (default: a new temporary directory,
	// removed by Close).
	Dir string
	// ProgressNotifyInterval, when set, is the watch progress-notify interval.
	ProgressNotifyInterval time.Duration
}

// freePorts reserves n loopback ports (released just before etcd binds them).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Start starts a cluster and waits until it serves.
func Start(opts Options) (*Cluster, error) {
	if opts.Members == 0 {
		opts.Members = 1
	}
	dir, tempDir := opts.Dir, ""
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "etcdtest-"); err != nil {
			return nil, err
		}
		tempDir = dir
	}
	ports, err := freePorts(2 * opts.Members)
	if err != nil {
		return nil, err
	}
	var initial []string
	cfgs := make([]*embed.Config, opts.Members)
	for i := range cfgs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = fmt.Sprintf("%s/%s", dir, cfg.Name)
		client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
		cfg.TickMs, cfg.ElectionMs = 10, 100
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{"/dev/null"}
		if opts.ProgressNotifyInterval > 0 {
			cfg.WatchProgressNotifyInterval = opts.ProgressNotifyInterval
		}
		initial = append(initial, fmt.Sprintf("%s=%s", cfg.Name, peer))
		cfgs[i] = cfg
	}
	c := &Cluster{tempDir: tempDir}
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		c.Endpoints = append(c.Endpoints, cfg.ListenClientUrls[0].String())
		c.members = append(c.members, &member{cfg: cfg})
	}
	if err := c.startAll(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startAll() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startMember(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startMember(i int) error {
	m := c.members[i]
	e, err := embed.StartEtcd(m.cfg)
	if err != nil {
		return fmt.Errorf("starting etcd member %s: %v", m.cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		m.e = e
		return nil
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd member %s failed: %v", m.cfg.Name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("etcd member %s did not become ready within 60s", m.cfg.Name)
	}
}

// Restart stops member i and starts it again on the same data directory.
func (c *Cluster) Restart(i int) error {
	m := c.members[i]
	if m.e != nil {
		m.e.Close()
		m.e = nil
	}
	m.cfg.ClusterState = embed.ClusterStateFlagExisting
	return c.startMember(i)
}

// Close stops every member (in parallel) and removes temporary data.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		if m.e == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.e.Close()
		}()
	}
	wg.Wait()
	if c.tempDir != "" {
		os.RemoveAll(c.tempDir)
	}
}
