package kv_test

import (
	"testing"

	"github.com/watchspec/watchspec/model/kv"
)

// A compaction's header may be read after it took effect, so it may be
// later than the model's, never earlier; every other response's header is
// the model's exactly. SPEC §2.4 Compaction.
func TestAnswers(t *testing.T) {
	compact := func(rev int64) kv.Response { return kv.Response{Revision: rev, Compact: &kv.CompactResponse{}} }
	put := func(rev int64) kv.Response { return kv.Response{Revision: rev, Put: &kv.PutResponse{}} }
	for _, tc := range []struct {
		name            string
		model, recorded kv.Response
		want            bool
	}{
		{"compaction, same header", compact(5), compact(5), true},
		{"compaction, header read after later writes", compact(5), compact(9), true},
		{"compaction, header before the compaction", compact(5), compact(4), false},
		{"compaction refused, other header", kv.Response{Err: kv.ErrCompacted}, kv.Response{Revision: 9, Err: kv.ErrCompacted}, false},
		{"compaction answered as a put", compact(5), put(9), false},
		{"put, later header", put(5), put(9), false},
		{"put, same header", put(5), put(5), true},
	} {
		if got := kv.Answers(tc.model, tc.recorded); got != tc.want {
			t.Errorf("%s: Answers = %v, want %v", tc.name, got, tc.want)
		}
	}
}
