package etcdtest

import (
	"bufio"
	"bytes"
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

// buildMember builds the etcdmember command into dir with the go command,
// from the source next to this file.
func buildMember(dir string) error {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return errors.New("etcdtest: cannot locate the etcdmember source")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goCmd, "build", "-o", filepath.Join(dir, "etcdmember"), "./etcdmember")
	cmd.Dir = filepath.Dir(file)
	// The helper runs without the race detector whatever the test does:
	// etcd is 6-65 times slower under it, and its races are not ours.
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("etcdtest: building the etcdmember helper: %v\n%s", err, out)
	}
	return nil
}

// process is a member running as a child process.
type process struct {
	cmd    *exec.Cmd
	name   string
	log    *syncBuffer // what it wrote on stderr
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

func startProcess(binDir string, m MemberConfig) (*process, error) {
	args := []string{"--name", m.Name, "--data-dir", m.Dir, "--client", m.ClientURL, "--peer", m.PeerURL,
		"--initial-cluster", m.InitialCluster}
	if m.Existing {
		args = append(args, "--existing")
	}
	if m.ProgressNotifyInterval > 0 {
		args = append(args, "--progress-notify-interval", m.ProgressNotifyInterval.String())
	}
	cmd := exec.Command(filepath.Join(binDir, "etcdmember"), args...)
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
