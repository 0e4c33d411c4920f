package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// alarmScript exercises Maintenance.Alarm and what alarms do to requests,
// through raw gRPC, and returns a transcript in which the member's own ID
// reads "self". TestAlarms checks it against wantAlarmScript;
// TestAlarmsSameAsEtcd checks that a real etcd 3.7 gives the same one.
// Each GET lists at most one alarm (etcd lists several in map order).
func alarmScript(t *testing.T, rc *rawConn) []string {
	ctx := testCtx(t)
	m := pb.NewMaintenanceClient(rc.conn)
	st, err := m.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	self := st.Header.MemberId
	norm := func(s string) string {
		// protobuf-go's text format puts one or two spaces between fields
		// (at random per binary, so that nobody depends on it).
		for strings.Contains(s, "  ") {
			s = strings.ReplaceAll(s, "  ", " ")
		}
		s = strings.ReplaceAll(s, strconv.FormatUint(self, 10), "self")
		return strings.ReplaceAll(s, fmt.Sprintf("%x", self), "self")
	}
	var out []string
	say := func(step string, resp fmt.Stringer, rev int64, err error) {
		if err != nil {
			s, _ := status.FromError(err)
			out = append(out, norm(fmt.Sprintf("%s: ERR %v %q", step, s.Code(), s.Message())))
			return
		}
		out = append(out, norm(fmt.Sprintf("%s: rev=%d %s", step, rev, resp)))
	}
	alarm := func(step string, action pb.AlarmRequest_AlarmAction, member uint64, typ pb.AlarmType) {
		r, err := m.Alarm(ctx, &pb.AlarmRequest{Action: action, MemberID: member, Alarm: typ})
		var ms []string
		for _, a := range r.GetAlarms() {
			ms = append(ms, fmt.Sprintf("%d/%v", a.MemberID, a.Alarm))
		}
		say(step, stringer(fmt.Sprint(ms)), r.GetHeader().GetRevision(), err)
	}
	put := func(step, key string, lease int64) {
		r, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: lease})
		say(step, stringer("put"), r.GetHeader().GetRevision(), err)
	}
	rng := func(key string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
	}
	putOp := func(key string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}}}
	}
	delOp := func(key string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
	}
	txn := func(step string, success, failure []*pb.RequestOp) {
		r, err := rc.kv.Txn(ctx, &pb.TxnRequest{Success: success, Failure: failure})
		say(step, stringer(fmt.Sprintf("succeeded=%v", r.GetSucceeded())), r.GetHeader().GetRevision(), err)
	}
	del := func(step, key string) {
		r, err := rc.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(key)})
		say(step, stringer(fmt.Sprintf("deleted=%d", r.GetDeleted())), r.GetHeader().GetRevision(), err)
	}
	get := func(step, key string) {
		r, err := rc.kv.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
		say(step, stringer(fmt.Sprintf("count=%d", r.GetCount())), r.GetHeader().GetRevision(), err)
	}
	compact := func(step string, rev int64) {
		r, err := rc.kv.Compact(ctx, &pb.CompactionRequest{Revision: rev})
		say(step, stringer("compacted"), r.GetHeader().GetRevision(), err)
	}
	status := func(step string) {
		r, err := m.Status(ctx, &pb.StatusRequest{})
		say(step, stringer(fmt.Sprintf("errors=%q", r.GetErrors())), r.GetHeader().GetRevision(), err)
	}
	const (
		get_, activate, deactivate = pb.AlarmRequest_GET, pb.AlarmRequest_ACTIVATE, pb.AlarmRequest_DEACTIVATE
		none, nospace, corrupt     = pb.AlarmType_NONE, pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT
	)

	alarm("get, none raised", get_, 0, none)
	alarm("activate NONE", activate, self, none)
	put("put a", "a", 0)
	put("put b", "b", 0)

	// The member's own NOSPACE: what a full disk raises.
	alarm("activate NOSPACE", activate, self, nospace)
	alarm("activate NOSPACE again", activate, self, nospace)
	alarm("get all", get_, 0, none)
	alarm("get CORRUPT", get_, 0, corrupt)
	alarm("get NOSPACE, any member", get_, 12345, nospace)
	status("status")
	put("put under NOSPACE", "c", 0)
	put("put with a lease under NOSPACE", "c", 42)
	txn("txn with a put in the else branch", []*pb.RequestOp{rng("a")}, []*pb.RequestOp{putOp("c")})
	txn("txn, nested put", []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("c")}}}}}, nil)
	txn("read-only txn", []*pb.RequestOp{rng("a")}, nil)
	txn("txn deleting", []*pb.RequestOp{delOp("b")}, nil)
	del("delete under NOSPACE", "a")
	get("range under NOSPACE", "a")
	compact("compact under NOSPACE", 2)
	alarm("deactivate NOSPACE", deactivate, self, nospace)
	alarm("deactivate NOSPACE again", deactivate, self, nospace)
	status("status after")
	put("put after the disarm", "c", 0)

	// Another member's NOSPACE caps this one too.
	alarm("activate NOSPACE of member 5", activate, 5, nospace)
	alarm("get NOSPACE", get_, 0, nospace)
	put("put under member 5's NOSPACE", "d", 0)
	del("delete under member 5's NOSPACE", "c")
	alarm("deactivate NOSPACE of member 5", deactivate, 5, nospace)
	alarm("deactivate NOSPACE of member 5 again", deactivate, 5, nospace)
	put("put after", "d", 0)

	// CORRUPT refuses every write; reads go on.
	alarm("activate CORRUPT of member 7", activate, 7, corrupt)
	alarm("get all, CORRUPT", get_, 0, none)
	status("status, CORRUPT")
	put("put under CORRUPT", "e", 0)
	del("delete under CORRUPT", "d")
	txn("txn deleting under CORRUPT", []*pb.RequestOp{delOp("d")}, nil)
	txn("read-only txn under CORRUPT", []*pb.RequestOp{rng("d")}, nil)
	get("range under CORRUPT", "d")
	compact("compact under CORRUPT", 3)
	alarm("activate NOSPACE too", activate, self, nospace)
	put("put under CORRUPT and NOSPACE", "e", 0)
	alarm("deactivate NOSPACE", deactivate, self, nospace)
	alarm("deactivate CORRUPT of member 7", deactivate, 7, corrupt)
	put("put after CORRUPT", "e", 0)

	// An alarm type etcd does not know is kept and listed, and does nothing.
	alarm("activate type 9", activate, self, 9)
	alarm("get all, type 9", get_, 0, none)
	status("status, type 9")
	put("put under type 9", "f", 0)
	alarm("deactivate type 9", deactivate, self, 9)
	alarm("get all at the end", get_, 0, none)
	return out
}

