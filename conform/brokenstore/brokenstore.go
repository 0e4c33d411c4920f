// Package brokenstore puts deliberately broken etcd-v3 servers in front of
// a working one, so that a conformance test can be shown to fail: a gRPC
// proxy that forwards etcd's KV, Watch, Lease, Maintenance (Status) and
// Cluster (MemberList) services to a backend through a [Mutant] that breaks
// exactly one guarantee of docs/SPEC.md — [DropEvent] §3.3 Reliable,
// [DuplicateEvent] §3.2 Unique, [ReorderEvents] §3.1 Ordered,
// [SplitRevision] §3.4 Atomic, [ProgressBeforeEvents] §3.6 Bookmarkable,
// [SilentCompaction] §3.11 CompactedCancel, [StaleRead] §2.7 Linearizable,
// [EarlyExpiry], [ForgetLeases] and [ForgetLeasesKeepKeys] §2.11
// LeaseExpiry, [SplitLeaseDeletion]
// §3.15 LeaseAtomic (the lease mutants need a run with lease clients,
// conform.Config.Leases; the ForgetLeases mutants a restart of the backend
// that calls [Proxy.Restarted]).
// The zero Mutant is a faithful proxy. watchspec's own tests
// (conform/broken_test.go) show that the checker names each one.
//
// Start with [Start]:
//
//	p, err := brokenstore.Start("127.0.0.1:2379", brokenstore.DropEvent(&brokenstore.Strikes{Every: 2}))
//	if err != nil { ... }
//	defer p.Close()
//	// run the conformance test against p.Endpoint(); it must fail, naming Reliable
//
// A mutant strikes only where the workload gives it an opportunity
// ([Strikes] counts them), and some need the compactor off to have exactly
// one name: DropEvent and ProgressBeforeEvents (a compaction that
// overtakes the skipped event makes it §3.11's, by SPEC §3 "One fault, one
// name").
package brokenstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// WatchHook sees every response the backend sends on one watch stream, in
// order, and decides what the client gets instead: send forwards a response
// to the client. A faithful hook is `return send(resp)`.
type WatchHook func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error

// Mutant is what a broken proxy changes; its zero value changes nothing.
type Mutant struct {
	// watch, when set, makes the hook of one watch stream.
	Watch func(s *WatchStream) WatchHook
	// rangeNow, when set, answers the Range requests at revision 0.
	RangeNow func(ctx context.Context, backend pb.KVClient, req *pb.RangeRequest) (*pb.RangeResponse, error)
	// create, when set, is called before a client's watch creation is
	// forwarded; it may delay it.
	Create func(ctx context.Context, backend pb.KVClient, c *pb.WatchCreateRequest)
	// Granted, when set, is called after the backend granted a lease, with
	// its answer (the client gets it unchanged).
	Granted func(lease pb.LeaseClient, kv pb.KVClient, g *pb.LeaseGrantResponse)
	// Revoke, when set, is called before a client's revoke is forwarded.
	Revoke func(ctx context.Context, lease pb.LeaseClient, kv pb.KVClient, r *pb.LeaseRevokeRequest)
	// Restarted, when set, is called by [Proxy.Restarted].
	Restarted func(ctx context.Context, lease pb.LeaseClient) error
	// Gone, when set, says that the proxy answers for lease id as for a
	// lease that does not exist: a keep-alive with TTL 0, a time-to-live
	// with TTL -1, a revoke with "requested lease not found", a list
	// without it (the backend keeps it, and the keys put with it).
	Gone func(id int64) bool
}

// Strikes decides which of a mutant's opportunities it takes — the first,
// then every every-th, so that it strikes early and often — and counts them.
type Strikes struct {
	Every                  int64
	Opportunities, Applied atomic.Int64
}

// Take counts an opportunity and reports whether the mutant takes it.
func (s *Strikes) Take() bool { return (s.Opportunities.Add(1)-1)%s.Every == 0 }

// Proxy serves etcd's KV, Watch, Lease, Maintenance (Status) and Cluster
// (MemberList) by forwarding to a backend, through a mutant.
type Proxy struct {
	grpc *grpc.Server
	conn *grpc.ClientConn
	addr string
	m    *Mutant
}

