package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveProcess runs `watchspec serve` in the test process with a signal
// channel the test controls.
type serveProcess struct {
	stderr *syncBuffer
	sigs   chan<- os.Signal
	code   chan int
}

var notifyMu sync.Mutex // serializes tests that replace notifyStop

func startServe(t *testing.T, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{stderr: &syncBuffer{}, code: make(chan int, 1)}
	registered := make(chan chan<- os.Signal, 1)
	notifyMu.Lock()
	old := notifyStop
	notifyStop = func(c chan<- os.Signal) { registered <- c }
	go func() { p.code <- run(append([]string{"serve"}, args...), &bytes.Buffer{}, p.stderr) }()
	select {
	case p.sigs = <-registered:
	case code := <-p.code:
		notifyStop = old
		notifyMu.Unlock()
		t.Fatalf("watchspec serve exited %d at once: %s", code, p.stderr)
	}
	notifyStop = old
	notifyMu.Unlock()
	return p
}

var endpointRE = regexp.MustCompile(`serving the etcd v3 API on (http://\S+)`)

// endpoint waits for the line that announces the endpoint.
func (p *serveProcess) endpoint(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := endpointRE.FindStringSubmatch(p.stderr.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-p.code:
			t.Fatalf("watchspec serve exited %d: %s", code, p.stderr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("watchspec serve announced no endpoint: %s", p.stderr)
	return ""
}

func (p *serveProcess) stop(t *testing.T) int {
	t.Helper()
	p.sigs <- os.Interrupt
	select {
	case code := <-p.code:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("watchspec serve did not stop on SIGINT: %s", p.stderr)
		return -1
	}
}

// TestServe runs `watchspec serve`, writes through the real etcd client,
// stops it with SIGINT (exit 0), serves the same data directory again on
// the same address and reads the write back: acknowledged writes survive
// the stop, and the address is free again at once.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
	ep := p.endpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put, err := cli.Put(ctx, "greeting", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0: %s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "stopped") {
		t.Errorf("no stop message: %s", p.stderr)
	}

	p = startServe(t, "--data-dir", dir, "--listen", strings.TrimPrefix(ep, "http://"))
	if again := p.endpoint(t); again != ep {
		t.Fatalf("restarted on %s, want %s", again, ep)
	}
	defer p.stop(t)
	cli2, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	g, err := cli2.Get(ctx, "greeting")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "hello" || g.Kvs[0].ModRevision != put.Header.Revision || g.Header.Revision != put.Header.Revision {
		t.Errorf("after the restart: %v at revision %d, want greeting=hello written at %d", g.Kvs, g.Header.Revision, put.Header.Revision)
	}
}

// TestServeUsage checks the command line: a usage error or an address or
// directory that cannot be used exits 2 with a message saying so.
func TestServeUsage(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	file := t.TempDir() + "/file"
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "--data-dir is required"},
		{[]string{"serve", "--nope"}, "flag provided but not defined"},
		{[]string{"serve", "--data-dir", t.TempDir(), "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "--data-dir", t.TempDir(), "--max-txn-ops", "0"}, "--max-txn-ops must be positive"},
		{[]string{"serve", "--data-dir", t.TempDir(), "--max-request-bytes", "-1"}, "--max-request-bytes must be positive"},
		{[]string{"serve", "--data-dir", t.TempDir(), "--listen", busy.Addr().String()}, "address already in use"},
		{[]string{"serve", "--data-dir", t.TempDir(), "--listen", "nohost:xyz"}, "watchspec serve:"},
		{[]string{"serve", "--data-dir", file}, "opening the store"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("watchspec %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if code, _, stderr := runCLI("serve", "-h"); code != 0 || !strings.Contains(stderr, "Usage: watchspec serve") {
		t.Errorf("serve -h: exit %d, %q", code, stderr)
	}
}
