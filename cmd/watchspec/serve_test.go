package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watchspec/watchspec/impl/store"

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
	stdout *syncBuffer
	stderr *syncBuffer
	sigs   chan<- os.Signal
	code   chan int
}

var notifyMu sync.Mutex // serializes tests that replace notifyStop

func startServe(t *testing.T, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{stdout: &syncBuffer{}, stderr: &syncBuffer{}, code: make(chan int, 1)}
	registered := make(chan chan<- os.Signal, 1)
	notifyMu.Lock()
	old := notifyStop
	notifyStop = func(c chan<- os.Signal) { registered <- c }
	go func() { p.code <- run(append([]string{"serve"}, args...), p.stdout, p.stderr) }()
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

var endpointRE = regexp.MustCompile(`serving the etcd v3 API on (https?://[^\s"]+)`)

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

// TestServeUsage checks the command line: a usage error or an address that
// cannot be used exits 2 with a message saying so.
func TestServeUsage(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
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
		{[]string{"serve", "--data-dir", t.TempDir(), "--listen", "nohost:xyz"}, "cannot serve: listen tcp"},
		{[]string{"serve", "--data-dir", t.TempDir(), "--check", "--recover"}, "exclude each other"},
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

// Issue 17: a data directory that holds something other than a watchspec
// store, or that another process holds, exits 4 at once with a message that
// says so, and is left as it was.
func TestServeUnusableDirectory(t *testing.T) {
	mk := func(setup func(dir string)) string {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		setup(dir)
		return dir
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tc := range []struct {
		dir  string
		want string
	}{
		{mk(func(d string) { os.MkdirAll(filepath.Join(d, "member", "snap"), 0o755) }), "etcd data directory (member/)"},
		{mk(func(d string) { os.WriteFile(filepath.Join(d, "mvcc.db"), nil, 0o644) }), "the file is empty (0 bytes)"},
		{mk(func(d string) { os.WriteFile(filepath.Join(d, "README"), []byte("x"), 0o644) }), "holds no store (README)"},
		{file, "is a file, not a directory"},
	} {
		before, _ := os.ReadDir(tc.dir)
		for _, extra := range [][]string{nil, {"--check"}, {"--recover"}} {
			args := append([]string{"serve", "--data-dir", tc.dir, "--listen", "127.0.0.1:0"}, extra...)
			code, _, stderr := runCLI(args...)
			if code != exitUnusableDir || !strings.Contains(stderr, tc.want) {
				t.Errorf("watchspec %v: exit %d, stderr %q; want exit %d and %q", args, code, stderr, exitUnusableDir, tc.want)
			}
		}
		if after, _ := os.ReadDir(tc.dir); len(after) != len(before) {
			t.Errorf("%s changed: %v, then %v", tc.dir, before, after)
		}
	}

	// Locked: a second server on a directory in use is told so at once.
	dir := t.TempDir()
	p := startServe(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
	p.endpoint(t)
	defer p.stop(t)
	for _, extra := range [][]string{nil, {"--check"}} {
		args := append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0"}, extra...)
		if code, _, stderr := runCLI(args...); code != exitUnusableDir || !strings.Contains(stderr, "locked by another process") {
			t.Errorf("watchspec %v on a directory in use: exit %d, %q", args, code, stderr)
		}
	}
}

// Issue 17: a start that fails (here: the address is in use) leaves a new
// or empty data directory as it was: no empty store behind.
func TestServeFailedStartLeavesNoStore(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	missing := filepath.Join(t.TempDir(), "a", "b")
	empty := t.TempDir()
	for _, dir := range []string{missing, empty} {
		if code, _, stderr := runCLI("serve", "--data-dir", dir, "--listen", busy.Addr().String()); code != exitUsage || !strings.Contains(stderr, "address already in use") {
			t.Fatalf("exit %d, %q", code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed start left %s behind: %v", filepath.Dir(missing), err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("a failed start left %v in the empty directory", entries)
	}
}

// Issue 17: damaged data is refused (exit 3) with a message naming the
// file, the damage and what can still be trusted; --check reports it (exit
// 3); --recover rebuilds the directory from what verifies (exit 0), after
// which it checks and serves again.
func TestServeDamagedData(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := st.Put(context.Background(), store.PutRequest{Key: fmt.Sprintf("k%03d", i), Value: strings.Repeat("v", 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	data := filepath.Join(dir, "mvcc.db")
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, b[:128<<10], 0o600); err != nil { // issue 17: cut to 128 KiB
		t.Fatal(err)
	}
	code, _, stderr := runCLI("serve", "--data-dir", dir, "--listen", "127.0.0.1:0")
	for _, want := range []string{"refusing to serve", data, "cut short", "What can still be trusted", "--recover"} {
		if code != exitDamaged || !strings.Contains(stderr, want) {
			t.Fatalf("serve on damaged data: exit %d, stderr %q; want exit %d and %q", code, stderr, exitDamaged, want)
		}
	}
	if strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "panic") {
		t.Fatalf("serve on damaged data panicked: %s", stderr)
	}
	code, stdout, _ := runCLI("serve", "--check", "--data-dir", dir)
	if code != exitDamaged || !strings.Contains(stdout, "DAMAGED") {
		t.Fatalf("--check on damaged data: exit %d, %q", code, stdout)
	}
	code, stdout, stderr = runCLI("serve", "--recover", "--data-dir", dir)
	if code != 0 || !strings.Contains(stdout, "recovered") || !strings.Contains(stdout, "damaged-") {
		t.Fatalf("--recover: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	t.Logf("--recover said:\n%s", stdout)
	if code, stdout, _ := runCLI("serve", "--check", "--data-dir", dir); code != 0 || !strings.Contains(stdout, "OK") {
		t.Fatalf("--check after --recover: exit %d, %q", code, stdout)
	}
	p := startServe(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
	p.endpoint(t)
	if code := p.stop(t); code != 0 {
		t.Fatalf("serving the recovered directory: exit %d: %s", code, p.stderr)
	}
}
