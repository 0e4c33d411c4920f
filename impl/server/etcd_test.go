package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/watchspec/watchspec/internal/etcdtest"
)

// TestSameAsEtcd runs one script of etcdctl-style requests through clientv3
// (and, for the wire shapes clientv3 hides, a raw watch stream) against
// this server and against a real embedded etcd 3.7, and demands the same
// transcript from both: every revision, key-value, error code and text, and
// watch response shape. Header cluster and member IDs and raft terms are
// left out of the transcript; nothing else is normalised.
//
// The script avoids the documented differences (package doc): a progress
// request while a watch is catching up or before a future start revision,
// a negative watch ID, a from-key delete overlapping a put.
func TestSameAsEtcd(t *testing.T) {
	start := time.Now()
	cluster, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	t.Logf("etcd %s started in %v", etcdtest.Version, time.Since(start))
	r := startTest(t, testOptions())

	transcript := func(endpoint string) []string {
		e := &scriptEnv{t: t, cli: newClient(t, endpoint), raw: dialRaw(t, strings.TrimPrefix(endpoint, "http://"))}
		t0 := time.Now()
		e.run()
		t.Logf("%s: %d lines in %v", endpoint, len(e.out), time.Since(t0))
		return e.out
	}
	want := transcript(cluster.Endpoints[0])
	got := transcript(r.Endpoint())
	diffs := 0
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			diffs++
			t.Errorf("line %d:\n etcd:      %s\n watchspec: %s", i+1, w, g)
		}
	}
	if diffs == 0 && testing.Verbose() {
		t.Logf("transcript (%d lines):\n%s", len(got), strings.Join(got, "\n"))
	}
	// The documented differences (package doc, docs/SERVER.md), each
	// checked on both sides, so that a change of either is noticed.
	diff := func(endpoint string) []string {
		e := &scriptEnv{t: t, cli: newClient(t, endpoint), raw: dialRaw(t, strings.TrimPrefix(endpoint, "http://"))}
		e.differences()
		return e.out
	}
	wantEtcd := []string{
		`txn put under a from-key delete: rev=28 succeeded=true {delete rev=27 deleted=0 prev=[]} {put rev=28 prev=<nil>}`,
		`txn sibling put then delete: rev=29 succeeded=true {txn rev=0 succeeded=true {put rev=29 prev=<nil>}} {txn rev=0 succeeded=true {delete rev=29 deleted=1 prev=[]}}`,
		`raw progress, no watch, then create: id=1 rev=29 created`,
		`raw watch from the next revision: id=2 rev=29 created`,
		`raw progress, start at next revision, then create: id=3 rev=29 created`,
		`raw negative id: id=-5 rev=29 created`,
		`raw compacted: id=4 rev=29 created`,
		`raw compacted: id=4 rev=0 canceled compact=19`,
		`raw reuse compacted id: id=-1 rev=29 created canceled reason="mvcc: duplicate watch ID provided on the WatchStream"`,
	}
	wantOurs := []string{
		`txn put under a from-key delete: ERR InvalidArgument "etcdserver: duplicate key given in txn request"`,
		`txn sibling put then delete: ERR InvalidArgument "etcdserver: duplicate key given in txn request"`,
		`raw progress, no watch, then create: id=-1 rev=27`,
		`raw watch from the next revision: id=2 rev=27 created`,
		`raw progress, start at next revision, then create: id=-1 rev=27`,
		`raw negative id: id=-1 rev=27 created canceled reason="watchhub: watch ID must not be negative"`,
		`raw compacted: id=4 rev=27 created`,
		`raw compacted: id=4 rev=0 canceled compact=19`,
		`raw reuse compacted id: id=4 rev=27 created`,
	}
	for _, side := range []struct {
		name string
		got  []string
		want []string
	}{{"etcd", diff(cluster.Endpoints[0]), wantEtcd}, {"watchspec", diff(r.Endpoint()), wantOurs}} {
		if strings.Join(side.got, "\n") != strings.Join(side.want, "\n") {
			t.Errorf("documented differences, %s:\n got:\n%s\n want:\n%s", side.name, strings.Join(side.got, "\n"), strings.Join(side.want, "\n"))
		}
	}

	// The comparison means something only if the script ran: it has
	// errors, events and watch cancels in it.
	joined := strings.Join(want, "\n")
	for _, must := range []string{"compacted", "PUT:", "DELETE:", "canceled", "progress", "fragment", "future revision"} {
		if !strings.Contains(joined, must) {
			t.Errorf("etcd's transcript has no %q: the script did not run as designed", must)
		}
	}
}

