// Package etcdtest starts real etcd clusters (etcd [Version]) on loopback
// ports, for tests and for recording traces. Each member runs as a child
// process: the etcdmember command of the tests module (tests/cmd/etcdmember,
// go.etcd.io/etcd/server/v3/embed), built once with the go command and kept
// in the user's cache directory, keyed by a hash of its sources, so that
// this module — the one third parties import — does not link or require
// etcd's server. [Cluster.Kill] SIGKILLs a member: a real crash.
//
// It needs a checkout of the repository (the tests module beside this
// package's source) and the go command on PATH.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Version is the etcd version these servers run.
const Version = "3.7.3"

// Cluster is a running etcd cluster.
type Cluster struct {
	// Endpoints are the members' client URLs.
	Endpoints []string
	members   []*member
	opts      Options
	tempDir   string // removed by Close when Start made it
	bin       string // the etcdmember binary
}

type member struct {
	mu  sync.Mutex
	cfg MemberConfig
	p   *process // the running member, nil when stopped
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
	// Processes is kept so that older callers compile: every member runs
	// as a child process (and can be killed) whether it is set or not.
	Processes bool
}

// MemberConfig is what one member needs; the etcdmember command takes it
// as flags.
type MemberConfig struct {
	Name, Dir          string
	ClientURL, PeerURL string
	// InitialCluster is name=peerURL,... of every member.
	InitialCluster string
	// Existing restarts a member of a cluster that already exists.
	Existing               bool
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

// Start starts a cluster and waits until every member serves.
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
	c := &Cluster{tempDir: tempDir, opts: opts}
	bin, err := memberBinary()
	if err != nil {
		c.Close()
		return nil, err
	}
	c.bin = bin
	ports, err := freePorts(2 * opts.Members)
	if err != nil {
		c.Close()
		return nil, err
	}
	var initial []string
	for i := range opts.Members {
		m := MemberConfig{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]), ProgressNotifyInterval: opts.ProgressNotifyInterval}
		m.Dir = fmt.Sprintf("%s/%s", dir, m.Name)
		initial = append(initial, fmt.Sprintf("%s=%s", m.Name, m.PeerURL))
		c.members = append(c.members, &member{cfg: m})
		c.Endpoints = append(c.Endpoints, m.ClientURL)
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
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
		wg.Go(func() { errs[i] = c.Start(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Start starts member i again after Kill or Stop (on its data directory),
// and waits until it serves. It does nothing to a running member.
func (c *Cluster) Start(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p != nil {
		return nil
	}
	p, err := startProcess(c.bin, m.cfg)
	if err != nil {
		return err
	}
	m.p = p
	// From now on it rejoins the cluster it bootstrapped.
	m.cfg.Existing = true
	return nil
}

// Stop stops member i gracefully (SIGTERM, so that etcd closes; SIGKILL
// when it has not exited within 20 s).
func (c *Cluster) Stop(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil {
		return nil
	}
	err := m.p.stop()
	m.p = nil
	return err
}

// Kill kills member i with SIGKILL: it stops at once, without closing its
// files or telling its peers.
func (c *Cluster) Kill(i int) error {
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("etcdtest: no member %d in a cluster of %d", i, len(c.members))
	}
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil {
		return nil
	}
	err := m.p.kill()
	m.p = nil
	return err
}

// Restart stops member i gracefully and starts it again on the same data
// directory.
func (c *Cluster) Restart(i int) error {
	if err := c.Stop(i); err != nil {
		return err
	}
	return c.Start(i)
}

// Leader returns the index of the member that is the leader, as the
// members that answer see it, or -1 when none answers with one.
func (c *Cluster) Leader(ctx context.Context) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return -1
	}
	defer cli.Close()
	ids := make([]uint64, len(c.Endpoints))
	var leader uint64
	for i, ep := range c.Endpoints {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		ids[i] = st.Header.MemberId
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	for i, id := range ids {
		if id != 0 && id == leader {
			return i
		}
	}
	return -1
}

// KillOrRestart disrupts one member, as a test of clients riding through
// failures does, and says what it did: with kill, it kills a member
// (SIGKILL; the leader when leader is set and one is known) and starts it
// again after down; otherwise it restarts one gracefully. rng picks the
// member.
func (c *Cluster) KillOrRestart(ctx context.Context, rng *rand.Rand, kill, leader bool, down time.Duration) (string, error) {
	i, who := rng.IntN(len(c.members)), ""
	if leader {
		if l := c.Leader(ctx); l >= 0 {
			i, who = l, " (the leader)"
		}
	}
	name := c.members[i].cfg.Name
	if !kill {
		return fmt.Sprintf("restarted member %s%s gracefully", name, who), c.Restart(i)
	}
	if err := c.Kill(i); err != nil {
		return "", err
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	return fmt.Sprintf("killed member %s%s (SIGKILL), started again after %v", name, who, down), c.Start(i)
}

// Close stops every member (in parallel, killing processes that do not stop
// within 20 s) and removes temporary data.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for i := range c.members {
		wg.Go(func() { c.Stop(i) })
	}
	wg.Wait()
	if c.tempDir != "" {
		os.RemoveAll(c.tempDir)
	}
}
