package linearizability

import (
	"math"
	"testing"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// ops builds checker operations for the stage tests: each with a call, a
// return and a response (nil: unknown).
func stageOps(specs ...struct {
	call, ret int64
	req       kv.Request
	resp      *kv.Response
}) []*op {
	var out []*op
	for _, s := range specs {
		o := &traces.Op{Call: s.call, Return: s.ret, Request: s.req, Response: s.resp}
		p := &op{t: o, call: s.call, ret: s.ret, out: Output{Response: s.resp}}
		if s.resp == nil {
			p.ret = math.MaxInt64
		}
		out = append(out, p)
	}
	return out
}

type stageOp = struct {
	call, ret int64
	req       kv.Request
	resp      *kv.Response
}

// The revision index answers, for a time, the highest revision returned
// before it and the lowest revision called after it. SPEC §2.7 (the
// placement stage's bounds).
func TestRevisionIndex(t *testing.T) {
	ok := func(rev int64) *kv.Response { return &kv.Response{Revision: rev, Put: &kv.PutResponse{}} }
	put := kv.Request{Put: &kv.PutRequest{Key: "a", Value: "x"}}
	x := newRevisionIndex(stageOps(stageOp{10, 20, put, ok(2)}, stageOp{15, 30, put, ok(3)}, stageOp{40, 50, put, ok(4)}), 1)
	for _, tc := range []struct{ t, lower, upper int64 }{
		{5, 1, 2}, {21, 2, 4}, {31, 3, 4}, {60, 4, math.MaxInt64},
	} {
		if got := x.lower(tc.t); got != tc.lower {
			t.Errorf("lower(%d) = %d, want %d", tc.t, got, tc.lower)
		}
		if got := x.upper(tc.t); got != tc.upper {
			t.Errorf("upper(%d) = %d, want %d", tc.t, got, tc.upper)
		}
	}
}

// The placement stage: a read that failed on compacted history goes as
// late as real time allows; an unknown unseen write is left out; the
// ordering stage puts a revision's creator first and rejects an order that
// breaks real time; the replay stage answers every operation as recorded.
// SPEC §2.7.
func TestStages(t *testing.T) {
	ok := func(rev int64) *kv.Response { return &kv.Response{Revision: rev, Put: &kv.PutResponse{}} }
	put := func(v string) kv.Request { return kv.Request{Put: &kv.PutRequest{Key: "a", Value: v}} }
	old := kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 2}}
	ops := stageOps(
		stageOp{1, 2, put("1"), ok(2)},
		stageOp{3, 4, put("2"), ok(3)},
		stageOp{5, 8, kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, &kv.Response{Revision: 3, Compact: &kv.CompactResponse{}}},
		stageOp{6, 9, old, &kv.Response{Err: kv.ErrCompacted}},
		stageOp{7, 100, put("never"), nil},
		stageOp{10, 11, put("3"), ok(4)},
	)
	placed := place(ops, newRevisionIndex(ops, 1))
	if len(placed) != 5 {
		t.Fatalf("placed %d operations, want 5 (the unknown write is left out)", len(placed))
	}
	if failed := ops[3]; failed.bucket != 3 || failed.key != math.MaxInt64 {
		t.Errorf("the compacted read is placed at revision %d, key %d; want last in revision 3 (revision 4's creator was called after it returned)", failed.bucket, failed.key)
	}
	if c := ops[2]; c.bucket != 3 || c.key != 8 {
		t.Errorf("the compaction is placed at revision %d, key %d; want 3, at its return 8", c.bucket, c.key)
	}
	if !order(placed) {
		t.Fatal("the order breaks real time")
	}
	var got []int64
	for _, p := range placed {
		got = append(got, p.t.Call)
	}
	if want := []int64{1, 3, 5, 6, 10}; !equalInts(got, want) {
		t.Errorf("order by call %v, want %v", got, want)
	}
	final, ok2 := replay(placed, States{{}}, allow{})
	if !ok2 || final.Revision() != 4 || final.CompactRevision() != 3 {
		t.Errorf("replay: %v, revision %d, compacted at %d", ok2, final.Revision(), final.CompactRevision())
	}
	// A read that returned before the write whose revision it claims was
	// called: no order respects real time.
	bad := stageOps(stageOp{10, 20, put("1"), ok(2)}, stageOp{1, 5, kv.Request{Range: &kv.RangeRequest{Key: "a"}}, &kv.Response{Revision: 2, Range: &kv.RangeResponse{}}})
	if order(place(bad, newRevisionIndex(bad, 1))) {
		t.Error("an order that breaks real time was accepted")
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
