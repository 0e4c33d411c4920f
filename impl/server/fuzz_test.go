package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/watchspec/watchspec/impl/store"
)

// FuzzServer decodes its input into a sequence of requests — ranges, puts,
// deletes, transactions (nested ones too), compactions, and watch
// creations, cancels and progress requests on two streams — and sends them
// to a fresh server over a loopback gRPC connection. It checks that
//
//   - nothing panics (a panic in a handler ends the fuzz process);
//   - every error is one etcd gives (an rpctypes error, or gRPC's
//     ResourceExhausted for an oversized message): never Unknown or
//     Internal;
//   - the revision moves exactly as SPEC §2.1 says: +1 for a put, a delete
//     that removed something, or a transaction whose branch wrote; not at
//     all for reads, failures, compactions and deletes of nothing;
//   - every watch stream is well formed: a created response before a
//     watch's events, none after its cancel, revisions in order, header
//     revisions never below the events (SPEC §3.1, §3.12), rejections with
//     WatchId -1 and etcd's reason;
//   - afterwards the store answers consistently: a full range is sorted
//     and self-consistent, each key reads back the same alone, a new write
//     lands at the next revision — and after closing and reopening the data
//     directory the store holds exactly the same state (no corruption).
//
// Run it with: go test ./impl/server -run '^$' -fuzz '^FuzzServer$' -fuzztime 60s
func FuzzServer(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x02\x00\x05\x01\x03\x01\x06\x00\x00\x02\x02\x00\x00\x04\x02\x05\x00\x00\x00\x00\x00"))
	f.Add([]byte("\x05\x00\x02\x00\x02\x01\x00\x01\x02\x07\x00\x01\x03\x02\x00\x00\x04\x03\x06\x00\x03\x00\x07\x01"))
	f.Add([]byte("\x03\x02\x03\x01\x02\x01\x01\x02\x02\x03\x00\x00\x01\x04\x01\x01\x00\x00\x03\x04\x02\x02\x00"))
	f.Add([]byte("\x01\x02\x00\xff\x00\x01\x03\x00\x05\x08\x00\x04\x01\x00\x05\x00\x04\x02\xfe\x00\x00\x01\x05\x00"))
	f.Fuzz(fuzzOnce)
}

// The vocabulary the decoder draws from: keys and range ends that hit the
// edge cases (empty, "\x00", prefixes, ends at or below keys, 0xff).
var (
	fuzzKeys   = []string{"", "\x00", "a", "a/1", "a/2", "b", "c", "\xff", strings.Repeat("k", 300)}
	fuzzEnds   = []string{"", "\x00", "a", "a0", "b", "c", "z", "\xff\xff", "a/"}
	fuzzValues = []string{"", "v", "w", "value", strings.Repeat("x", 5000)} // the last is over the fuzz limit
)

const fuzzMaxRequestBytes = 4096

// decoder reads an input byte by byte; past the end it reads zeros.
type decoder struct {
	b []byte
	i int
}

func (d *decoder) more() bool { return d.i < len(d.b) }

func (d *decoder) byte() byte {
	if d.i >= len(d.b) {
		return 0
	}
	d.i++
	return d.b[d.i-1]
}

func (d *decoder) pick(n int) int { return int(d.byte()) % n }
func (d *decoder) flag() bool     { return d.byte()&1 == 1 }
func (d *decoder) small() int64   { return int64(int8(d.byte())) } // -128..127
func (d *decoder) key() []byte    { return []byte(fuzzKeys[d.pick(len(fuzzKeys))]) }
func (d *decoder) end() []byte    { return []byte(fuzzEnds[d.pick(len(fuzzEnds))]) }
func (d *decoder) value() []byte  { return []byte(fuzzValues[d.pick(len(fuzzValues))]) }
func (d *decoder) rev(cur int64) int64 {
	// Mostly revisions near the current one, sometimes anything.
	v := d.small()
	if v >= -4 && v <= 8 {
		return cur - 4 + v
	}
	return v
}

func (d *decoder) rangeReq(cur int64) *pb.RangeRequest {
	r := &pb.RangeRequest{Key: d.key(), RangeEnd: d.end(), Revision: d.rev(cur), Limit: d.small() % 4}
	switch opts := d.byte(); {
	case opts&1 != 0:
		r.SortOrder = pb.RangeRequest_SortOrder(d.pick(4))   // 3 is invalid
		r.SortTarget = pb.RangeRequest_SortTarget(d.pick(6)) // 5 is invalid
	case opts&2 != 0:
		r.KeysOnly = true
	case opts&4 != 0:
		r.CountOnly = true
	case opts&8 != 0:
		r.MinModRevision, r.MaxCreateRevision = d.small(), d.small()
	}
	return r
}

