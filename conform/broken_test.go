package conform

// Deliberately broken servers (issue 5): a gRPC proxy in front of the
// reference server that breaks exactly one guarantee. Each run records the
// conformance workload through the proxy and checks it; the checker must
// name the broken property, and nothing the fault does not explain. The same
// proxy left unmodified must pass, which guards the proxy itself.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// watchHook sees every response the backend sends on one watch stream, in
// order, and decides what the client gets instead: send forwards a response
// to the client. A faithful hook is `return send(resp)`.
type watchHook func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error

// mutant is what a broken proxy changes; its zero value changes nothing.
type mutant struct {
	// watch, when set, makes the hook of one watch stream.
	watch func(s *watchStream) watchHook
	// rangeNow, when set, answers the Range requests at revision 0.
	rangeNow func(ctx context.Context, backend pb.KVClient, req *pb.RangeRequest) (*pb.RangeResponse, error)
	// create, when set, is called before a client's watch creation is
	// forwarded; it may delay it.
	create func(ctx context.Context, backend pb.KVClient, c *pb.WatchCreateRequest)
}

// strikes decides which of a mutant's opportunities it takes — the first,
// then every every-th, so that it strikes early and often — and counts them.
type strikes struct {
	every                  int64
	opportunities, applied atomic.Int64
}

func (s *strikes) take() bool { return (s.opportunities.Add(1)-1)%s.every == 0 }

// proxy serves etcd's KV, Watch, Maintenance (Status) and Cluster
// (MemberList) by forwarding to a backend, through a mutant.
type proxy struct {
	grpc *grpc.Server
	conn *grpc.ClientConn
	addr string
}

func startProxy(t *testing.T, backend string, m *mutant) *proxy {
	t.Helper()
	conn, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	p := &proxy{grpc: grpc.NewServer(), conn: conn, addr: l.Addr().String()}
	pb.RegisterKVServer(p.grpc, &kvProxy{backend: pb.NewKVClient(conn), m: m})
	pb.RegisterWatchServer(p.grpc, &watchProxy{backend: pb.NewWatchClient(conn), kv: pb.NewKVClient(conn), m: m})
	pb.RegisterMaintenanceServer(p.grpc, &maintenanceProxy{backend: pb.NewMaintenanceClient(conn)})
	pb.RegisterClusterServer(p.grpc, &clusterProxy{backend: pb.NewClusterClient(conn), urls: []string{p.endpoint()}})
	go p.grpc.Serve(l)
	return p
}

func (p *proxy) endpoint() string { return "http://" + p.addr }

func (p *proxy) close() {
	p.grpc.Stop()
	p.conn.Close()
}

type kvProxy struct {
	pb.UnimplementedKVServer
	backend pb.KVClient
	m       *mutant
}

func (p *kvProxy) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if p.m.rangeNow != nil && r.Revision == 0 {
		return p.m.rangeNow(ctx, p.backend, r)
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
	m       *mutant
}