type stringer string

func (s stringer) String() string { return string(s) }

// wantAlarmScript is the transcript of alarmScript, as etcd 3.7.3 gives it
// (TestAlarmsSameAsEtcd).
var wantAlarmScript = []string{
	`get, none raised: rev=1 []`,
	`activate NONE: rev=1 []`,
	`put a: rev=2 put`,
	`put b: rev=3 put`,
	`activate NOSPACE: rev=3 [self/NOSPACE]`,
	`activate NOSPACE again: rev=3 [self/NOSPACE]`,
	`get all: rev=3 [self/NOSPACE]`,
	`get CORRUPT: rev=3 []`,
	`get NOSPACE, any member: rev=3 [self/NOSPACE]`,
	`status: rev=3 errors=["memberID:self alarm:NOSPACE"]`,
	`put under NOSPACE: ERR ResourceExhausted "etcdserver: mvcc: database space exceeded"`,
	`put with a lease under NOSPACE: ERR ResourceExhausted "etcdserver: mvcc: database space exceeded"`,
	`txn with a put in the else branch: ERR ResourceExhausted "etcdserver: mvcc: database space exceeded"`,
	`txn, nested put: ERR ResourceExhausted "etcdserver: mvcc: database space exceeded"`,
	`read-only txn: rev=3 succeeded=true`,
	`txn deleting: rev=4 succeeded=true`,
	`delete under NOSPACE: rev=5 deleted=1`,
	`range under NOSPACE: rev=5 count=0`,
	`compact under NOSPACE: rev=5 compacted`,
	`deactivate NOSPACE: rev=5 [self/NOSPACE]`,
	`deactivate NOSPACE again: rev=5 []`,
	`status after: rev=5 errors=[]`,
	`put after the disarm: rev=6 put`,
	`activate NOSPACE of member 5: rev=6 [5/NOSPACE]`,
	`get NOSPACE: rev=6 [5/NOSPACE]`,
	`put under member 5's NOSPACE: ERR ResourceExhausted "etcdserver: mvcc: database space exceeded"`,
	`delete under member 5's NOSPACE: rev=7 deleted=1`,
	`deactivate NOSPACE of member 5: rev=7 [5/NOSPACE]`,
	`deactivate NOSPACE of member 5 again: rev=7 []`,
	`put after: rev=8 put`,
	`activate CORRUPT of member 7: rev=8 [7/CORRUPT]`,
	`get all, CORRUPT: rev=8 [7/CORRUPT]`,
	`status, CORRUPT: rev=8 errors=["memberID:7 alarm:CORRUPT"]`,
	`put under CORRUPT: ERR DataLoss "etcdserver: corrupt cluster"`,
	`delete under CORRUPT: ERR DataLoss "etcdserver: corrupt cluster"`,
	`txn deleting under CORRUPT: ERR DataLoss "etcdserver: corrupt cluster"`,
	`read-only txn under CORRUPT: rev=8 succeeded=true`,
	`range under CORRUPT: rev=8 count=1`,
	`compact under CORRUPT: ERR DataLoss "etcdserver: corrupt cluster"`,
	`activate NOSPACE too: rev=8 [self/NOSPACE]`,
	`put under CORRUPT and NOSPACE: ERR DataLoss "etcdserver: corrupt cluster"`,
	`deactivate NOSPACE: rev=8 [self/NOSPACE]`,
	`deactivate CORRUPT of member 7: rev=8 [7/CORRUPT]`,
	`put after CORRUPT: rev=9 put`,
	`activate type 9: rev=9 [self/9]`,
	`get all, type 9: rev=9 [self/9]`,
	`status, type 9: rev=9 errors=["memberID:self alarm:9"]`,
	`put under type 9: rev=10 put`,
	`deactivate type 9: rev=10 [self/9]`,
	`get all at the end: rev=10 []`,
}