func (d *decoder) putReq() *pb.PutRequest {
	r := &pb.PutRequest{Key: d.key(), Value: d.value()}
	switch d.pick(8) {
	case 0:
		r.PrevKv = true
	case 1:
		r.IgnoreValue = true
	case 2:
		r.IgnoreLease = true
	case 3:
		r.Lease = 7
	}
	return r
}

func (d *decoder) txnReq(cur int64, depth int) *pb.TxnRequest {
	t := &pb.TxnRequest{}
	for range d.pick(3) {
		c := &pb.Compare{Key: d.key(), Result: pb.Compare_CompareResult(d.pick(5)), Target: pb.Compare_CompareTarget(d.pick(6))}
		switch c.Target {
		case pb.Compare_VALUE:
			c.TargetUnion = &pb.Compare_Value{Value: d.value()}
		case pb.Compare_VERSION:
			c.TargetUnion = &pb.Compare_Version{Version: d.small()}
		default:
			c.TargetUnion = &pb.Compare_ModRevision{ModRevision: d.rev(cur)}
		}
		if d.pick(4) == 0 {
			c.RangeEnd = d.end()
		}
		t.Compare = append(t.Compare, c)
	}
	for b := range 2 {
		var ops []*pb.RequestOp
		for range d.pick(4) {
			var op *pb.RequestOp
			switch d.pick(5) {
			case 0:
				op = &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: d.rangeReq(cur)}}
			case 1:
				op = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: d.putReq()}}
			case 2:
				op = &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: d.key(), RangeEnd: d.end(), PrevKv: d.flag()}}}
			case 3:
				if depth < 2 {
					op = &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: d.txnReq(cur, depth+1)}}
				} else {
					op = &pb.RequestOp{}
				}
			default:
				op = &pb.RequestOp{}
			}
			ops = append(ops, op)
		}
		if b == 0 {
			t.Success = ops
		} else {
			t.Failure = ops
		}
	}
	return t
}

// wrote reports whether a successful transaction response wrote: a put,
// or a delete that removed something, on its path.
func wrote(r *pb.TxnResponse) bool {
	for _, op := range r.Responses {
		switch {
		case op.GetResponsePut() != nil:
			return true
		case op.GetResponseDeleteRange() != nil && op.GetResponseDeleteRange().Deleted > 0:
			return true
		case op.GetResponseTxn() != nil && wrote(op.GetResponseTxn()):
			return true
		}
	}
	return false
}

// etcdErrors are the errors a request may fail with: etcd's, by message.
var etcdErrors = map[string]codes.Code{}

func init() {
	for _, e := range []error{rpctypes.ErrGRPCEmptyKey, rpctypes.ErrGRPCKeyNotFound, rpctypes.ErrGRPCValueProvided,
		rpctypes.ErrGRPCLeaseProvided, rpctypes.ErrGRPCTooManyOps, rpctypes.ErrGRPCDuplicateKey,
		rpctypes.ErrGRPCInvalidSortOption, rpctypes.ErrGRPCCompacted, rpctypes.ErrGRPCFutureRev,
		rpctypes.ErrGRPCRequestTooLarge, rpctypes.ErrGRPCLeaseNotFound} {
		st := status.Convert(e)
		etcdErrors[st.Message()] = st.Code()
	}
}

// fuzzStream collects the responses of one watch stream.
type fuzzStream struct {
	ws   pb.Watch_WatchClient
	mu   sync.Mutex
	got  []*pb.WatchResponse
	done chan struct{}
}

func (s *fuzzStream) read() {
	defer close(s.done)
	for {
		r, err := s.ws.Recv()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.got = append(s.got, r)
		s.mu.Unlock()
	}
}