// scriptEnv runs the script against one endpoint and records the transcript.
type scriptEnv struct {
	t   *testing.T
	cli *clientv3.Client
	raw *rawConn
	out []string
}

func (e *scriptEnv) rec(format string, args ...any) {
	e.out = append(e.out, fmt.Sprintf(format, args...))
}

func (e *scriptEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func errString(err error) string {
	err = err2status(err)
	st, _ := status.FromError(err)
	return fmt.Sprintf("ERR %v %q", st.Code(), st.Message())
}

func hdr(h *pb.ResponseHeader) string { return fmt.Sprintf("rev=%d", h.GetRevision()) }

func kvsString(kvs []*mvccpb.KeyValue) string {
	var s []string
	for _, kv := range kvs {
		s = append(s, kvString(shortKV(kv)))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// shortKV replaces a long value by its length.
func shortKV(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil || len(kv.Value) <= 32 {
		return kv
	}
	return &mvccpb.KeyValue{Key: kv.Key, Value: []byte(fmt.Sprintf("<%d bytes>", len(kv.Value))),
		CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

func shortEvent(e *mvccpb.Event) string {
	return eventString(&mvccpb.Event{Type: e.Type, Kv: shortKV(e.Kv), PrevKv: shortKV(e.PrevKv)})
}

func rangeString(r *pb.RangeResponse) string {
	return fmt.Sprintf("%s count=%d more=%v kvs=%s", hdr(r.Header), r.Count, r.More, kvsString(r.Kvs))
}

func txnString(r *pb.TxnResponse) string {
	s := fmt.Sprintf("%s succeeded=%v", hdr(r.Header), r.Succeeded)
	for _, op := range r.Responses {
		switch {
		case op.GetResponseRange() != nil:
			s += " {range " + rangeString(op.GetResponseRange()) + "}"
		case op.GetResponsePut() != nil:
			p := op.GetResponsePut()
			s += fmt.Sprintf(" {put %s prev=%s}", hdr(p.Header), kvString(shortKV(p.PrevKv)))
		case op.GetResponseDeleteRange() != nil:
			d := op.GetResponseDeleteRange()
			s += fmt.Sprintf(" {delete %s deleted=%d prev=%s}", hdr(d.Header), d.Deleted, kvsString(d.PrevKvs))
		case op.GetResponseTxn() != nil:
			s += " {txn " + txnString(op.GetResponseTxn()) + "}"
		default:
			s += " {empty}"
		}
	}
	return s
}

func (e *scriptEnv) get(what, key string, opts ...clientv3.OpOption) {
	r, err := e.cli.Get(e.ctx(), key, opts...)
	if err != nil {
		e.rec("get %s: %s", what, errString(err))
		return
	}
	e.rec("get %s: %s", what, rangeString((*pb.RangeResponse)(r)))
}

func (e *scriptEnv) rawRange(what string, req *pb.RangeRequest) {
	r, err := e.raw.kv.Range(e.ctx(), req)
	if err != nil {
		e.rec("range %s: %s", what, errString(err))
		return
	}
	e.rec("range %s: %s", what, rangeString(r))
}

func (e *scriptEnv) put(key, val string, opts ...clientv3.OpOption) {
	r, err := e.cli.Put(e.ctx(), key, val, opts...)
	if err != nil {
		e.rec("put %q: %s", key, errString(err))
		return
	}
	e.rec("put %q: %s prev=%s", key, hdr(r.Header), kvString(shortKV(r.PrevKv)))
}

func (e *scriptEnv) del(what, key string, opts ...clientv3.OpOption) {
	r, err := e.cli.Delete(e.ctx(), key, opts...)
	if err != nil {
		e.rec("delete %s: %s", what, errString(err))
		return
	}
	e.rec("delete %s: %s deleted=%d prev=%s", what, hdr(r.Header), r.Deleted, kvsString(r.PrevKvs))
}

func (e *scriptEnv) txn(what string, cmps []clientv3.Cmp, then, els []clientv3.Op) {
	r, err := e.cli.Txn(e.ctx()).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		e.rec("txn %s: %s", what, errString(err))
		return
	}
	e.rec("txn %s: %s", what, txnString((*pb.TxnResponse)(r)))
}

func (e *scriptEnv) rawTxn(what string, req *pb.TxnRequest) {
	r, err := e.raw.kv.Txn(e.ctx(), req)
	if err != nil {
		e.rec("txn %s: %s", what, errString(err))
		return
	}
	e.rec("txn %s: %s", what, txnString(r))
}

func (e *scriptEnv) compact(rev int64) {
	r, err := e.cli.Compact(e.ctx(), rev)
	if err != nil {
		e.rec("compact %d: %s", rev, errString(err))
		return
	}
	e.rec("compact %d: %s", rev, hdr(r.Header))
}

func watchString(wr clientv3.WatchResponse) string {
	s := fmt.Sprintf("rev=%d", wr.Header.Revision)
	if wr.Created {
		s += " created"
	}
	if wr.Canceled {
		s += " canceled"
	}
	if wr.CompactRevision != 0 {
		s += fmt.Sprintf(" compact=%d", wr.CompactRevision)
	}
	if wr.CancelReason != "" {
		s += fmt.Sprintf(" reason=%q", wr.CancelReason)
	}
	if wr.IsProgressNotify() {
		s += " progress"
	}
	if err := wr.Err(); err != nil {
		s += " err=" + err.Error()
	}
	for _, ev := range wr.Events {
		s += " " + shortEvent((*mvccpb.Event)(ev))
	}
	return s
}

// next records the next response of a clientv3 watch.
func (e *scriptEnv) next(what string, ch clientv3.WatchChan) {
	select {
	case wr, ok := <-ch:
		if !ok {
			e.rec("watch %s: closed", what)
			return
		}
		e.rec("watch %s: %s", what, watchString(wr))
	case <-time.After(20 * time.Second):
		e.rec("watch %s: nothing within 20s", what)
	}
}

// rawNext records the next response of a raw watch stream.
func (e *scriptEnv) rawNext(what string, ws pb.Watch_WatchClient) {
	type res struct {
		r   *pb.WatchResponse
		err error
	}
	c := make(chan res, 1)
	go func() {
		r, err := ws.Recv()
		c <- res{r, err}
	}()
	select {
	case x := <-c:
		if x.err != nil {
			e.rec("raw %s: %s", what, errString(x.err))
			return
		}
		c := proto.Clone(x.r).(*pb.WatchResponse)
		c.Events = nil
		s := shape(c)
		for _, ev := range x.r.Events {
			s += " " + shortEvent(ev)
		}
		e.rec("raw %s: %s", what, s)
	case <-time.After(20 * time.Second):
		e.rec("raw %s: nothing within 20s", what)
	}
}

// rawNextSorted records the next n responses of a raw watch stream, sorted.
func (e *scriptEnv) rawNextSorted(what string, ws pb.Watch_WatchClient, n int) {
	start := len(e.out)
	for range n {
		e.rawNext(what, ws)
	}
	sort.Strings(e.out[start:])
}

func (e *scriptEnv) rawSend(ws pb.Watch_WatchClient, req *pb.WatchRequest) {
	if err := ws.Send(req); err != nil {
		e.rec("raw send: %s", errString(err))
	}
}

func createReq(c *pb.WatchCreateRequest) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}}
}

func cancelReq(id int64) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
}

