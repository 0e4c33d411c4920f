package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
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
	// DataDir, if set, is the store's directory; Status reports the size of
	// its data file. Start sets it.
	DataDir string
	// Store configures the store that Start opens; New ignores it.
	Store store.Options
	// GRPCOptions are appended to the server's own gRPC options.
	GRPCOptions []grpc.ServerOption
	// StopTimeout bounds GracefulStop: RPCs still running after it are
	// cancelled and their connections closed. Default 5 s.
	StopTimeout time.Duration
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
}

// Server serves the etcd v3 gRPC API (KV, Watch, and the parts of
// Maintenance and Cluster that clients need) over a [store.Store]. See the
// package documentation for what it implements and how it differs from
// etcd.
//
// The server does not own the store: Stop and GracefulStop leave it open.
type Server struct {
	st   *store.Store
	opts Options
	grpc *grpc.Server
	hsrv *health.Server

	// wmu orders writes against the transactions and puts the server
	// evaluates itself (see txnEmulated): ordinary writes share it, those
	// take it alone.
	wmu sync.RWMutex

	reqID atomic.Uint64 // etcd's request ID generator, for request sizes

	quit     chan struct{} // closed by Stop and GracefulStop
	quitOnce sync.Once
	quitCtx  context.Context
	cancel   context.CancelFunc

	mu    sync.Mutex
	addrs []string // listener addresses, for MemberList
}

// New returns a server for the store st. Register nothing else on it; call
// Serve to serve.
func New(st *store.Store, opts Options) *Server {
	opts.setDefaults()
	s := &Server{st: st, opts: opts, quit: make(chan struct{})}
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
	}
	s.grpc = grpc.NewServer(append(gopts, opts.GRPCOptions...)...)
	pb.RegisterKVServer(s.grpc, &kvServer{s: s})
	pb.RegisterWatchServer(s.grpc, &watchServer{s: s})
	pb.RegisterLeaseServer(s.grpc, pb.UnimplementedLeaseServer{})
	pb.RegisterClusterServer(s.grpc, &clusterServer{s: s})
	pb.RegisterMaintenanceServer(s.grpc, &maintenanceServer{s: s})
	pb.RegisterAuthServer(s.grpc, pb.UnimplementedAuthServer{})
	s.hsrv = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.hsrv)
	return s
}

// Store returns the store the server serves.
func (s *Server) Store() *store.Store { return s.st }

// GRPC returns the underlying gRPC server.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Serve accepts connections on l until Stop or GracefulStop, then returns
// nil (like grpc.Server.Serve, it returns a non-nil error when l fails).
// Serve may be called for several listeners.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	s.addrs = append(s.addrs, "http://"+l.Addr().String())
	s.mu.Unlock()
	err := s.grpc.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop stops the server at once: listeners and connections are closed and
// every RPC is cancelled. It returns when every handler has returned.
func (s *Server) Stop() {
	s.stopping()
	s.grpc.Stop()
}

// GracefulStop stops the server: listeners are closed at once, new RPCs
// are refused, watch streams are ended with codes.Unavailable (clients
// resume them elsewhere or after a restart), and the unary RPCs under way
// are allowed to finish — for at most Options.StopTimeout, after which it
// stops as Stop does (a watch stream whose client does not read can only
// be ended by closing its connection). It returns when every handler has
// returned.
func (s *Server) GracefulStop() {
	s.stopping()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(s.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.grpc.Stop()
		<-done
	}
}

func (s *Server) stopping() {
	s.quitOnce.Do(func() {
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

func (s *Server) dbSize() int64 {
	if s.opts.DataDir == "" {
		return 0
	}
	fi, err := os.Stat(filepath.Join(s.opts.DataDir, "mvcc.db"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// Running is a server started by [Start], with the store it opened.
type Running struct {
	srv  *Server
	st   *store.Store
	addr string

	done      chan struct{} // closed when Serve has returned
	serveErr  error
	closeOnce sync.Once
	closeErr  error
}

// Start opens the store in dataDir (creating it if needed), listens on
// listenAddr (host:port; port 0 picks a free one) and serves the etcd v3
// API there until Close.
//
// A Start right after Close on the same directory and address works: Close
// returns only once the listener is closed and the store is closed.
func Start(dataDir, listenAddr string, opts Options) (*Running, error) {
	if dataDir == "" {
		return nil, errors.New("server: no data directory given")
	}
	st, err := store.Open(dataDir, opts.Store)
	if err != nil {
		return nil, fmt.Errorf("server: opening the store: %w", err)
	}
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if opts.DataDir == "" {
		opts.DataDir = dataDir
	}
	r := &Running{srv: New(st, opts), st: st, addr: l.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.serveErr = r.srv.Serve(l)
	}()
	return r, nil
}

// Addr returns the address the server listens on (host:port).
func (r *Running) Addr() string { return r.addr }

// Endpoint returns the address as a clientv3 endpoint, http://host:port.
func (r *Running) Endpoint() string { return "http://" + r.addr }

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