// Start starts a proxy on a free port of 127.0.0.1 that forwards to the
// etcd-v3 gRPC endpoint backend (host:port or http://host:port; no TLS)
// through m; a nil m, like the zero Mutant, changes nothing. Point clients
// at [Proxy.Endpoint]; stop it with [Proxy.Close].
func Start(backend string, m *Mutant) (*Proxy, error) {
	if m == nil {
		m = &Mutant{}
	}
	backend = strings.TrimPrefix(backend, "http://")
	conn, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("brokenstore: connecting to %s: %v", backend, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("brokenstore: %v", err)
	}
	p := &Proxy{grpc: grpc.NewServer(), conn: conn, addr: l.Addr().String(), m: m}
	pb.RegisterKVServer(p.grpc, &kvProxy{backend: pb.NewKVClient(conn), m: m})
	pb.RegisterWatchServer(p.grpc, &watchProxy{backend: pb.NewWatchClient(conn), kv: pb.NewKVClient(conn), m: m})
	pb.RegisterLeaseServer(p.grpc, &leaseProxy{backend: pb.NewLeaseClient(conn), kv: pb.NewKVClient(conn), m: m})
	pb.RegisterMaintenanceServer(p.grpc, &maintenanceProxy{backend: pb.NewMaintenanceClient(conn)})
	pb.RegisterClusterServer(p.grpc, &clusterProxy{backend: pb.NewClusterClient(conn), urls: []string{p.Endpoint()}})
	go p.grpc.Serve(l)
	return p, nil
}

// Endpoint is the proxy's client URL, for clientv3.Config.Endpoints.
func (p *Proxy) Endpoint() string { return "http://" + p.addr }

// Close stops the proxy and its connection to the backend.
func (p *Proxy) Close() {
	p.grpc.Stop()
	p.conn.Close()
}

type kvProxy struct {
	pb.UnimplementedKVServer
	backend pb.KVClient
	m       *Mutant
}

func (p *kvProxy) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if p.m.RangeNow != nil && r.Revision == 0 {
		return p.m.RangeNow(ctx, p.backend, r)
	}
	return p.backend.Range(ctx, r)
}

func (p *kvProxy) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return p.backend.Put(ctx, r)
}

func (p *kvProxy) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return p.backend.DeleteRange(ctx, r)
}

func (p *kvProxy) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	return p.backend.Txn(ctx, r)
}

func (p *kvProxy) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return p.backend.Compact(ctx, r)
}

type maintenanceProxy struct {
	pb.UnimplementedMaintenanceServer
	backend pb.MaintenanceClient
}

func (p *maintenanceProxy) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	return p.backend.Status(ctx, r)
}

type clusterProxy struct {
	pb.UnimplementedClusterServer
	backend pb.ClusterClient
	urls    []string
}

// MemberList names the proxy as the member's client URL, so that a client
// that syncs its endpoints stays behind the proxy.
func (p *clusterProxy) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	resp, err := p.backend.MemberList(ctx, r)
	if err == nil {
		for _, m := range resp.Members {
			m.ClientURLs = p.urls
		}
	}
	return resp, err
}

type watchProxy struct {
	pb.UnimplementedWatchServer
	backend pb.WatchClient
	kv      pb.KVClient
	m       *Mutant
}

// WatchStream is one proxied Watch stream: the client's requests go to the
// backend, and the backend's responses to the client through the mutant's
// hook. A creation that leaves the ID to the server (watch_id 0, as clientv3
// does) is given one by the proxy — 1, 2, … — so the IDs are the same on
// both sides, and an ID is never used twice on the stream (silentCompaction
// creates a watch again under its old ID). Everything else is forwarded
// unchanged.
type WatchStream struct {
	client  pb.Watch_WatchServer
	backend pb.Watch_WatchClient

	mu         sync.Mutex                       // serialises sends to the backend; guards the fields below
	lastID     int64                            // the last watch ID the proxy gave
	pending    []*pb.WatchCreateRequest         // creations not yet answered, oldest first; nil: the proxy's own
	recreating int                              // the proxy's own among them
	live       map[int64]*pb.WatchCreateRequest // the client's watches by ID, as created
}

func (p *watchProxy) Watch(client pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(client.Context())
	defer cancel()
	backend, err := p.backend.Watch(ctx)
	if err != nil {
		return err
	}
	s := &WatchStream{client: client, backend: backend, live: make(map[int64]*pb.WatchCreateRequest)}
	hook := WatchHook(func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error { return send(resp) })
	if p.m.Watch != nil {
		hook = p.m.Watch(s)
	}
	go func() {
		if err := s.forwardRequests(ctx, p.kv, p.m); err != nil {
			cancel()
		}
	}()
	for {
		resp, err := backend.Recv()
		if err != nil {
			return err
		}
		if resp.Created {
			s.mu.Lock()
			var c *pb.WatchCreateRequest
			if len(s.pending) > 0 { // the backend answers creations in order
				c, s.pending = s.pending[0], s.pending[1:]
			}
			if c != nil && !resp.Canceled {
				s.live[resp.WatchId] = c
			}
			if c == nil {
				s.recreating--
			}
			s.mu.Unlock()
			if c == nil {
				continue // a watch the proxy re-created: the client knows it already
			}
		} else if resp.Canceled && resp.CompactRevision == 0 {
			s.mu.Lock()
			delete(s.live, resp.WatchId)
			s.mu.Unlock()
		}
		if err := hook(resp, client.Send); err != nil {
			return err
		}
	}
}