func progressReq() *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
}

func putOp(key, val string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(val)}}}
}

func (e *scriptEnv) run() {
	// §2.1-§2.3: writes and reads. (SPEC §2; etcd txn/range.go, mvcc/kvstore_txn.go)
	e.get("fresh", "a")
	e.put("a", "1")
	e.put("b", "2")
	e.put("c", "3")
	e.put("a/x", "4")
	e.put("a/y", "5")
	e.put("a", "6", clientv3.WithPrevKV()) // rev 7
	e.get("prefix", "a", clientv3.WithPrefix())
	e.get("prefix limit 1", "a", clientv3.WithPrefix(), clientv3.WithLimit(1))
	e.get("prefix at 2", "a", clientv3.WithPrefix(), clientv3.WithRev(2))
	e.get("from-key keys-only", "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	e.get("count-only limit 1", "a", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithLimit(1))
	e.get("sort mod desc limit 2", "a", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(2))
	e.get("sort value keys-only", "\x00", clientv3.WithFromKey(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend), clientv3.WithKeysOnly())
	e.get("sort version", "\x00", clientv3.WithFromKey(), clientv3.WithSort(clientv3.SortByVersion, clientv3.SortNone))
	e.get("min mod 5 max create 6", "\x00", clientv3.WithFromKey(), clientv3.WithMinModRev(5), clientv3.WithMaxCreateRev(6), clientv3.WithLimit(1))
	e.get("future", "a", clientv3.WithRev(100))
	e.get("empty key", "")
	e.rawRange("end before key", &pb.RangeRequest{Key: []byte("c"), RangeEnd: []byte("a")})
	e.rawRange("negative revision and limit", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b"), Revision: -5, Limit: -1})
	e.rawRange("bad sort order", &pb.RangeRequest{Key: []byte("a"), SortOrder: 9})
	e.rawRange("bad sort target", &pb.RangeRequest{Key: []byte("a"), SortTarget: 9})
	e.del("b..d with prev", "b", clientv3.WithRange("d"), clientv3.WithPrevKV()) // rev 8
	e.del("nothing", "zzz")
	e.del("empty key", "")
	e.put("", "x")
	e.put("k", "v", clientv3.WithLease(0x1234))
	e.put("k", "", clientv3.WithIgnoreValue())
	e.put("a", "", clientv3.WithIgnoreValue(), clientv3.WithPrevKV()) // rev 9
	e.put("a", "7", clientv3.WithIgnoreLease())                       // rev 10

	// §2.5: transactions. (etcd v3rpc/key.go, txn/txn.go)
	e.txn("value holds", []clientv3.Cmp{clientv3.Compare(clientv3.Value("a"), "=", "7")},
		[]clientv3.Op{clientv3.OpPut("t1", "x", clientv3.WithPrevKV()), clientv3.OpGet("t", clientv3.WithPrefix())},
		[]clientv3.Op{clientv3.OpPut("t2", "y")}) // rev 11
	e.txn("value of missing key", []clientv3.Cmp{clientv3.Compare(clientv3.Value("nope"), "!=", "z")},
		[]clientv3.Op{clientv3.OpPut("t3", "x")}, []clientv3.Op{clientv3.OpGet("a"), clientv3.OpDelete("t1", clientv3.WithPrevKV())}) // rev 12
	e.txn("version 0 of missing key, read only", []clientv3.Cmp{clientv3.Compare(clientv3.Version("nope"), "=", 0)},
		[]clientv3.Op{clientv3.OpGet("a", clientv3.WithRev(3))}, nil)
	e.txn("range at future rev in taken branch", nil, []clientv3.Op{clientv3.OpGet("a", clientv3.WithRev(99))}, nil)
	e.txn("range at future rev in other branch", nil, []clientv3.Op{clientv3.OpGet("a")}, []clientv3.Op{clientv3.OpGet("a", clientv3.WithRev(99))})
	e.txn("over a prefix", []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("a/"), ">", 0).WithPrefix()},
		[]clientv3.Op{clientv3.OpPut("t4", "x")}, []clientv3.Op{clientv3.OpPut("t5", "y")}) // rev 13
	e.txn("lease compare", []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue("a"), "=", clientv3.NoLease)}, nil, nil)
	e.txn("lease put in the other branch", []clientv3.Cmp{clientv3.Compare(clientv3.Version("a"), ">", 0)},
		[]clientv3.Op{clientv3.OpPut("t6", "x")}, []clientv3.Op{clientv3.OpPut("t7", "y", clientv3.WithLease(5))}) // rev 14
	e.txn("lease put in the taken branch", nil, []clientv3.Op{clientv3.OpGet("a"), clientv3.OpPut("t8", "y", clientv3.WithLease(5))}, nil)
	e.txn("ignore value of missing key", nil, []clientv3.Op{clientv3.OpPut("nope", "", clientv3.WithIgnoreValue())}, nil)
	e.txn("ignore value", nil, []clientv3.Op{clientv3.OpPut("t6", "", clientv3.WithIgnoreValue(), clientv3.WithPrevKV()), clientv3.OpGet("t6")}, nil) // rev 15
	e.txn("nested", []clientv3.Cmp{clientv3.Compare(clientv3.Value("a"), "=", "7")},
		[]clientv3.Op{
			clientv3.OpGet("a"),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value("t6"), "=", "nope")},
				[]clientv3.Op{clientv3.OpPut("n1", "x")},
				[]clientv3.Op{clientv3.OpPut("n2", "y"), clientv3.OpGet("n", clientv3.WithPrefix())}),
			clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete("t2")}, nil),
			clientv3.OpGet("n", clientv3.WithPrefix()),
		}, nil) // rev 16
	e.txn("duplicate put", nil, []clientv3.Op{clientv3.OpPut("d", "1"), clientv3.OpPut("d", "2")}, nil)
	e.txn("put under a delete", nil, []clientv3.Op{clientv3.OpPut("d/1", "1"), clientv3.OpDelete("d", clientv3.WithPrefix())}, nil)
	e.txn("same key in both branches", nil, []clientv3.Op{clientv3.OpPut("d", "1")}, []clientv3.Op{clientv3.OpPut("d", "2")}) // rev 17
	e.txn("nested duplicate", nil, []clientv3.Op{clientv3.OpPut("d", "1"), clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("d", "2")}, nil)}, nil)
	e.txn("compare with empty key", []clientv3.Cmp{clientv3.Compare(clientv3.Value(""), "=", "")}, nil, nil)
	var many []clientv3.Op
	for i := range 129 {
		many = append(many, clientv3.OpPut(fmt.Sprintf("m%03d", i), "x"))
	}
	e.txn("129 ops", nil, many, nil)
	e.txn("128 ops", nil, many[:128], nil) // rev 18
	e.txn("range at revision -1, never compacted", nil, []clientv3.Op{clientv3.OpGet("a", clientv3.WithRev(-1))}, nil)
	e.txn("range at revision -2, never compacted", nil, []clientv3.Op{clientv3.OpGet("a", clientv3.WithRev(-2))}, nil)
	e.rawTxn("empty op", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("e", "1"), {}}})
	e.rawTxn("empty op after duplicate", &pb.TxnRequest{Success: []*pb.RequestOp{putOp("e", "1"), putOp("e", "1"), {}}})

	// §3 watches from the past, with prev_kv and filters, and a progress
	// request once they have caught up. (v3rpc/watch.go, mvcc/watchable_store.go)
	wctx, wcancel := context.WithCancel(e.ctx())
	w1 := e.cli.Watch(wctx, "a", clientv3.WithPrefix(), clientv3.WithRev(2), clientv3.WithPrevKV())
	e.next("a* from 2 prev_kv", w1)
	w2 := e.cli.Watch(wctx, "t", clientv3.WithPrefix(), clientv3.WithRev(2), clientv3.WithFilterPut())
	e.next("t* from 2 no put", w2)
	if err := e.cli.RequestProgress(wctx); err != nil {
		e.rec("progress: %s", errString(err))
	}
	e.next("a* progress", w1)
	e.next("t* progress", w2)
	e.put("a/z", "8", clientv3.WithPrevKV()) // rev 19
	e.next("a* live", w1)
	e.del("t prefix", "t", clientv3.WithPrefix()) // rev 20
	e.next("t* live", w2)
	wcancel()

	// A watch from a future revision.
	fctx, fcancel := context.WithCancel(e.ctx())
	w3 := e.cli.Watch(fctx, "f", clientv3.WithRev(22), clientv3.WithCreatedNotify())
	e.next("f from 22 created", w3)
	e.put("f", "1") // rev 21
	e.put("f", "2") // rev 22
	e.next("f from 22", w3)
	fcancel()

	// A watch on an empty range.
	ectx, ecancel := context.WithCancel(e.ctx())
	e.next("empty range", e.cli.Watch(ectx, "b", clientv3.WithRange("a")))
	ecancel()

	// §2.4 and §3.11: compaction.
	e.compact(19)
	e.compact(19)
	e.compact(18)
	e.compact(99)
	e.get("below the compaction", "a", clientv3.WithRev(18))
	e.get("at the compaction", "a", clientv3.WithPrefix(), clientv3.WithRev(19))
	e.txn("range below the compaction", nil, []clientv3.Op{clientv3.OpGet("a", clientv3.WithRev(18))}, nil)
	e.txn("range at negative revision", nil, []clientv3.Op{clientv3.OpGet("a", clientv3.WithRev(-1))}, nil)
	cctx, ccancel := context.WithCancel(e.ctx())
	e.next("a from 18 compacted", e.cli.Watch(cctx, "a", clientv3.WithRev(18)))
	ccancel()
	cctx, ccancel = context.WithCancel(e.ctx())
	e.next("a* from 19", e.cli.Watch(cctx, "a", clientv3.WithPrefix(), clientv3.WithRev(19), clientv3.WithPrevKV()))
	ccancel()

	// The wire shapes clientv3 hides, on a raw stream. (v3rpc/watch.go:266-400)
	sctx, scancel := context.WithCancel(e.ctx())
	defer scancel()
	ws, err := e.raw.watch.Watch(sctx)
	if err != nil {
		e.rec("raw watch: %s", errString(err))
		return
	}
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("r"), WatchId: 7}))
	e.rawNext("create id 7", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("q"), WatchId: 7}))
	e.rawNext("duplicate id 7", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("r"), StartRevision: -3}))
	e.rawNext("negative start", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("z"), RangeEnd: []byte("a")}))
	e.rawNext("end before key", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("z"), RangeEnd: []byte("z")}))
	e.rawNext("end equal to key", ws)
	e.rawSend(ws, cancelReq(99))
	e.rawSend(ws, cancelReq(7))
	e.rawNext("cancel 99 then 7", ws)
	e.rawSend(ws, &pb.WatchRequest{})
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("r"), PrevKv: true}))
	e.rawNext("auto id prev_kv", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("r"), RangeEnd: []byte("s"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}}))
	e.rawNext("auto id no put", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("r"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE, 7}}))
	e.rawNext("auto id no delete", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{RangeEnd: []byte("\x00"), StartRevision: 22}))
	e.rawNext("empty key from-key from 22", ws)
	e.rawNext("empty key from-key from 22 events", ws)
	e.put("r", "1") // rev 23
	e.del("r", "r") // rev 24
	// Responses of several watches to one revision come in no particular
	// order (etcd iterates a map): compare them sorted.
	e.rawNextSorted("r events", ws, 6)
	e.rawSend(ws, progressReq())
	e.rawNext("progress", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 18}))
	e.rawNext("compacted start created", ws)
	e.rawNext("compacted start canceled", ws)
	for _, id := range []int64{0, 1, 2, 3} {
		e.rawSend(ws, cancelReq(id))
		e.rawNext(fmt.Sprint("cancel ", id), ws)
	}

	// Fragments: a catch-up response above MaxRequestBytes+overhead (2 MiB),
	// split as etcd's sendFragments splits it.
	big := strings.Repeat("x", 1<<20)
	e.put("big/1", big) // rev 25
	e.put("big/2", big) // rev 26
	e.put("big/3", big) // rev 27
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("big/"), RangeEnd: []byte("big0"), StartRevision: 25, Fragment: true, WatchId: 100}))
	e.rawNext("fragment created", ws)
	for i := range 3 {
		e.rawNext(fmt.Sprint("fragment ", i), ws)
	}
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("big/"), RangeEnd: []byte("big0"), StartRevision: 25, WatchId: 101}))
	e.rawNext("no fragment created", ws)
	e.rawNext("no fragment", ws)
	bctx, bcancel := context.WithCancel(e.ctx())
	e.next("fragments joined by clientv3", e.cli.Watch(bctx, "big/", clientv3.WithPrefix(), clientv3.WithRev(25), clientv3.WithFragment()))
	bcancel()
	// Request size: a put of 1.5 MiB is too large; a range is not checked.
	e.put("huge", strings.Repeat("x", DefaultMaxRequestBytes))
	e.get("huge key range", strings.Repeat("k", DefaultMaxRequestBytes))
	e.get("after all", "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
}

