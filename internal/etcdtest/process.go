package etcdtest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memberBinary returns the path of the etcdmember command
// (tests/cmd/etcdmember), building it when the cache holds none for its
// current sources: once per change of the tests module, shared by every
// test binary and run (the cache is the user's cache directory, or
// $WATCHSPEC_ETCDMEMBER_CACHE).
func memberBinary() (string, error) {
	memberOnce.Do(func() { memberPath, memberErr = buildMember() })
	return memberPath, memberErr
}

var (
	memberOnce sync.Once
	memberPath string
	memberErr  error
)

func buildMember() (string, error) {
	return buildCached("etcdmember", "tests", "./cmd/etcdmember",
		[]string{"go.work", "go.work.sum", "tests/go.mod", "tests/go.sum", "tests/cmd/etcdmember/main.go"}, nil)
}

// EtcdctlBinary returns the path of etcd's own etcdctl, at the version the
// root module requires, built without the race detector whatever the
// calling test does (a race-built test binary posing as etcdctl takes a
// second to start; this one takes milliseconds). It is built once per
// change of go.mod and go.sum and cached like the etcdmember command.
func EtcdctlBinary() (string, error) {
	etcdctlOnce.Do(func() {
		etcdctlPath, etcdctlErr = buildCached("etcdctl", ".", "go.etcd.io/etcd/etcdctl/v3", []string{"go.mod", "go.sum"},
			[]string{"GOWORK=off"}) // the root module's versions, not the workspace's
	})
	return etcdctlPath, etcdctlErr
}

var (
	etcdctlOnce sync.Once
	etcdctlPath string
	etcdctlErr  error
)

// buildCached builds the command pkg in the module at dir (relative to the
// repository's root) as name, unless the cache already holds it for the
// current contents of the files hashed (relative to the root), with env
// added to the go command's environment.
func buildCached(name, dir, pkg string, hashed, env []string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("etcdtest: cannot locate this package's source, and so the repository that builds %s", name)
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	modDir := filepath.Join(root, dir)
	if _, err := os.Stat(filepath.Join(modDir, "go.mod")); err != nil {
		return "", fmt.Errorf("etcdtest: %s is built from a checkout of the repository, and %s has no go.mod (%v)", name, modDir, err)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("etcdtest: %s is built with the go command, and none is on PATH (%v): put Go's bin directory on PATH", name, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s %s %q\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, pkg, env)
	for _, f := range hashed {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("etcdtest: hashing the sources of %s: %v", name, err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	cache := os.Getenv("WATCHSPEC_ETCDMEMBER_CACHE")
	if cache == "" {
		if cache, err = os.UserCacheDir(); err != nil {
			cache = os.TempDir()
		}
		cache = filepath.Join(cache, "watchspec")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("etcdtest: the cache of %s: %v", name, err)
	}
	bin := filepath.Join(cache, fmt.Sprintf("%s-%x", name, h.Sum(nil)[:12]))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// Built under a name of its own, then renamed: test binaries that
	// build at the same time each install a whole binary.
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return "", fmt.Errorf("etcdtest: the cache of %s: %v", name, err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(goCmd, "build", "-o", filepath.Join(tmp, name), pkg)
	cmd.Dir = modDir
	// The helper runs without the race detector whatever the test does:
	// etcd is 6-65 times slower under it, and its races are not ours.
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-buildvcs=false"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("etcdtest: building %s (go build %s in %s): %v\n%s", name, pkg, modDir, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, name), bin); err != nil {
		return "", fmt.Errorf("etcdtest: installing %s: %v", name, err)
	}
	return bin, nil
}

// process is a member running as a child process.
type process struct {
	cmd    *exec.Cmd
	name   string
	log    *syncBuffer // what it wrote on stderr
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

func startProcess(bin string, m MemberConfig) (*process, error) {
	args := []string{"--name", m.Name, "--data-dir", m.Dir, "--client", m.ClientURL, "--peer", m.PeerURL,
		"--initial-cluster", m.InitialCluster}
	if m.Existing {
		args = append(args, "--existing")
	}
	if m.ProgressNotifyInterval > 0 {
		args = append(args, "--progress-notify-interval", m.ProgressNotifyInterval.String())
	}
	cmd := exec.Command(bin, args...)
	setDeathSignal(cmd)
	p := &process{cmd: cmd, name: m.Name, log: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd member %s: %v", m.Name, err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if sc.Text() == "ready" && !signalled {
				signalled = true
				close(ready)
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("etcd member %s exited before it was ready (%v): %s", m.Name, p.err, strings.TrimSpace(p.log.String()))
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("etcd member %s did not become ready within 60s: %s", m.Name, strings.TrimSpace(p.log.String()))
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (p *process) kill() error {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	return nil
}

// stop sends SIGTERM, so that the member closes gracefully, and kills it
// when it has not exited within 20 s.
func (p *process) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("etcd member %s: %v: %s", p.name, p.err, strings.TrimSpace(p.log.String()))
		}
		return nil
	case <-time.After(20 * time.Second):
		p.kill()
		return fmt.Errorf("etcd member %s did not stop within 20s of SIGTERM; killed", p.name)
	}
}

// syncBuffer is a bytes.Buffer safe for the writer and a reader.
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