// watchStream is one proxied Watch stream: the client's requests go to the
// backend, and the backend's responses to the client through the mutant's
// hook. A creation that leaves the ID to the server (watch_id 0, as clientv3
// does) is given one by the proxy — 1, 2, … — so the IDs are the same on
// both sides, and an ID is never used twice on the stream (silentCompaction
// creates a watch again under its old ID). Everything else is forwarded
// unchanged.
type watchStream struct {
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
	s := &watchStream{client: client, backend: backend, live: make(map[int64]*pb.WatchCreateRequest)}
	hook := watchHook(func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error { return send(resp) })
	if p.m.watch != nil {
		hook = p.m.watch(s)
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
func (s *watchStream) forwardRequests(ctx context.Context, kv pb.KVClient, m *mutant) error {
	for {
		req, err := s.client.Recv()
		if c := req.GetCreateRequest(); err == nil && c != nil && m.create != nil {
			m.create(ctx, kv, c)
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

// recreate creates the client's watch id again on the backend, from
// revision from, under the same ID (free: the backend has just cancelled
// the watch). It reports false when the client has cancelled the watch.
func (s *watchStream) recreate(id, from int64) (bool, error) {
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

// isRecreating reports whether a watch the proxy re-creates is not created
// yet, as far as the responses the hook has seen go.
func (s *watchStream) isRecreating() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recreating > 0
}

// The mutants. Each breaks one guarantee, and nothing else.

// dropEvent drops an event response that falls between two others of the
// same watch: the stream shows a gap between two delivered events. SPEC §3.3
// Reliable.
//
// A candidate — not the watch's first event response — is held until the
// backend's next response: if that is the same watch's next event response,
// the candidate is dropped; otherwise it is forwarded after all (so no
// progress notification or cancel ever follows a gap, which would be
// another property's business).
func dropEvent(st *strikes) *mutant {
	return &mutant{watch: func(*watchStream) watchHook {
		hadEvents := make(map[int64]bool)
		var held *pb.WatchResponse
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			if h := held; h != nil {
				held = nil
				if len(resp.Events) > 0 && resp.WatchId == h.WatchId {
					st.applied.Add(1)
					return send(resp)
				}
				if err := send(h); err != nil {
					return err
				}
			}
			if len(resp.Events) > 0 {
				if hadEvents[resp.WatchId] && st.take() {
					held = resp
					return nil
				}
				hadEvents[resp.WatchId] = true
			}
			return send(resp)
		}
	}}
}

// duplicateEvent sends an event response twice in a row. SPEC §3.2 Unique;
// the shape of etcd#17247.
//
// Only a response of one revision: the copy of a response of several would
// start below the revision just delivered, which SPEC §3 ("One fault, one
// name") names Ordered before Unique — the validator keeps no memory of the
// revisions it has closed.
func duplicateEvent(st *strikes) *mutant {
	return &mutant{watch: func(*watchStream) watchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			if oneRevision(resp.Events) && st.take() {
				st.applied.Add(1)
				if err := send(resp); err != nil {
					return err
				}
			}
			return send(resp)
		}
	}}
}

// reorderEvents reverses the events of a response that carries two or more:
// of several revisions (a catch-up batch), or several of one revision (a
// multi-key transaction). SPEC §3.1 Ordered; the shape of etcd#15271.
func reorderEvents(st *strikes) *mutant {
	return &mutant{watch: func(*watchStream) watchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			if len(resp.Events) >= 2 && st.take() {
				st.applied.Add(1)
				slices.Reverse(resp.Events)
			}
			return send(resp)
		}
	}}
}