// compareTranscripts fails the test on every line where got and want
// differ.
func compareTranscripts(t *testing.T, name string, got, want []string) {
	t.Helper()
	diffs := 0
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			diffs++
			t.Errorf("%s, line %d:\n got:  %s\n want: %s", name, i+1, g, w)
		}
	}
	if diffs > 0 {
		t.Logf("%s: the whole transcript:\n%s", name, strings.Join(got, "\n"))
	}
}

// TestAlarms: Maintenance.Alarm with etcd's semantics — GET, ACTIVATE,
// DEACTIVATE for any member and type — and what alarms do to requests:
// NOSPACE refuses puts (also in either branch of a transaction, at any
// depth) with ErrGRPCNoSpace, CORRUPT refuses every write with
// ErrGRPCCorrupt, reads go on; Status lists them in its errors (issue 17).
func TestAlarms(t *testing.T) {
	r := startTest(t, testOptions())
	rc := dialRaw(t, r.Addr())
	compareTranscripts(t, "watchspec", alarmScript(t, rc), wantAlarmScript)

	// An unknown action is refused (etcd 3.7.3 dies of it).
	_, err := pb.NewMaintenanceClient(rc.conn).Alarm(context.Background(), &pb.AlarmRequest{Action: 7, Alarm: pb.AlarmType_NOSPACE})
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "unknown alarm action 7") {
		t.Errorf("unknown action: %v, want InvalidArgument naming it", err)
	}
}
