// Package kinetest starts kine (github.com/k3s-io/kine), the etcd-v3 API over
// a SQL database that k3s runs Kubernetes on, in-process on a loopback port
// with its SQLite backend (kine's default connection parameters) in a
// temporary directory, for tests and for recording traces (docs/FINDINGS.md).
//
// Logging is quiet: kine logs through logrus' standard logger, which Start
// sets to discard everything below Error, and to write nothing. A
// logrus.Fatal inside kine — which would end the process — is recorded
// instead (see [Server.Fatals]) and kine carries on, so that what it does
// next reaches the client and the checker.
package kinetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/endpoint"
	"github.com/sirupsen/logrus"
)

// Version is the kine version these servers run (go.mod pins it).
const Version = "0.17.5"

// Options shape a server. Zero values take the defaults noted.
type Options struct {
	// Dir holds the SQLite database (default: a new temporary directory,
	// removed by Close).
	Dir string
	// ClientCompaction makes kine act on the compaction requests of clients,
	// as kine's own Kubernetes test server does (automatic compaction off,
	// no revisions retained). By default automatic compaction is on with an
	// interval of an hour — so it never runs during a test — and kine
	// acknowledges a client's compaction without acting on it, as its
	// docs/flow.md describes.
	ClientCompaction bool
	// NotifyInterval is kine's watch progress-notify interval (default
	// 500ms; kine's own default is 5s).
	NotifyInterval time.Duration
}

// Server is a running kine.
type Server struct {
	// Endpoints are the client URLs (one).
	Endpoints []string
	// Dir holds the database.
	Dir string

	cancel  context.CancelFunc
	wg      *sync.WaitGroup
	tempDir string
}

var (
	logMu  sync.Mutex
	fatals []string
)

// quiet configures logrus' standard logger, which kine logs to.
func quiet() {
	logMu.Lock()
	defer logMu.Unlock()
	l := logrus.StandardLogger()
	l.SetLevel(logrus.ErrorLevel)
	l.SetOutput(io.Discard)
	l.ExitFunc = func(int) {}
	l.AddHook(fatalHook{})
}

type fatalHook struct{}

func (fatalHook) Levels() []logrus.Level { return []logrus.Level{logrus.FatalLevel, logrus.PanicLevel} }

func (fatalHook) Fire(e *logrus.Entry) error {
	logMu.Lock()
	fatals = append(fatals, e.Message)
	logMu.Unlock()
	return nil
}

var quietOnce sync.Once

// Fatals returns the messages kine logged at Fatal level in this process so
// far (each of which would have ended a kine process).
func Fatals() []string {
	logMu.Lock()
	defer logMu.Unlock()
	return append([]string(nil), fatals...)
}

// Start starts kine and returns once it serves.
func Start(opts Options) (*Server, error) {
	quietOnce.Do(quiet)
	dir, tempDir := opts.Dir, ""
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "kinetest-"); err != nil {
			return nil, err
		}
		tempDir = dir
	}
	if opts.NotifyInterval <= 0 {
		opts.NotifyInterval = 500 * time.Millisecond
	}
	cfg := endpoint.Config{
		Listener:         "tcp://127.0.0.1:0",
		Endpoint:         "sqlite://" + filepath.Join(dir, "state.db") + "?" + sqlite.DefaultParams,
		NotifyInterval:   opts.NotifyInterval,
		CompactInterval:  time.Hour,
		CompactTimeout:   5 * time.Second,
		CompactMinRetain: 1000,
		CompactBatchSize: 1000,
		PollBatchSize:    500,
		PollInterval:     time.Second,
	}
	if opts.ClientCompaction {
		cfg.CompactInterval, cfg.CompactMinRetain = 0, 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	wg := &sync.WaitGroup{}
	cfg.WaitGroup = wg
	etcd, err := endpoint.Listen(ctx, cfg)
	if err != nil {
		cancel()
		wg.Wait()
		if tempDir != "" {
			os.RemoveAll(tempDir)
		}
		return nil, fmt.Errorf("starting kine: %w", err)
	}
	return &Server{Endpoints: etcd.Endpoints, Dir: dir, cancel: cancel, wg: wg, tempDir: tempDir}, nil
}

// Close stops kine, waits until it has closed its database, and removes the
// directory Start made.
func (s *Server) Close() error {
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("kine did not stop within 10s")
	}
	if s.tempDir != "" {
		return os.RemoveAll(s.tempDir)
	}
	return nil
}
