package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/watchspec/watchspec/impl/store"
)

// The defaults of [Options], etcd's (server/embed/config.go).
const (
	// DefaultMaxTxnOps is etcd's DefaultMaxTxnOps (embed/config.go:64).
	DefaultMaxTxnOps = 128
	// DefaultMaxRequestBytes is etcd's DefaultMaxRequestBytes, 1.5 MiB
	// (embed/config.go:67).
	DefaultMaxRequestBytes = 3 * 1024 * 1024 / 2
	// GRPCOverheadBytes is what etcd adds to MaxRequestBytes for the gRPC
	// receive limit and the watch fragment threshold
	// (server/config/config.go:38 grpcOverheadBytes).
	GRPCOverheadBytes = 512 * 1024

	// DefaultClusterID and DefaultMemberID are the IDs of a fresh
	// single-member etcd started with its default name and peer URL, so that
	// tools that print them show familiar values.
	DefaultClusterID uint64 = 0xcdf818194e3a8c32
	DefaultMemberID  uint64 = 0x8e9e05c52164694d
	// DefaultRaftTerm is the term a fresh single-member etcd reports once it
	// has elected itself.
	DefaultRaftTerm uint64 = 2
	// DefaultVersion is the etcd server version the server reports in
	// Status: the etcd API it implements.
	DefaultVersion = "3.7.3"
	// DefaultName is the member name in MemberList.
	DefaultName = "watchspec"

	// etcd's gRPC keepalive defaults (embed/config.go:69-71).
	keepAliveMinTime  = 5 * time.Second
	keepAliveInterval = 2 * time.Hour
	keepAliveTimeout  = 20 * time.Second

	// dbQuotaBytes is etcd's storage.DefaultQuotaBytes, reported by Status.
	dbQuotaBytes = 2 * 1024 * 1024 * 1024
)

// Options configure a [Server]. The zero Options are etcd's defaults.
type Options struct {
	// MaxTxnOps bounds the comparisons, and the operations of each branch, of
	// one Txn (etcd's --max-txn-ops). Default DefaultMaxTxnOps.
	MaxTxnOps int
	// MaxRequestBytes bounds the size of a write request as etcd measures it
	// (etcd's --max-request-bytes); the gRPC receive limit is
	// MaxRequestBytes + GRPCOverheadBytes. Default DefaultMaxRequestBytes.
	MaxRequestBytes int
	// ClusterID, MemberID and RaftTerm fill every response header. Defaults
	// DefaultClusterID, DefaultMemberID, DefaultRaftTerm.
	ClusterID, MemberID, RaftTerm uint64
	// Name is the member's name in MemberList. Default DefaultName.
	Name string
	// Version is the server version Status reports. Default DefaultVersion.
	Version string
	// ClientURLs are the member's client URLs in MemberList. Default: the
	// addresses of the listeners given to Serve, as http:// URLs.
	ClientURLs []string
	// Store configures the store that Start opens; New ignores it.
	Store store.Options
	// GRPCOptions are appended to the server's own gRPC options.
	GRPCOptions []grpc.ServerOption
	// StopTimeout bounds GracefulStop: RPCs still running after it are
	// cancelled and their connections closed. Default 5 s.
	StopTimeout time.Duration

	// TLS, if set, makes Serve serve TLS only, gRPC and HTTP on the same
	// port as etcd does (embed/serve.go): an http.Server hands requests
	// with an application/grpc content type to gRPC. Set ClientAuth to
	// tls.RequireAndVerifyClientCert and ClientCAs to require client
	// certificates (etcd's --client-cert-auth, --trusted-ca-file). Without
	// it, Serve serves plaintext: HTTP/2 connections (gRPC clients) go to
	// gRPC and HTTP/1 to HTTPHandler, as etcd's cmux splits its insecure
	// port.
	TLS *tls.Config
	// Logger receives the server's events: serving and stopping, alarms
	// raised and cleared, compactions, insecure listeners, TLS handshakes
	// that failed. Start also gives it to the store (Store.KV.Logger) when
	// that has none. Default: none.
	Logger *slog.Logger
	// Metrics are the server's Prometheus metrics (default: NewMetrics()).
	// Start instruments the store it opens with them.
	Metrics *Metrics
	// ExtensiveMetrics adds the gRPC handling-time histograms
	// (grpc_server_handling_seconds), as etcd's --metrics=extensive.
	ExtensiveMetrics bool
	// MetricsURLs are more URLs for Start to serve /metrics, /health,
	// /livez and /readyz on (etcd's --listen-metrics-urls): http://HOST:PORT
	// or, with TLS set, https://HOST:PORT. New ignores them.
	MetricsURLs []string
	// Adversary, when set, makes the server a legal adversary of its watch
	// clients: wherever docs/SPEC.md leaves a server a choice — how watch
	// responses are split and joined, when live watches fall behind and
	// catch up, which progress notifications are sent, when a watch stream
	// or the client's connection is reset — it takes an unusual one drawn from the adversary's seed,
	// and logs it (see [Adversary]). The store is unaffected. Start also
	// lets it choose the hub's StreamCapacity and ProgressInterval when
	// Store.Watch leaves them 0. Default: none.
	Adversary *Adversary
}

