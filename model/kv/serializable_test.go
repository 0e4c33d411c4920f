package kv_test

import (
	"testing"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

// SPEC §2.8 SerializableRead: a serializable range answers the state at its
// header revision — however stale —, never beyond what was committed by its
// return, and never other data.
func TestCheckSerializable(t *testing.T) {
	var s kv.State
	for _, v := range []string{"1", "2", "3"} {
		s, _ = kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "a", Value: v}}) // revisions 2, 3, 4
	}
	s, _ = kv.Step(s, kv.Request{Compact: &kv.CompactRequest{Revision: 4}}) // a member's compaction is not ours to judge
	at := func(rev int64, value string) kv.Response {
		r := kv.Response{Revision: rev, Range: &kv.RangeResponse{Count: 1, KVs: []kv.KeyValue{{Key: "a", Value: value, CreateRevision: 2, ModRevision: rev, Version: rev - 1}}}}
		return r
	}
	get := kv.RangeRequest{Key: "a"}
	for _, tc := range []struct {
		name      string
		req       kv.RangeRequest
		resp      kv.Response
		committed int64
		ok        bool
	}{
		{"current", get, at(4, "3"), 4, true},
		{"stale: a lagging member", get, at(2, "1"), 4, true},
		{"an error is not judged here", get, kv.Response{Err: kv.ErrFutureRev}, 4, true},
		{"beyond what was committed", get, at(4, "3"), 3, false},
		{"data of another revision", get, kv.Response{Revision: 3, Range: at(2, "1").Range}, 4, false},
		{"a value never written", get, at(3, "x"), 4, false},
		{"at an explicit revision below the header", kv.RangeRequest{Key: "a", Revision: 2}, kv.Response{Revision: 4, Range: at(2, "1").Range}, 4, true},
		{"at an explicit revision above the header", kv.RangeRequest{Key: "a", Revision: 4}, kv.Response{Revision: 3, Range: at(4, "3").Range}, 4, false},
		{"no result", get, kv.Response{Revision: 4}, 4, false},
	} {
		vs := kv.CheckSerializable(s, tc.req, tc.resp, tc.committed)
		if tc.ok != (len(vs) == 0) {
			t.Errorf("%s: %v", tc.name, vs)
		}
		for _, v := range vs {
			if v.Property != spec.SerializableRead || v.Message == "" {
				t.Errorf("%s: %+v", tc.name, v)
			}
		}
	}
}

// A store compacted before the history began: reads below the compaction
// fail, the compaction itself is readable, and compacting at or below it
// fails. SPEC §2.4.
func TestStartCompacted(t *testing.T) {
	s := kv.StartCompacted(10, 7)
	if s.Revision() != 10 || s.CompactRevision() != 7 {
		t.Fatalf("revision %d, compacted at %d", s.Revision(), s.CompactRevision())
	}
	for rev, want := range map[int64]error{6: kv.ErrCompacted, 7: nil, 9: nil} {
		if _, r := kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: rev}}); !kv.SameError(r.Err, want) {
			t.Errorf("range at %d: %v, want %v", rev, r.Err, want)
		}
	}
	if _, r := kv.Step(s, kv.Request{Compact: &kv.CompactRequest{Revision: 7}}); !kv.SameError(r.Err, kv.ErrCompacted) {
		t.Errorf("compacting at the base compaction: %v", r.Err)
	}
	if kv.StartCompacted(10, -1).CompactRevision() != -1 || !kv.Equal(kv.StartCompacted(10, -1), kv.Start(10)) {
		t.Error("a negative compaction is none")
	}
	h := &kv.History{}
	if err := h.SetBaseCompaction(7, false); err != nil {
		t.Fatal(err)
	}
	if !h.WasCompactedAt(5) || !h.WasCompactedAt(7) || h.WasCompactedAt(8) || h.CompactRevision() != 7 {
		t.Errorf("an unknown base compaction up to 7: %v %v %v %d", h.WasCompactedAt(5), h.WasCompactedAt(7), h.WasCompactedAt(8), h.CompactRevision())
	}
	_ = h.SetBaseCompaction(7, true)
	if h.WasCompactedAt(5) || !h.WasCompactedAt(7) {
		t.Error("a known base compaction is exactly 7")
	}
}
