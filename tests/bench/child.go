package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/watchspec/watchspec/impl/server"
)

// The kinds of server a child runs.
const (
	KindReference = "reference"
	KindEtcd      = "etcd"
)

// ChildUsage documents the hidden server subcommand.
const ChildUsage = `Usage: watchspec bench-server --kind reference|etcd --dir DIR [--listen HOST:PORT]

Internal to 'watchspec bench': serves one server under test in this process,
prints "ready ENDPOINT" on stdout, then answers one command per line on
stdin, one line each on stdout:

  mem                 runtime.GC(), then "ok HEAPALLOC STACKINUSE" (bytes)
  cpu                 "ok SECONDS": this process's user+system CPU time
  profile-start FILE  start a CPU profile into FILE
  profile-stop        stop it
  quit                stop the server and exit (so does the end of stdin)
`

// ServeChild is the hidden `watchspec bench-server` subcommand: it runs a
// reference server or an embedded etcd in this process and answers the
// driver's commands (see [ChildUsage]). It returns the exit code.
func ServeChild(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watchspec bench-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ChildUsage) }
	kind := fs.String("kind", "", "reference or etcd")
	dir := fs.String("dir", "", "data directory")
	listen := fs.String("listen", "127.0.0.1:0", "client address")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" || fs.NArg() != 0 || (*kind != KindReference && *kind != KindEtcd) {
		fs.Usage()
		return 2
	}
	var endpoint string
	var stop func()
	switch *kind {
	case KindReference:
		r, err := server.Start(*dir, *listen, server.Options{})
		if err != nil {
			fmt.Fprintf(stderr, "bench-server: %v\n", err)
			return 1
		}
		endpoint, stop = r.Endpoint(), func() { r.Close() }
	case KindEtcd:
		e, ep, err := startEtcd(*dir, *listen)
		if err != nil {
			fmt.Fprintf(stderr, "bench-server: %v\n", err)
			return 1
		}
		endpoint, stop = ep, e.Close
	}
	defer stop()
	out := bufio.NewWriter(stdout)
	fmt.Fprintf(out, "ready %s\n", endpoint)
	out.Flush()
	in := bufio.NewScanner(stdin)
	var prof *os.File
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		reply := "ok"
		switch f[0] {
		case "mem":
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			reply = fmt.Sprintf("ok %d %d", ms.HeapAlloc, ms.StackInuse)
		case "cpu":
			reply = fmt.Sprintf("ok %.6f", processCPU().Seconds())
		case "profile-start":
			if len(f) != 2 || prof != nil {
				reply = "err usage: profile-start FILE (one at a time)"
				break
			}
			p, err := os.Create(f[1])
			if err == nil {
				err = pprof.StartCPUProfile(p)
			}
			if err != nil {
				reply = "err " + err.Error()
				break
			}
			prof = p
		case "profile-stop":
			if prof != nil {
				pprof.StopCPUProfile()
				prof.Close()
				prof = nil
			}
		case "quit":
			fmt.Fprintln(out, reply)
			out.Flush()
			return 0
		default:
			reply = "err unknown command " + strconv.Quote(f[0])
		}
		fmt.Fprintln(out, reply)
		out.Flush()
	}
	return 0
}

// processCPU returns the user and system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startEtcd starts a one-member etcd with etcd's defaults (fsync on, 100 ms
// ticks), but for loopback URLs and quiet logs, and waits until it serves.
func startEtcd(dir, listen string) (*embed.Etcd, string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, "", err
	}
	ports, err := freePorts(host, 2)
	if err != nil {
		return nil, "", err
	}
	if port == "0" {
		port = ports[1]
	}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	client := url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort(host, ports[0])}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("starting etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, client.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("etcd failed: %v", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("etcd did not become ready within 60s")
	}
}

// freePorts reserves n ports on host, released before returning.
func freePorts(host string, n int) ([]string, error) {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		defer l.Close()
		_, p, _ := net.SplitHostPort(l.Addr().String())
		ports = append(ports, p)
	}
	return ports, nil
}

// child is the driver's handle on a server child process.
type child struct {
	kind     string
	dir      string
	endpoint string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out      *bufio.Reader
	stderr   *tailBuffer

	mu sync.Mutex
}

// startChild starts `argv... --kind kind --dir dir` and waits for it to
// serve.
func startChild(ctx context.Context, argv []string, kind, dir string) (*child, error) {
	if len(argv) == 0 {
		return nil, errors.New("bench: no command to start a server child")
	}
	args := append(append([]string(nil), argv[1:]...), "--kind", kind, "--dir", dir, "--listen", "127.0.0.1:0")
	cmd := exec.Command(argv[0], args...)
	cmd.Env = os.Environ()
	c := &child{kind: kind, dir: dir, cmd: cmd, stderr: &tailBuffer{max: 8 << 10}}
	cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s server child: %v", kind, err)
	}
	line, err := c.readLine(ctx, 90*time.Second)
	if err != nil || !strings.HasPrefix(line, "ready ") {
		c.kill()
		return nil, fmt.Errorf("the %s server child did not start (%q, %v): %s", kind, line, err, c.stderr.String())
	}
	c.endpoint = strings.TrimPrefix(line, "ready ")
	return c, nil
}

func (c *child) readLine(ctx context.Context, timeout time.Duration) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := c.out.ReadString('\n')
		ch <- result{strings.TrimSpace(l), err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-t.C:
		return "", fmt.Errorf("no answer within %v", timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// call sends one command and returns the fields of its "ok" answer.
func (c *child) call(ctx context.Context, cmd string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return nil, fmt.Errorf("%s server child: %s: %v: %s", c.kind, cmd, err, c.stderr.String())
	}
	line, err := c.readLine(ctx, 60*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%s server child: %s: %v: %s", c.kind, cmd, err, c.stderr.String())
	}
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "ok" {
		return nil, fmt.Errorf("%s server child: %s: %s", c.kind, cmd, line)
	}
	return f[1:], nil
}

// heap returns the child's HeapAlloc and StackInuse after a GC.
func (c *child) heap(ctx context.Context) (heap, stack int64, err error) {
	f, err := c.call(ctx, "mem")
	if err != nil {
		return 0, 0, err
	}
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("%s server child: mem: %v", c.kind, f)
	}
	heap, err1 := strconv.ParseInt(f[0], 10, 64)
	stack, err2 := strconv.ParseInt(f[1], 10, 64)
	return heap, stack, errors.Join(err1, err2)
}

// cpu returns the child's CPU time so far.
func (c *child) cpu(ctx context.Context) (float64, error) {
	f, err := c.call(ctx, "cpu")
	if err != nil {
		return 0, err
	}
	if len(f) != 1 {
		return 0, fmt.Errorf("%s server child: cpu: %v", c.kind, f)
	}
	return strconv.ParseFloat(f[0], 64)
}

// stop asks the child to quit and waits for it (killing it after a while).
func (c *child) stop() {
	c.mu.Lock()
	io.WriteString(c.stdin, "quit\n")
	c.stdin.Close()
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
