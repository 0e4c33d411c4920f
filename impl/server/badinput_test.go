package server

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMalformedRequests sends malformed and abusive requests and checks that
// each gets the gRPC code and message etcd gives (etcd-facts §1-§9; the
// rpctypes errors are etcd's own values), that none crashes the server (a
// panic in a handler would end the test binary), and that afterwards the
// store holds exactly what the well-formed writes wrote: the failed
// requests changed nothing (SPEC §2.1: failed requests leave the revision
// unchanged).
func TestMalformedRequests(t *testing.T) {
	const maxBytes = 1024
	opts := testOptions()
	opts.MaxTxnOps = 4
	opts.MaxRequestBytes = maxBytes
	r := startTest(t, opts)
	rc := dialRaw(t, r.Addr())
	ctx := testCtx(t)

	// The state the cases run against: a=1 at 2, b=2 at 3, compacted at 2.
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}} {
		if _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte(kv[0]), Value: []byte(kv[1])}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rc.kv.Compact(ctx, &pb.CompactionRequest{Revision: 2}); err != nil {
		t.Fatal(err)
	}
	key := func(s string) []byte { return []byte(s) }
	put := func(k, v string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key(k), Value: key(v)}}}
	}
	get := func(k string, rev int64) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key(k), Revision: rev}}}
	}
	del := func(k, end string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key(k), RangeEnd: key(end)}}}
	}
	nested := func(ops ...*pb.RequestOp) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: ops}}}
	}
	cmp := func(k string) *pb.Compare {
		return &pb.Compare{Key: key(k), Target: pb.Compare_VERSION, TargetUnion: &pb.Compare_Version{}}
	}
	big := strings.Repeat("x", maxBytes)

	cases := []struct {
		name string
		call func() error
		// want is the error (rpctypes' value: code and message); a nil want
		// with code set checks the code only (gRPC's own errors).
		want error
		code codes.Code
	}{
		// Range: only the key and the sort options are checked (v3rpc/key.go:153-167).
		{"range empty key", func() error { _, err := rc.kv.Range(ctx, &pb.RangeRequest{}); return err }, rpctypes.ErrGRPCEmptyKey, 0},
		{"range sort order 7", func() error {
			_, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key("a"), SortOrder: 7})
			return err
		}, rpctypes.ErrGRPCInvalidSortOption, 0},
		{"range sort target -1", func() error {
			_, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key("a"), SortTarget: -1})
			return err
		}, rpctypes.ErrGRPCInvalidSortOption, 0},
		{"range future revision", func() error {
			_, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key("a"), Revision: 4})
			return err
		}, rpctypes.ErrGRPCFutureRev, 0},
		{"range compacted revision", func() error {
			_, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key("a"), Revision: 1})
			return err
		}, rpctypes.ErrGRPCCompacted, 0},
		{"range end before key", func() error {
			resp, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key("b"), RangeEnd: key("a")})
			if err == nil && (len(resp.Kvs) != 0 || resp.Count != 0) {
				return fmt.Errorf("got %v, want nothing", resp.Kvs)
			}
			return err
		}, nil, codes.OK},
		{"range negative revision and limit", func() error {
			resp, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key("a"), RangeEnd: key("c"), Revision: -7, Limit: -3})
			if err == nil && (len(resp.Kvs) != 2 || resp.More) {
				return fmt.Errorf("got %v more %v, want a and b", resp.Kvs, resp.More)
			}
			return err
		}, nil, codes.OK},
		{"range huge key: not size-checked", func() error {
			_, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key(big + big)})
			return err
		}, nil, codes.OK},
		{"range beyond the gRPC limit", func() error {
			_, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key(strings.Repeat("k", maxBytes+GRPCOverheadBytes+1))})
			return err
		}, nil, codes.ResourceExhausted},

		// Put (v3rpc/key.go:182-193, txn/put.go, v3_server.go:1093-1099).
		{"put empty key", func() error { _, err := rc.kv.Put(ctx, &pb.PutRequest{Value: key("v")}); return err }, rpctypes.ErrGRPCEmptyKey, 0},
		{"put ignore_value with a value", func() error {
			_, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("a"), Value: key("v"), IgnoreValue: true})
			return err
		}, rpctypes.ErrGRPCValueProvided, 0},
		{"put ignore_lease with a lease", func() error {
			_, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("a"), Lease: 5, IgnoreLease: true})
			return err
		}, rpctypes.ErrGRPCLeaseProvided, 0},
		{"put with a lease", func() error { _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("a"), Lease: 5}); return err }, rpctypes.ErrGRPCLeaseNotFound, 0},
		{"put ignore_value of a missing key", func() error {
			_, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("zz"), IgnoreValue: true})
			return err
		}, rpctypes.ErrGRPCKeyNotFound, 0},
		{"put ignore_lease of a missing key", func() error {
			_, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("zz"), Value: key("v"), IgnoreLease: true})
			return err
		}, rpctypes.ErrGRPCKeyNotFound, 0},
		{"put oversized value", func() error { _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("a"), Value: key(big)}); return err }, rpctypes.ErrGRPCRequestTooLarge, 0},
		{"put oversized key", func() error { _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key(big)}); return err }, rpctypes.ErrGRPCRequestTooLarge, 0},
		{"put oversized with a lease: size first", func() error {
			_, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("a"), Value: key(big), Lease: 5})
			return err
		}, rpctypes.ErrGRPCRequestTooLarge, 0},
		{"put beyond the gRPC limit", func() error {
			_, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("a"), Value: key(strings.Repeat("v", maxBytes+GRPCOverheadBytes+1))})
			return err
		}, nil, codes.ResourceExhausted},

		// DeleteRange: only the key (v3rpc/key.go:195-200), and the size.
		{"delete empty key", func() error { _, err := rc.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{RangeEnd: key("z")}); return err }, rpctypes.ErrGRPCEmptyKey, 0},
		{"delete oversized range end", func() error {
			_, err := rc.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: key("y"), RangeEnd: key("y" + big)})
			return err
		}, rpctypes.ErrGRPCRequestTooLarge, 0},
		{"delete end before key", func() error {
			resp, err := rc.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: key("b"), RangeEnd: key("a")})
			if err == nil && (resp.Deleted != 0 || resp.Header.Revision != 3) {
				return fmt.Errorf("deleted %d at %d, want nothing at 3", resp.Deleted, resp.Header.Revision)
			}
			return err
		}, nil, codes.OK},

		// Txn (v3rpc/key.go:118-137,202-332, txn/txn.go checkTxn).
		{"txn 5 puts, max 4", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("t1", ""), put("t2", ""), put("t3", ""), put("t4", ""), put("t5", "")}})
			return err
		}, rpctypes.ErrGRPCTooManyOps, 0},
		{"txn 5 compares, max 4", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{cmp("a"), cmp("a"), cmp("a"), cmp("a"), cmp("a")}})
			return err
		}, rpctypes.ErrGRPCTooManyOps, 0},
		{"txn nested over the remaining budget", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("t1", ""), put("t2", ""), nested(put("t3", ""), put("t4", ""), put("t5", ""))}})
			return err
		}, rpctypes.ErrGRPCTooManyOps, 0},
		{"txn empty op", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Failure: []*pb.RequestOp{{}}})
			return err
		}, rpctypes.ErrGRPCKeyNotFound, 0},
		{"txn compare empty key", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{cmp("")}})
			return err
		}, rpctypes.ErrGRPCEmptyKey, 0},
		{"txn put empty key", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("", "")}})
			return err
		}, rpctypes.ErrGRPCEmptyKey, 0},
		{"txn duplicate put", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Failure: []*pb.RequestOp{put("t", "1"), put("t", "2")}})
			return err
		}, rpctypes.ErrGRPCDuplicateKey, 0},
		{"txn put under a from-key delete (etcd#22445, SPEC §2.5)", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{del("a", "\x00"), put("b", "1")}})
			return err
		}, rpctypes.ErrGRPCDuplicateKey, 0},
		{"txn future range in the taken branch", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("t", "1"), get("a", 9)}})
			return err
		}, rpctypes.ErrGRPCFutureRev, 0},
		{"txn compacted range in a nested transaction", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("t", "1"), nested(get("a", 1))}})
			return err
		}, rpctypes.ErrGRPCCompacted, 0},
		{"txn oversized", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("t", big)}})
			return err
		}, rpctypes.ErrGRPCRequestTooLarge, 0},
		{"txn read-only with a huge key: not size-checked", func() error {
			_, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{get(big, 0)}})
			return err
		}, nil, codes.OK},

		// Compact (mvcc/kvstore.go:197-222 updateCompactRev).
		{"compact at the compact revision", func() error {
			_, err := rc.kv.Compact(ctx, &pb.CompactionRequest{Revision: 2})
			return err
		}, rpctypes.ErrGRPCCompacted, 0},
		{"compact negative", func() error {
			_, err := rc.kv.Compact(ctx, &pb.CompactionRequest{Revision: -5})
			return err
		}, rpctypes.ErrGRPCCompacted, 0},
		{"compact future", func() error {
			_, err := rc.kv.Compact(ctx, &pb.CompactionRequest{Revision: 4})
			return err
		}, rpctypes.ErrGRPCFutureRev, 0},
	}
	for _, tc := range cases {
		err := tc.call()
		want := tc.code
		if tc.want != nil {
			want = status.Code(tc.want)
		}
		if got := status.Code(err); got != want {
			t.Errorf("%s: %v (code %v), want code %v", tc.name, err, got, want)
			continue
		}
		if tc.want != nil && status.Convert(err).Message() != status.Convert(tc.want).Message() {
			t.Errorf("%s: message %q, want %q", tc.name, status.Convert(err).Message(), status.Convert(tc.want).Message())
		}
	}

	// Nothing above wrote: the revision is still 3, the data a=1, b=2.
	resp, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: key("\x00"), RangeEnd: key("\x00")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != 3 || kvsString(resp.Kvs) != `["a"="1"/c2/m2/v1/l0 "b"="2"/c3/m3/v1/l0]` {
		t.Errorf("after the malformed requests: revision %d, %s; want 3 with a=1, b=2", resp.Header.Revision, kvsString(resp.Kvs))
	}
	// And the store still writes.
	if p, err := rc.kv.Put(ctx, &pb.PutRequest{Key: key("c"), Value: key("3")}); err != nil || p.Header.Revision != 4 {
		t.Errorf("put after the malformed requests: %v, %v; want revision 4", p, err)
	}
}