func (o *Options) setDefaults() {
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.ClusterID == 0 {
		o.ClusterID = DefaultClusterID
	}
	if o.MemberID == 0 {
		o.MemberID = DefaultMemberID
	}
	if o.RaftTerm == 0 {
		o.RaftTerm = DefaultRaftTerm
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
}

// Server serves the etcd v3 gRPC API (KV, Watch, and the parts of
// Maintenance and Cluster that clients need) over a [store.Store]. See the
// package documentation for what it implements and how it differs from
// etcd.
//
// The server does not own the store: Stop and GracefulStop leave it open.
type Server struct {
	st      *store.Store
	opts    Options
	grpc    *grpc.Server
	hsrv    *health.Server
	log     *slog.Logger
	metrics *Metrics
	alarms  alarmSet
	// advConns are the connections accepted while an adversary is set
	// (adversary_conn.go), for its connection resets.
	advConns    sync.Map
	advAccepted atomic.Int64

	// wmu orders writes against the transactions and puts the server
	// evaluates itself (see txnEmulated): ordinary writes share it, those
	// take it alone.
	wmu sync.RWMutex

	reqID atomic.Uint64 // etcd's request ID generator, for request sizes

	quit     chan struct{} // closed by Stop and GracefulStop
	quitOnce sync.Once
	quitCtx  context.Context
	cancel   context.CancelFunc

	mu       sync.Mutex
	addrs    []string       // listener addresses, for MemberList
	stopped  bool           // Stop or GracefulStop was called
	closers  []func()       // close the listeners given to Serve and ServeMetrics
	httpSrvs []*http.Server // the HTTP servers of the listeners
	serving  sync.WaitGroup // Serve and ServeMetrics calls under way
}

// recvWindow is the server's receive window of a stream: the largest
// request, and at least 2 MiB.
func recvWindow(maxRequestBytes int) int32 {
	return int32(min(max(2<<20, maxRequestBytes+GRPCOverheadBytes), 1<<29))
}

// New returns a server for the store st. Register nothing else on it; call
// Serve to serve.
func New(st *store.Store, opts Options) *Server {
	opts.setDefaults()
	s := &Server{st: st, opts: opts, quit: make(chan struct{}), log: opts.Logger, metrics: opts.Metrics}
	s.metrics.attach(s, opts.ExtensiveMetrics)
	s.quitCtx, s.cancel = context.WithCancel(context.Background())
	// etcd's request IDs: 2 bytes of member ID, 5 bytes of milliseconds,
	// 1 byte of counter (pkg/idutil/id.go NewGenerator).
	ms := uint64(time.Now().UnixMilli())
	s.reqID.Store(uint64(uint16(opts.MemberID))<<48 | (ms&(1<<40-1))<<8)

	gopts := []grpc.ServerOption{
		// etcd v3rpc/grpc.go:74-76 Server.
		grpc.MaxRecvMsgSize(opts.MaxRequestBytes + GRPCOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		// etcd embed/serve.go: clients may ping every 5 s.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepAliveMinTime}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepAliveInterval, Timeout: keepAliveTimeout}),
		// Stop returns only once every handler has.
		grpc.WaitForHandlers(true),
		// Static receive windows, which turn off gRPC's bandwidth-delay
		// estimation on the server's side: with it, the server follows the
		// data of a request with a ping of its own whenever none is out,
		// one more write and read on each side of the connection for most
		// Puts (grpc-go v1.85 internal/transport http2_server.go,
		// bdpEstimator; measured 0.65 fewer write and 0.9 fewer read
		// system calls per Put of the bench, both processes). The
		// stream window holds the largest request (MaxRequestBytes +
		// GRPCOverheadBytes, 1.5 MiB by default) so that none waits for
		// a window update; the connection's window holds two of them (the
		// estimator would grow both towards 16 MiB). Only what clients
		// send the server is concerned: responses and watch events flow
		// under the client's windows. etcd 3.7.3 sets neither
		// (v3rpc/grpc.go Server). docs/PERFORMANCE.md, "Durable puts".
		grpc.StaticStreamWindowSize(recvWindow(opts.MaxRequestBytes)),
		grpc.StaticConnWindowSize(2 * recvWindow(opts.MaxRequestBytes)),
	}
	gopts = append(gopts, s.metrics.grpcOptions()...)
	s.grpc = grpc.NewServer(append(gopts, opts.GRPCOptions...)...)
	pb.RegisterKVServer(s.grpc, &kvServer{s: s})
	pb.RegisterWatchServer(s.grpc, &watchServer{s: s})
	pb.RegisterLeaseServer(s.grpc, &leaseServer{s: s})
	st.SetLeaseGate(&s.wmu) // revokes, by request or expiry, are writes like the others
	pb.RegisterClusterServer(s.grpc, &clusterServer{s: s})
	pb.RegisterMaintenanceServer(s.grpc, &maintenanceServer{s: s})
	pb.RegisterAuthServer(s.grpc, pb.UnimplementedAuthServer{})
	s.hsrv = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.hsrv)
	s.metrics.grpc.InitializeMetrics(s.grpc)
	return s
}

// Store returns the store the server serves.
func (s *Server) Store() *store.Store { return s.st }

// GRPC returns the underlying gRPC server.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Serve serves the etcd v3 API — gRPC, and HTTPHandler's endpoints — on
// l until Stop or GracefulStop, then returns nil; it returns an error when
// l fails. With Options.TLS it serves TLS only. Serve may be called for
// several listeners. It logs a warning when l is plaintext on an address
// other than loopback: anyone who can reach it can read and write
// everything.
func (s *Server) Serve(l net.Listener) error {
	secure := s.opts.TLS != nil
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	hs := s.newHTTPServer(s.HTTPHandler(), secure)
	if s.opts.Adversary != nil {
		l = connTracker{Listener: l, conns: &s.advConns, accepted: &s.advAccepted}
	}
	var split *connSplitter
	if !secure {
		split = newConnSplitter(l)
	}
	if !s.track(scheme+l.Addr().String(), hs, func() {
		if split != nil {
			split.Close()
		} else {
			l.Close()
		}
	}) {
		l.Close()
		return nil
	}
	defer s.serving.Done()
	if !secure && !isLoopback(l.Addr()) {
		s.log.Warn("serving client traffic insecurely on an address other than loopback: anyone who can reach it can read and write everything; give the server a certificate (--cert-file, --key-file) and require client certificates (--client-cert-auth, --trusted-ca-file)",
			"address", l.Addr().String())
	}
	if secure {
		err := hs.ServeTLS(l, "", "")
		return s.serveResult(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.grpc.Serve(split.grpc) // ends when split closes
	}()
	go func() {
		defer wg.Done()
		hs.Serve(split.http)
	}()
	err := split.serve()
	wg.Wait()
	return s.serveResult(err)
}

// ServeMetrics serves MetricsHandler's endpoints (/metrics, /health,
// /livez, /readyz) on l until Stop or GracefulStop, as etcd does on its
// --listen-metrics-urls; over TLS (Options.TLS, which must be set) if
// secure.
func (s *Server) ServeMetrics(l net.Listener, secure bool) error {
	if secure && s.opts.TLS == nil {
		l.Close()
		return errors.New("server: ServeMetrics over TLS needs Options.TLS")
	}
	hs := s.newHTTPServer(s.MetricsHandler(), secure)
	if !s.track("", hs, func() { l.Close() }) {
		l.Close()
		return nil
	}
	defer s.serving.Done()
	var err error
	if secure {
		err = hs.ServeTLS(l, "", "")
	} else {
		err = hs.Serve(l)
	}
	return s.serveResult(err)
}

// track records a listener being served; false if the server has stopped.
func (s *Server) track(addr string, hs *http.Server, closer func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	if addr != "" {
		s.addrs = append(s.addrs, addr)
	}
	s.closers = append(s.closers, closer)
	s.httpSrvs = append(s.httpSrvs, hs)
	s.serving.Add(1)
	return true
}

func (s *Server) serveResult(err error) error {
	if s.quitCtx.Err() != nil || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// newHTTPServer returns the HTTP server of one listener. Over TLS it hands
// gRPC requests to the gRPC server, as etcd's grpcHandlerFunc
// (embed/serve.go) does; its errors — TLS handshakes refused among them —
// go to the logger.
func (s *Server) newHTTPServer(h http.Handler, secure bool) *http.Server {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Minute, // etcd's
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if secure {
		hs.TLSConfig = s.opts.TLS.Clone()
		hs.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: math.MaxInt32}
		hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.Contains(r.Header.Get("Content-Type"), "application/grpc") {
				s.grpc.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	return hs
}

// isLoopback reports whether a is a loopback address.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// Stop stops the server at once: listeners and connections are closed and
// every RPC is cancelled. It returns when every handler has returned and
// every Serve call has.
func (s *Server) Stop() {
	s.stopping()
	for _, c := range s.listenClosers() {
		c()
	}
	s.grpc.Stop()
	for _, hs := range s.httpServers() {
		hs.Close()
	}
	s.serving.Wait()
	s.log.Info("server stopped")
}

// GracefulStop stops the server: listeners are closed at once, new RPCs
// are refused, watch streams are ended with codes.Unavailable (clients
// resume them elsewhere or after a restart), and the unary RPCs and HTTP
// requests under way are allowed to finish — for at most
// Options.StopTimeout, after which it stops as Stop does (a watch stream
// whose client does not read can only be ended by closing its connection).
// It returns when every handler has returned and every Serve call has.
func (s *Server) GracefulStop() {
	s.stopping()
	for _, c := range s.listenClosers() {
		c()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StopTimeout)
	defer cancel()
	// The HTTP servers first: over TLS they carry the gRPC requests too
	// (grpc.Server.ServeHTTP), which grpc's GracefulStop would cut at once
	// (it closes such a transport to drain it). Their Shutdown lets the
	// requests under way finish; watch streams end as the server stops.
	var wg sync.WaitGroup
	for _, hs := range s.httpServers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if hs.Shutdown(ctx) != nil {
				hs.Close()
			}
		}()
	}
	wg.Wait()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
	s.serving.Wait()
	s.log.Info("server stopped")
}

func (s *Server) listenClosers() []func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]func(){}, s.closers...)
}