// check validates the responses received, in order.
func (s *fuzzStream) check(t *testing.T, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	active := map[int64]int64{} // watch ID → revision of its last event
	var hdr int64
	for i, r := range s.got {
		where := fmt.Sprintf("%s response %d (%s)", name, i, shape(r))
		if h := r.GetHeader().GetRevision(); h != 0 {
			if h < hdr {
				t.Fatalf("%s: header revision %d after %d (SPEC §3.12)", where, h, hdr)
			}
			hdr = h
		}
		switch {
		case r.Created && r.Canceled:
			if r.WatchId != -1 || r.CancelReason == "" {
				t.Fatalf("%s: a rejection must have WatchId -1 and a reason (v3rpc/watch.go:353-365)", where)
			}
		case r.Created:
			if _, ok := active[r.WatchId]; ok || r.WatchId < 0 {
				t.Fatalf("%s: created an ID in use or negative", where)
			}
			active[r.WatchId] = 0
		case r.Canceled:
			if _, ok := active[r.WatchId]; !ok {
				t.Fatalf("%s: cancel of a watch that is not active", where)
			}
			if r.CompactRevision != 0 && r.GetHeader().GetRevision() != 0 {
				t.Fatalf("%s: a compaction cancel has header revision 0 (v3rpc/watch.go:459-466)", where)
			}
			delete(active, r.WatchId)
		case len(r.Events) == 0:
			if r.WatchId != -1 {
				if _, ok := active[r.WatchId]; !ok {
					t.Fatalf("%s: progress for a watch that is not active", where)
				}
			}
		default:
			last, ok := active[r.WatchId]
			if !ok {
				t.Fatalf("%s: events for a watch that is not active", where)
			}
			for _, e := range r.Events {
				if e.Kv.ModRevision < last {
					t.Fatalf("%s: event at %d after one at %d (SPEC §3.1)", where, e.Kv.ModRevision, last)
				}
				if e.Kv.ModRevision > r.Header.Revision {
					t.Fatalf("%s: event at %d above the header (SPEC §3.12)", where, e.Kv.ModRevision)
				}
				if e.Type == mvccpb.DELETE && (len(e.Kv.Value) != 0 || e.Kv.CreateRevision != 0 || e.Kv.Version != 0) {
					t.Fatalf("%s: a DELETE carries only key and ModRevision (SPEC §2.2)", where)
				}
				last = e.Kv.ModRevision
			}
			active[r.WatchId] = last
		}
	}
}