// splitRevision sends the events of a response whose events all share one
// revision (a multi-key transaction) as two responses. SPEC §3.4 Atomic.
func splitRevision(st *strikes) *mutant {
	return &mutant{watch: func(*watchStream) watchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			evs := resp.Events
			if len(evs) < 2 || !oneRevision(evs) || !st.take() {
				return send(resp)
			}
			st.applied.Add(1)
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

// progressBeforeEvents sends, before an event response with header revision
// R, a progress notification at R for the same watch: it claims events it
// has not delivered. SPEC §3.6 Bookmarkable; the shape of etcd#15220.
//
// Only when R is at least every header revision the stream carried so far:
// a notification that went back would break §3.12 MonotonicRevision as
// well. (R is at least the event revisions, so never below the watch's
// start − 1, where it would be §3.10 StartRevision's.)
func progressBeforeEvents(st *strikes) *mutant {
	return &mutant{watch: func(*watchStream) watchHook {
		var maxHeader int64
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			r := resp.Header.GetRevision()
			if len(resp.Events) > 0 && r >= maxHeader && st.take() {
				st.applied.Add(1)
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

// slowCreates is a faithful proxy that takes its time to create a watch
// with a start revision: it waits (up to a second) until a compaction has
// passed the start by slowMargin revisions, so that the backend cancels the
// watch with CompactRevision, as it must. A server may be that slow (SPEC §6:
// no deadline). The workload alone seldom needs compacted history; this gives
// silentCompaction cancels to swallow, and the margin makes it likely that
// the history they skip holds events the watch matches — a skip of nothing
// cannot be seen. st counts the creations delayed until compacted.
func slowCreates(st *strikes) func(context.Context, pb.KVClient, *pb.WatchCreateRequest) {
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
				st.opportunities.Add(1)
			}
			return // compacted, or the stream is gone
		}
	}
}

// silentCompaction swallows the cancel of a watch that needs compacted
// history, creates the watch again from the compact revision, and forwards
// its events under the original ID: the client never learns that history
// was skipped. SPEC §3.11 CompactedCancel; the shape of etcd#17529.
//
// It creates watches from the past slowly (slowCreates), so that there are
// such cancels; the control run "slow creates" shows that this alone breaks
// nothing. Between the backend's cancel and its creating the watch again,
// the watch does not exist there, and a progress notification the backend
// sends then says nothing about it: the proxy drops those (as a server may,
// SPEC §6), or the re-created watch's catch-up would also break §3.6
// Bookmarkable.
func silentCompaction(st *strikes) *mutant {
	return &mutant{create: slowCreates(&strikes{every: 1}), watch: func(s *watchStream) watchHook {
		return func(resp *pb.WatchResponse, send func(*pb.WatchResponse) error) error {
			progress := len(resp.Events) == 0 && !resp.Created && !resp.Canceled && resp.CompactRevision == 0
			if progress && s.isRecreating() {
				return nil
			}
			if resp.Canceled && resp.CompactRevision != 0 && st.take() {
				ok, err := s.recreate(resp.WatchId, resp.CompactRevision)
				if ok {
					st.applied.Add(1)
					return err
				}
			}
			return send(resp)
		}
	}}
}

// staleRead answers a Range at the current revision with what the range
// held three revisions earlier, under the current header revision. SPEC
// §2.7 Linearizable; the shape of etcd#20418.
//
// Only when the two answers differ (an identical one could not be caught),
// and when the older revision is still readable.
func staleRead(st *strikes) *mutant {
	return &mutant{rangeNow: func(ctx context.Context, backend pb.KVClient, req *pb.RangeRequest) (*pb.RangeResponse, error) {
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
		if proto.Equal(stale, cur) || !st.take() {
			return cur, nil
		}
		st.applied.Add(1)
		return stale, nil
	}}
}

// TestBrokenServers runs the workload through each broken proxy and demands
// that the checker reports the property broken and nothing else — no mutant
// needs an allowance for a second name — and that the faithful proxies pass.
func TestBrokenServers(t *testing.T) {
	for _, tc := range []struct {
		name string
		// want is the property the mutant breaks; "" for a faithful proxy.
		want spec.Property
		// every: the mutant takes its 1st opportunity, then every every-th.
		every  int64
		mutant func(*strikes) *mutant
		// provokes marks a faithful proxy that must have found
		// opportunities, or it controls nothing.
		provokes bool
		// noCompaction runs without compaction. A skipped event that a
		// compaction overtakes before the client reads on is, by SPEC §3
		// "One fault, one name", CompactedCancel rather than Reliable or
		// Bookmarkable — and the trace records when the client read, which
		// a slow consumer delays at will. Without compaction the fault has
		// exactly one name.
		noCompaction bool
		seed         int64
	}{
		// The proxy itself: forwarding changes nothing. SPEC §2–§3.
		{name: "faithful", every: 1, mutant: func(*strikes) *mutant { return &mutant{} }, seed: 20},
		// The proxy creating watches with a start revision only once a
		// compaction has overtaken it (silentCompaction's trigger): the
		// backend cancels them with CompactRevision, as it must, and nothing
		// is broken. SPEC §3.11.
		{name: "slow creates", every: 1, mutant: func(st *strikes) *mutant { return &mutant{create: slowCreates(st)} }, provokes: true, seed: 26},
		// SPEC §3.3 Reliable: a dropped event between two delivered ones.
		{name: "drop an event", want: spec.Reliable, every: 2, mutant: dropEvent, noCompaction: true, seed: 21},
		// SPEC §3.2 Unique; the shape of etcd#17247.
		{name: "duplicate an event", want: spec.Unique, every: 3, mutant: duplicateEvent, seed: 22},
		// SPEC §3.1 Ordered; the shape of etcd#15271.
		{name: "reorder events", want: spec.Ordered, every: 2, mutant: reorderEvents, seed: 23},
		// SPEC §3.4 Atomic.
		{name: "split a revision", want: spec.Atomic, every: 2, mutant: splitRevision, seed: 24},
		// SPEC §3.6 Bookmarkable; the shape of etcd#15220.
		{name: "progress before its events", want: spec.Bookmarkable, every: 3, mutant: progressBeforeEvents, noCompaction: true, seed: 25},
		// SPEC §3.11 CompactedCancel; the shape of etcd#17529.
		{name: "silent compaction", want: spec.CompactedCancel, every: 1, mutant: silentCompaction, seed: 26},
		// SPEC §2.7 Linearizable; the shape of etcd#20418. A history that is
		// not linearizable has no committed history to check watches
		// against, so nothing else can be reported.
		{name: "stale read", want: spec.Linearizable, every: 3, mutant: staleRead, seed: 27},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &strikes{every: tc.every}
			cfg := Config{Duration: 2 * time.Second, Clients: 4, Watchers: 4, Seed: tc.seed}
			if tc.noCompaction {
				cfg.CompactEvery = -1
			}
			tr, raw, stats := recordBroken(t, tc.mutant(st), cfg)
			t.Logf("stats %+v; mutant: %d opportunities, %d applied", stats, st.opportunities.Load(), st.applied.Load())
			if tc.provokes && st.opportunities.Load() == 0 {
				t.Fatal("the proxy found no opportunity: the control proves nothing; change the seed or the duration")
			}
			if tc.want != "" && st.applied.Load() == 0 {
				t.Fatalf("the run gave the mutant no opportunity (%d seen, none applied): it broke nothing, so it proves nothing; change the seed or the duration",
					st.opportunities.Load())
			}
			res, err := linearizability.Check(tr, linearizability.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := make(map[spec.Property]int)
			for _, v := range res.Violations {
				got[v.Property]++
			}
			t.Logf("verdict %s via %s; violations %v", res.Verdict, res.Method, got)
			ok := true
			if tc.want != "" && got[tc.want] == 0 {
				ok = false
				t.Errorf("%s was broken %d times, but the checker did not report it", tc.want, st.applied.Load())
			}
			if tc.want != spec.Linearizable && res.Verdict != linearizability.Linearizable {
				ok = false
				t.Errorf("verdict %s: the mutant broke no key-value guarantee", res.Verdict)
			}
			for _, v := range res.Violations {
				if v.Property != tc.want {
					ok = false
					t.Errorf("unexpected %s: %s", v.Where, v.Violation)
				}
			}
			if !ok {
				keepTrace(t, raw)
			}
		})
	}
}

// recordBroken starts the reference server behind a proxy with mutant m,
// runs the workload through the proxy, and returns the trace, as parsed and
// as recorded.
func recordBroken(t *testing.T, m *mutant, cfg Config) (*traces.Trace, []byte, Stats) {
	t.Helper()
	srv, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := startProxy(t, srv.Addr(), m)
	defer p.close()
	cfg.Endpoints = []string{p.endpoint()}
	cfg.System = "watchspec reference server behind a broken proxy (" + t.Name() + ")"
	var buf bytes.Buffer
	stats, err := Record(context.Background(), cfg, &buf)
	if err != nil {
		t.Fatal(err)
	}
	raw := bytes.Clone(buf.Bytes())
	tr, err := traces.Read(&buf, t.Name()+".ndjson")
	if err != nil {
		t.Fatal(err)
	}
	return tr, raw, stats
}

// keepTrace saves the trace of a failed run, as recorded and gzipped, in
// the test's artifact directory (kept after the test with go test
// -artifacts).
func keepTrace(t *testing.T, raw []byte) {
	path := filepath.Join(t.ArtifactDir(), strings.ReplaceAll(t.Name(), "/", "_")+".ndjson.gz")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw)
	err := zw.Close()
	if err == nil {
		err = os.WriteFile(path, z.Bytes(), 0o644)
	}
	if err != nil {
		t.Logf("saving the trace: %v", err)
		return
	}
	t.Logf("trace saved as %s", path)
}