func (s *Server) httpServers() []*http.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Server{}, s.httpSrvs...)
}

func (s *Server) stopping() {
	s.quitOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.log.Info("server stopping", "revision", s.st.Revision())
		s.hsrv.Shutdown()
		close(s.quit)
		s.cancel()
	})
}

func (s *Server) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: s.opts.ClusterID, MemberId: s.opts.MemberID, Revision: rev, RaftTerm: s.opts.RaftTerm}
}

func (s *Server) clientURLs() []string {
	if len(s.opts.ClientURLs) > 0 {
		return append([]string(nil), s.opts.ClientURLs...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// Running is a server started by [Start], with the store it opened.
type Running struct {
	srv         *Server
	st          *store.Store
	addr        string
	endpoint    string
	metricsURLs []string

	done      chan struct{} // closed when Serve has returned
	serveErr  error
	closeOnce sync.Once
	closeErr  error
}

// Start opens the store in dataDir (creating it if needed), listens on
// listenAddr (host:port; port 0 picks a free one) and serves the etcd v3
// API there until Close — and the metrics endpoints on Options.MetricsURLs.
// It instruments the store with Options.Metrics (see
// [Metrics.InstrumentStore]) and gives it Options.Logger.
//
// A Start right after Close on the same directory and address works: Close
// returns only once the listeners are closed and the store is closed.
func Start(dataDir, listenAddr string, opts Options) (*Running, error) {
	if dataDir == "" {
		return nil, errors.New("server: no data directory given")
	}
	murls, err := parseMetricsURLs(opts.MetricsURLs, opts.TLS != nil)
	if err != nil {
		return nil, err
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	opts.Metrics.InstrumentStore(&opts.Store)
	if opts.Adversary != nil {
		opts.Adversary.storeOptions(&opts.Store)
	}
	if opts.Store.KV.Logger == nil {
		opts.Store.KV.Logger = opts.Logger
	}
	st, err := store.Open(dataDir, opts.Store)
	if err != nil {
		return nil, fmt.Errorf("server: opening the store: %w", err)
	}
	var ls []net.Listener
	fail := func(err error) (*Running, error) {
		for _, l := range ls {
			l.Close()
		}
		st.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return fail(err)
	}
	ls = append(ls, l)
	for _, u := range murls {
		ml, err := net.Listen("tcp", u.Host)
		if err != nil {
			return fail(fmt.Errorf("metrics URL %s: %w", u, err))
		}
		ls = append(ls, ml)
	}
	r := &Running{srv: New(st, opts), st: st, addr: l.Addr().String(), done: make(chan struct{})}
	r.endpoint = "http://" + r.addr
	if opts.TLS != nil {
		r.endpoint = "https://" + r.addr
	}
	for i, u := range murls {
		ml := ls[i+1]
		r.metricsURLs = append(r.metricsURLs, u.Scheme+"://"+ml.Addr().String())
		go func() {
			if err := r.srv.ServeMetrics(ml, u.Scheme == "https"); err != nil {
				r.srv.log.Error("serving metrics failed", "url", u.String(), "err", err)
			}
		}()
	}
	go func() {
		defer close(r.done)
		r.serveErr = r.srv.Serve(l)
	}()
	return r, nil
}

// parseMetricsURLs checks etcd's --listen-metrics-urls: http or https
// (with TLS) URLs of a host and port, nothing else.
func parseMetricsURLs(raw []string, tls bool) ([]*url.URL, error) {
	var out []*url.URL
	for _, s := range raw {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("server: metrics URL %q: %w", s, err)
		}
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("server: metrics URL %q: the scheme must be http or https", s)
		case u.Scheme == "https" && !tls:
			return nil, fmt.Errorf("server: metrics URL %q: https needs a certificate (Options.TLS; --cert-file, --key-file)", s)
		case u.Host == "" || u.Port() == "":
			return nil, fmt.Errorf("server: metrics URL %q: give a host and a port, as in http://127.0.0.1:2381", s)
		case u.Path != "" && u.Path != "/", u.RawQuery != "", u.User != nil:
			return nil, fmt.Errorf("server: metrics URL %q: only a scheme, a host and a port are allowed", s)
		}
		out = append(out, u)
	}
	return out, nil
}

// Addr returns the address the server listens on (host:port).
func (r *Running) Addr() string { return r.addr }

// Endpoint returns the address as a clientv3 endpoint: http://host:port,
// or https://host:port with Options.TLS.
func (r *Running) Endpoint() string { return r.endpoint }

// MetricsURLs returns the URLs the metrics endpoints are served on, one per
// Options.MetricsURLs, with the ports picked for port 0.
func (r *Running) MetricsURLs() []string { return append([]string(nil), r.metricsURLs...) }

// Server returns the server.
func (r *Running) Server() *Server { return r.srv }

// Store returns the store.
func (r *Running) Store() *store.Store { return r.st }

// Done is closed when the server has stopped serving: after Close, or when
// its listener failed (then Err says why).
func (r *Running) Done() <-chan struct{} { return r.done }

// Err returns why serving stopped, once Done is closed: nil after Close.
func (r *Running) Err() error {
	select {
	case <-r.done:
		return r.serveErr
	default:
		return nil
	}
}

// Close stops the server gracefully (see [Server.GracefulStop]), then
// closes the store. Every acknowledged write is durable (see
// [store.Store]). Close is idempotent.
func (r *Running) Close() error {
	r.closeOnce.Do(func() {
		r.srv.GracefulStop()
		<-r.done
		r.closeErr = r.st.Close()
	})
	return r.closeErr
}