// TestMalformedWatchRequests sends malformed watch requests on one stream:
// each is answered as etcd answers it (v3rpc/watch.go:266-400) and the
// stream stays usable. Silence (a cancel of an unknown ID, an empty
// request) is checked by order, not by waiting: the next response must be
// the answer to the next request.
func TestMalformedWatchRequests(t *testing.T) {
	r := startTest(t, testOptions())
	rc := dialRaw(t, r.Addr())
	w := openWatch(t, rc)
	steps := []struct {
		send func()
		want string // the shape of the next response
	}{
		{func() { w.create(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 3}) }, "id=3 rev=1 created"},
		{func() { w.create(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 3}) },
			`id=-1 rev=1 created canceled reason="mvcc: duplicate watch ID provided on the WatchStream"`},
		{func() { w.create(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: -1}) },
			`id=-1 rev=1 created canceled reason="etcdserver: mvcc: required revision has been compacted"`},
		{func() { w.create(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("a")}) },
			`id=-1 rev=1 created canceled reason="mvcc: watcher range is empty"`},
		{func() { w.create(&pb.WatchCreateRequest{RangeEnd: []byte("\x00")}) }, "id=0 rev=1 created"},
		{func() {
			w.cancel(42)               // unknown: no response (watch.go:372-394)
			w.cancel(-1)               // unknown: no response
			w.send(&pb.WatchRequest{}) // empty: ignored (watch.go:401-406)
			w.cancel(3)
		}, "id=3 rev=1 canceled"},
		{func() { w.cancel(3) }, ""}, // already cancelled: nothing
		{func() { w.progress() }, "id=-1 rev=1"},
	}
	for i, st := range steps {
		st.send()
		if st.want == "" {
			continue
		}
		if got := shape(w.recv()); got != st.want {
			t.Errorf("step %d: %s, want %s", i, got, st.want)
		}
	}
}
