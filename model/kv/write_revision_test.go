package kv_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

// SPEC §2.6 WriteRevision: a write's response revision is the revision of its
// events. The model's own responses pass; a response carrying another
// revision (a mutated server) is rejected naming WriteRevision.
func TestWriteRevision(t *testing.T) {
	reqs := []kv.Request{
		put("a", "1"),
		put("b", "2"),
		txn(nil, []kv.Op{opPut("c", "3"), opDel("a", ""), opGet("b", 0)}, nil),
		del("b", "c"),
		del("zz", ""), // removes nothing: no claim
		get("a", "", 0),
		compact(2),
	}
	var s kv.State
	var resps []kv.Response
	for _, r := range reqs {
		var resp kv.Response
		s, resp = kv.Step(s, r)
		resps = append(resps, resp)
	}
	h := s.History()
	for i, r := range reqs {
		require.Empty(t, kv.CheckWriteRevision(h, r, resps[i]), "request %d answered by the model", i)
	}

	for _, tc := range []struct {
		name string
		i    int
		rev  int64
		want []int64
	}{
		{"put answers a later revision", 0, 3, []int64{3, 2}},
		{"put answers a revision that does not exist", 1, 9, []int64{9, 3}},
		{"txn answers an earlier revision", 2, 3, []int64{3, 4}},
		{"delete answers another revision", 3, 4, []int64{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := resps[tc.i]
			bad.Revision = tc.rev
			vs := kv.CheckWriteRevision(h, reqs[tc.i], bad)
			require.NotEmpty(t, vs)
			for _, v := range vs {
				require.Equal(t, spec.WriteRevision, v.Property)
			}
			require.Equal(t, tc.want, vs[0].Revisions, vs[0].String())
		})
	}
	// A failed request and a read make no claim.
	require.Empty(t, kv.CheckWriteRevision(h, put("a", "x"), kv.Response{Err: kv.ErrCompacted}))
	require.Empty(t, kv.CheckWriteRevision(h, get("a", "", 0), kv.Response{Revision: 1}))
}