// forwardRequests sends the client's requests to the backend until the
// client closes its side (then the backend's) or the stream breaks.
func (s *WatchStream) forwardRequests(ctx context.Context, kv pb.KVClient, m *Mutant) error {
	for {
		req, err := s.client.Recv()
		if c := req.GetCreateRequest(); err == nil && c != nil && m.Create != nil {
			m.Create(ctx, kv, c)
		}
		s.mu.Lock()
		switch {
		case errors.Is(err, io.EOF):
			err = s.backend.CloseSend()
		case err != nil:
		default:
			if c := req.GetCreateRequest(); c != nil {
				if c.WatchId == clientv3.AutoWatchID {
					s.lastID++
					c.WatchId = s.lastID
				}
				s.pending = append(s.pending, c)
			}
			if c := req.GetCancelRequest(); c != nil {
				delete(s.live, c.WatchId)
			}
			err = s.backend.Send(req)
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Recreate creates the client's watch id again on the backend, from
// revision from, under the same ID (free: the backend has just cancelled
// the watch). It reports false when the client has cancelled the watch.
func (s *WatchStream) Recreate(id, from int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.live[id]
	if !ok {
		return false, nil
	}
	c = proto.Clone(c).(*pb.WatchCreateRequest)
	c.WatchId, c.StartRevision = id, from
	s.pending = append(s.pending, nil)
	s.recreating++
	return true, s.backend.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}})
}

// IsRecreating reports whether a watch the proxy re-creates is not created
// yet, as far as the responses the hook has seen go.
func (s *WatchStream) IsRecreating() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recreating > 0
}

// The mutants. Each breaks one guarantee, and nothing else.

// DropEvent drops an event response that falls between two others of the
// same watch: the stream shows a gap between two delivered events. SPEC §3.3
// Reliable.
//
// A candidate — not the watch's first event response — is held until the
// backend's next response: if that is the same watch's next event response,
// the candidate is dropped; otherwise it is forwarded after all (so no
// progress notification or cancel ever follows a gap, which would be
// another property's business).
func DropEvent(st *Strikes) *Mutant {
	return &Mutant{Watch: func(*WatchStream) WatchHook {
		hadEvents := make(map[int64]bool)
		var held *pb.WatchResponse
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			if h := held; h != nil {
				held = nil
				if len(resp.Events) > 0 && resp.WatchId == h.WatchId {
					st.Applied.Add(1)
					return send(resp)
				}
				if err := send(h); err != nil {
					return err
				}
			}
			if len(resp.Events) > 0 {
				if hadEvents[resp.WatchId] && st.Take() {
					held = resp
					return nil
				}
				hadEvents[resp.WatchId] = true
			}
			return send(resp)
		}
	}}
}

// DuplicateEvent sends an event response twice in a row. SPEC §3.2 Unique;
// the shape of etcd#17247.
//
// Only a response of one revision: the copy of a response of several would
// start below the revision just delivered, which SPEC §3 ("One fault, one
// name") names Ordered before Unique — the validator keeps no memory of the
// revisions it has closed.
func DuplicateEvent(st *Strikes) *Mutant {
	return &Mutant{Watch: func(*WatchStream) WatchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			if oneRevision(resp.Events) && st.Take() {
				st.Applied.Add(1)
				if err := send(resp); err != nil {
					return err
				}
			}
			return send(resp)
		}
	}}
}

// ReorderEvents reverses the events of a response that carries two or more:
// of several revisions (a catch-up batch), or several of one revision (a
// multi-key transaction). SPEC §3.1 Ordered; the shape of etcd#15271.
func ReorderEvents(st *Strikes) *Mutant {
	return &Mutant{Watch: func(*WatchStream) WatchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			if len(resp.Events) >= 2 && st.Take() {
				st.Applied.Add(1)
				slices.Reverse(resp.Events)
			}
			return send(resp)
		}
	}}
}

// SplitRevision sends the events of a response whose events all share one
// revision (a multi-key transaction) as two responses. SPEC §3.4 Atomic.
func SplitRevision(st *Strikes) *Mutant {
	return &Mutant{Watch: func(*WatchStream) WatchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			evs := resp.Events
			if len(evs) < 2 || !oneRevision(evs) || !st.Take() {
				return send(resp)
			}
			st.Applied.Add(1)
			first := proto.Clone(resp).(*pb.WatchResponse)
			first.Events = evs[:1]
			resp.Events = evs[1:]
			if err := send(first); err != nil {
				return err
			}
			return send(resp)
		}
	}}
}