// rawNextThenCreated records the next response and, if it is not a
// created response, reads (without recording) the created response behind it.
func (e *scriptEnv) rawNextThenCreated(what string, ws pb.Watch_WatchClient) {
	e.rawNext(what, ws)
	if !strings.Contains(e.out[len(e.out)-1], " created") {
		e.rawNext(what, ws)
		e.out = e.out[:len(e.out)-1]
	}
}

// differences runs the requests where this server and etcd differ on
// purpose (docs/SERVER.md, "Known differences"), after run.
func (e *scriptEnv) differences() {
	e.txn("put under a from-key delete", nil, []clientv3.Op{clientv3.OpDelete("x/", clientv3.WithFromKey()), clientv3.OpPut("x/1", "x")}, nil)
	e.txn("sibling put then delete", nil, []clientv3.Op{
		clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "1")}, nil),
		clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete("x")}, nil),
	}, nil)
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	ws, err := e.raw.watch.Watch(ctx)
	if err != nil {
		e.rec("raw watch: %s", errString(err))
		return
	}
	// Silence is told by order: the next response answers the next request.
	e.rawSend(ws, progressReq())
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("x"), WatchId: 1}))
	e.rawNextThenCreated("progress, no watch, then create", ws)
	g, err := e.cli.Get(e.ctx(), "x")
	if err != nil {
		e.rec("get: %s", errString(err))
		return
	}
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("y"), StartRevision: g.Header.Revision + 1, WatchId: 2}))
	e.rawNext("watch from the next revision", ws)
	e.rawSend(ws, progressReq())
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("x"), WatchId: 3}))
	e.rawNextThenCreated("progress, start at next revision, then create", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("x"), WatchId: -5}))
	e.rawNext("negative id", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("x"), StartRevision: 18, WatchId: 4}))
	e.rawNext("compacted", ws)
	e.rawNext("compacted", ws)
	e.rawSend(ws, createReq(&pb.WatchCreateRequest{Key: []byte("x"), WatchId: 4}))
	e.rawNext("reuse compacted id", ws)
}
