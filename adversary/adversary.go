// Package adversary runs a legal adversary of etcd watch clients: the
// reference etcd-v3 server (impl/server) in a mode where, wherever
// docs/SPEC.md leaves a server a choice, it takes a legal but unusual one,
// drawn from a seed. Responses split at revision boundaries or joined into
// large catch-up batches, live watches held back until they are far behind
// or until a compaction cancels them, periodic progress notifications
// dropped, progress requests answered late or never, watch streams reset and
// whole connections closed so that clientv3 must resume. The store stays exact, and every choice is
// legal: a trace of any run passes `watchspec check` (the package's tests
// prove it over many seeds with watchspec's conformance workload). A client
// that breaks under it has a bug — and the seed to replay it.
//
// From your own go test:
//
//	func TestMyCacheUnderAdversary(t *testing.T) {
//		for seed := int64(1); seed <= 20; seed++ {
//			srv := adversary.Run(t, seed) // closed at the end of the test; on failure its choices are logged
//			runMyCache(t, srv.Endpoint())   // any clientv3-based client
//		}
//	}
//
// docs/ADVERSARY.md lists the kinds of choice, the SPEC section that makes
// each legal, and how to replay a seed (`watchspec serve --adversary SEED`).
package adversary

import (
	"fmt"
	"os"
	"testing"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/server"
)

// Choice is one choice the adversary made: its kind, where (stream, watch,
// revision), and what.
type Choice = server.Choice

// Kind is a kind of choice; Kind.Section names the SPEC sections that make
// it legal.
type Kind = server.ChoiceKind

// Report is what an adversary did: how many choices of each kind, and the
// log of them. Its String method formats the counts as a table.
type Report = server.AdversaryReport

// Kinds returns every kind of choice the adversary makes.
func Kinds() []Kind { return server.ChoiceKinds() }

// Options configure [Start]. The zero Options serve on a free loopback
// port from a temporary directory.
type Options struct {
	// Listen is the address to serve on (default "127.0.0.1:0").
	Listen string
	// Dir holds the store's data (default: a temporary directory that
	// Close removes).
	Dir string
	// Log, when set, is called with every choice as it is made.
	Log func(Choice)
	// Server configures the server further (MaxRequestBytes, TLS, …);
	// its Adversary field is set by Start.
	Server server.Options
}

// Server is a running adversarial server.
type Server struct {
	r   *server.Running
	adv *server.Adversary
	dir string // removed by Close, when Start made it
}

// Start starts an adversarial server whose choices are drawn from seed.
// Close it when done.
func Start(seed int64, opts Options) (*Server, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	s := &Server{adv: server.NewAdversary(seed)}
	s.adv.Log = opts.Log
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "watchspec-adversary-")
		if err != nil {
			return nil, fmt.Errorf("adversary: a temporary directory for the store: %w (set Options.Dir)", err)
		}
		dir, s.dir = d, d
		// A throwaway store: nothing needs to survive a crash.
		opts.Server.Store.KV = withNoFsync(opts.Server.Store.KV)
	}
	so := opts.Server
	so.Adversary = s.adv
	r, err := server.Start(dir, opts.Listen, so)
	if err != nil {
		if s.dir != "" {
			os.RemoveAll(s.dir)
		}
		return nil, fmt.Errorf("adversary: %w", err)
	}
	s.r = r
	return s, nil
}

func withNoFsync(o mvcc.Options) mvcc.Options {
	o.UnsafeNoFsync = true
	return o
}

// Run starts an adversarial server for a test, and closes it when the test
// ends. When the test failed, it logs the seed and the adversary's report —
// the counts and the last choices — so that the failure can be replayed.
func Run(t testing.TB, seed int64, opts ...Options) *Server {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := Start(seed, o)
	if err != nil {
		t.Fatalf("starting the adversary with seed %d: %v", seed, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the adversary with seed %d: %v", seed, err)
		}
		if t.Failed() {
			rep := s.Report()
			t.Logf("%s(replay: adversary.Start(%d, …) or watchspec serve --adversary %d)", rep, seed, seed)
			last := rep.Choices
			if len(last) > 20 {
				last = last[len(last)-20:]
			}
			for _, c := range last {
				t.Logf("%s", c)
			}
		}
	})
	return s
}

// Endpoint returns the server's address as a clientv3 endpoint
// (http://127.0.0.1:PORT).
func (s *Server) Endpoint() string { return s.r.Endpoint() }

// Seed returns the seed the adversary draws its choices from.
func (s *Server) Seed() int64 { return s.adv.Seed() }

// Report returns the choices made so far.
func (s *Server) Report() Report { return s.adv.Report() }

// Running returns the server underneath, for its store and metrics.
func (s *Server) Running() *server.Running { return s.r }

// Close stops the server and removes the temporary directory Start made.
func (s *Server) Close() error {
	err := s.r.Close()
	if s.dir != "" {
		if rerr := os.RemoveAll(s.dir); err == nil {
			err = rerr
		}
	}
	return err
}