// ProgressBeforeEvents sends, before an event response with header revision
// R, a progress notification at R for the same watch: it claims events it
// has not delivered. SPEC §3.6 Bookmarkable; the shape of etcd#15220.
//
// Only when R is at least every header revision the stream carried so far:
// a notification that went back would break §3.12 MonotonicRevision as
// well. (R is at least the event revisions, so never below the watch's
// start − 1, where it would be §3.10 StartRevision's.)
func ProgressBeforeEvents(st *Strikes) *Mutant {
	return &Mutant{Watch: func(*WatchStream) WatchHook {
		var maxHeader int64
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			r := resp.Header.GetRevision()
			if len(resp.Events) > 0 && r >= maxHeader && st.Take() {
				st.Applied.Add(1)
				progress := &pb.WatchResponse{Header: proto.Clone(resp.Header).(*pb.ResponseHeader), WatchId: resp.WatchId}
				if err := send(progress); err != nil {
					return err
				}
			}
			maxHeader = max(maxHeader, r)
			return send(resp)
		}
	}}
}

// oneRevision reports whether evs are events of exactly one revision.
func oneRevision(evs []*mvccpb.Event) bool {
	return len(evs) > 0 && evs[0].Kv.ModRevision == evs[len(evs)-1].Kv.ModRevision
}

// SlowCreates is a faithful proxy that takes its time to create a watch
// with a start revision: it waits (up to a second) until a compaction has
// passed the start by slowMargin revisions, so that the backend cancels the
// watch with CompactRevision, as it must. A server may be that slow (SPEC §6:
// no deadline). The workload alone seldom needs compacted history; this gives
// SilentCompaction cancels to swallow, and the margin makes it likely that
// the history they skip holds events the watch matches — a skip of nothing
// cannot be seen. st counts the creations delayed until compacted.
func SlowCreates(st *Strikes) func(context.Context, pb.KVClient, *pb.WatchCreateRequest) {
	const slowMargin = 10
	return func(ctx context.Context, kv pb.KVClient, c *pb.WatchCreateRequest) {
		if c.StartRevision <= 0 {
			return
		}
		probe := &pb.RangeRequest{Key: c.Key, RangeEnd: c.RangeEnd, Revision: c.StartRevision + slowMargin, CountOnly: true}
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			_, err := kv.Range(ctx, probe)
			switch rpctypes.Error(err) {
			case nil, rpctypes.ErrFutureRev:
				continue // wait for the writers and the compactor
			case rpctypes.ErrCompacted:
				st.Opportunities.Add(1)
			}
			return // compacted, or the stream is gone
		}
	}
}

// SilentCompaction swallows the cancel of a watch that needs compacted
// history, creates the watch again from the compact revision, and forwards
// its events under the original ID: the client never learns that history
// was skipped. SPEC §3.11 CompactedCancel; the shape of etcd#17529.
//
// It creates watches from the past slowly (SlowCreates), so that there are
// such cancels; the control run "slow creates" shows that this alone breaks
// nothing. Between the backend's cancel and its creating the watch again,
// the watch does not exist there, and a progress notification the backend
// sends then says nothing about it: the proxy drops those (as a server may,
// SPEC §6), or the re-created watch's catch-up would also break §3.6
// Bookmarkable.
func SilentCompaction(st *Strikes) *Mutant {
	return &Mutant{Create: SlowCreates(&Strikes{Every: 1}), Watch: func(s *WatchStream) WatchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			progress := len(resp.Events) == 0 && !resp.Created && !resp.Canceled && resp.CompactRevision == 0
			if progress && s.IsRecreating() {
				return nil
			}
			if resp.Canceled && resp.CompactRevision != 0 && st.Take() {
				ok, err := s.Recreate(resp.WatchId, resp.CompactRevision)
				if ok {
					st.Applied.Add(1)
					return err
				}
			}
			return send(resp)
		}
	}}
}

// StaleRead answers a Range at the current revision with what the range
// held three revisions earlier, under the current header revision. SPEC
// §2.7 Linearizable; the shape of etcd#20418.
//
// Only when the two answers differ (an identical one could not be caught),
// and when the older revision is still readable.
func StaleRead(st *Strikes) *Mutant {
	return &Mutant{RangeNow: func(ctx context.Context, backend pb.KVClient, req *pb.RangeRequest) (*pb.RangeResponse, error) {
		cur, err := backend.Range(ctx, req)
		if err != nil || cur.Header.GetRevision() <= 4 {
			return cur, err
		}
		old := proto.Clone(req).(*pb.RangeRequest)
		old.Revision = cur.Header.Revision - 3
		stale, err := backend.Range(ctx, old)
		if err != nil {
			return cur, nil // compacted meanwhile: answer truthfully
		}
		stale.Header = cur.Header
		if proto.Equal(stale, cur) || !st.Take() {
			return cur, nil
		}
		st.Applied.Add(1)
		return stale, nil
	}}
}