func fuzzOnce(t *testing.T, data []byte) {
	dir := t.TempDir()
	var sopts store.Options
	sopts.KV.UnsafeNoFsync = true
	st, err := store.Open(dir, sopts)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{MaxRequestBytes: fuzzMaxRequestBytes, MaxTxnOps: 3}
	srv := New(st, opts)
	// Loopback TCP: grpc's bufconn keeps its pipes reachable after the
	// connection is closed, which a fuzzer running thousands of inputs in
	// one process cannot afford.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := pb.NewKVClient(conn)
	wctx, wcancel := context.WithCancel(ctx)
	var streams []*fuzzStream
	for range 2 {
		ws, err := pb.NewWatchClient(conn).Watch(wctx)
		if err != nil {
			t.Fatal(err)
		}
		s := &fuzzStream{ws: ws, done: make(chan struct{})}
		go s.read()
		streams = append(streams, s)
	}
	closeAll := func() {
		wcancel()
		for _, s := range streams {
			<-s.done
		}
		conn.Close()
		srv.Stop()
		<-served
	}

	rev := int64(1) // the revision the store must be at (SPEC §2.1)
	checkErr := func(what string, err error) {
		st, ok := status.FromError(err)
		if !ok {
			t.Fatalf("%s: not a gRPC status: %v", what, err)
		}
		if st.Code() == codes.ResourceExhausted {
			return // gRPC's own limit
		}
		if code, ok := etcdErrors[st.Message()]; !ok || code != st.Code() {
			t.Fatalf("%s: %v is not an error etcd gives", what, err)
		}
	}
	checkRev := func(what string, h *pb.ResponseHeader, want int64) {
		if h.GetRevision() != want {
			t.Fatalf("%s: header revision %d, want %d (SPEC §2.1)", what, h.GetRevision(), want)
		}
		if h.GetClusterId() != DefaultClusterID || h.GetMemberId() != DefaultMemberID {
			t.Fatalf("%s: header %v lacks the IDs", what, h)
		}
		rev = want
	}

	d := &decoder{b: data}
	for n := 0; d.more() && n < 64; n++ {
		switch op := d.pick(9); op {
		case 0:
			req := d.rangeReq(rev)
			r, err := kv.Range(ctx, req)
			if err != nil {
				checkErr(fmt.Sprintf("range %v", req), err)
				continue
			}
			checkRev(fmt.Sprintf("range %v", req), r.Header, rev)
			if !req.CountOnly && req.Limit <= 0 && req.MinModRevision == 0 && req.MaxCreateRevision == 0 && int64(len(r.Kvs)) != r.Count {
				t.Fatalf("range %v: %d keys, count %d", req, len(r.Kvs), r.Count)
			}
		case 1:
			req := d.putReq()
			r, err := kv.Put(ctx, req)
			if err != nil {
				checkErr(fmt.Sprintf("put %q", req.Key), err)
				continue
			}
			checkRev(fmt.Sprintf("put %q", req.Key), r.Header, rev+1)
		case 2:
			req := &pb.DeleteRangeRequest{Key: d.key(), RangeEnd: d.end(), PrevKv: d.flag()}
			r, err := kv.DeleteRange(ctx, req)
			if err != nil {
				checkErr(fmt.Sprintf("delete %v", req), err)
				continue
			}
			want := rev
			if r.Deleted > 0 {
				want++
			}
			if req.PrevKv && int64(len(r.PrevKvs)) != r.Deleted {
				t.Fatalf("delete %v: %d prev kvs for %d deleted", req, len(r.PrevKvs), r.Deleted)
			}
			checkRev(fmt.Sprintf("delete %v", req), r.Header, want)
		case 3:
			req := d.txnReq(rev, 0)
			r, err := kv.Txn(ctx, req)
			if err != nil {
				checkErr(fmt.Sprintf("txn %v", req), err)
				continue
			}
			want := rev
			if wrote(r) {
				want++
			}
			checkRev(fmt.Sprintf("txn %v", req), r.Header, want)
		case 4:
			c := d.rev(rev)
			r, err := kv.Compact(ctx, &pb.CompactionRequest{Revision: c})
			if err != nil {
				checkErr(fmt.Sprintf("compact %d", c), err)
				continue
			}
			checkRev(fmt.Sprintf("compact %d", c), r.Header, rev)
		case 5:
			c := &pb.WatchCreateRequest{Key: d.key(), RangeEnd: d.end(), StartRevision: d.rev(rev), PrevKv: d.flag(),
				Fragment: d.flag(), WatchId: d.small() % 4, ProgressNotify: d.flag()}
			for range d.pick(3) {
				c.Filters = append(c.Filters, pb.WatchCreateRequest_FilterType(d.pick(3)))
			}
			streams[d.pick(2)].ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}})
		case 6:
			streams[d.pick(2)].ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
				CancelRequest: &pb.WatchCancelRequest{WatchId: d.small() % 5}}})
		case 7:
			streams[d.pick(2)].ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{
				ProgressRequest: &pb.WatchProgressRequest{}}})
		default:
			streams[d.pick(2)].ws.Send(&pb.WatchRequest{})
		}
	}

	// Consistency afterwards.
	all, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	checkRev("final range", all.Header, rev)
	if int64(len(all.Kvs)) != all.Count {
		t.Fatalf("final range: %d keys, count %d", len(all.Kvs), all.Count)
	}
	for i, kvp := range all.Kvs {
		if i > 0 && string(all.Kvs[i-1].Key) >= string(kvp.Key) {
			t.Fatalf("final range not sorted: %q then %q", all.Kvs[i-1].Key, kvp.Key)
		}
		if kvp.CreateRevision <= 1 || kvp.CreateRevision > kvp.ModRevision || kvp.ModRevision > rev || kvp.Version < 1 {
			t.Fatalf("final range: inconsistent %s at revision %d", kvString(kvp), rev)
		}
		one, err := kv.Range(ctx, &pb.RangeRequest{Key: kvp.Key})
		if err != nil || len(one.Kvs) != 1 || kvString(one.Kvs[0]) != kvString(kvp) {
			t.Fatalf("get %q alone: %v %v, want %s", kvp.Key, one, err, kvString(kvp))
		}
	}
	p, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("final"), Value: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	checkRev("final put", p.Header, rev+1)
	all, err = kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	// Let each stream deliver what it can before checking it (bounded: a
	// progress request is not answered while a watch waits for a future
	// revision, and that is fine).
	for _, s := range streams {
		s.ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	for _, s := range streams {
		for time.Now().Before(deadline) {
			s.mu.Lock()
			n := len(s.got)
			done := n > 0 && s.got[n-1].WatchId == -1 && len(s.got[n-1].Events) == 0 && !s.got[n-1].Created
			s.mu.Unlock()
			if done {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	closeAll()
	for i, s := range streams {
		s.check(t, fmt.Sprint("stream ", i))
	}
	compact := st.CompactRevision()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The data directory reopens to the same state.
	st2, err := store.Open(dir, sopts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st2.Close()
	if st2.Revision() != rev || st2.CompactRevision() != compact {
		t.Fatalf("reopened at revision %d compact %d, want %d and %d", st2.Revision(), st2.CompactRevision(), rev, compact)
	}
	re, err := st2.Range(context.Background(), store.RangeRequest{Key: "\x00", RangeEnd: "\x00"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range re.KVs {
		got = append(got, kvString(toPBKV(&re.KVs[i])))
	}
	if strings.Join(got, " ") != strings.Trim(kvsString(all.Kvs), "[]") {
		t.Fatalf("reopened store holds %v, want %s", got, kvsString(all.Kvs))
	}
}
