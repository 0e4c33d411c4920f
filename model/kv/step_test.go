package kv_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watchspec/watchspec/model/kv"
)

func put(k, v string) kv.Request { return kv.Request{Put: &kv.PutRequest{Key: k, Value: v}} }
func del(k, end string) kv.Request {
	return kv.Request{Delete: &kv.DeleteRequest{Key: k, RangeEnd: end}}
}
func get(k, end string, rev int64) kv.Request {
	return kv.Request{Range: &kv.RangeRequest{Key: k, RangeEnd: end, Revision: rev}}
}
func compact(rev int64) kv.Request { return kv.Request{Compact: &kv.CompactRequest{Revision: rev}} }
func txn(cmp []kv.Compare, success, failure []kv.Op) kv.Request {
	return kv.Request{Txn: &kv.TxnRequest{Compare: cmp, Success: success, Failure: failure}}
}
func opPut(k, v string) kv.Op         { return kv.Op{Put: &kv.PutRequest{Key: k, Value: v}} }
func opDel(k, end string) kv.Op       { return kv.Op{Delete: &kv.DeleteRequest{Key: k, RangeEnd: end}} }
func opGet(k string, rev int64) kv.Op { return kv.Op{Range: &kv.RangeRequest{Key: k, Revision: rev}} }

// apply runs reqs from a fresh store and returns the final state and every response.
func apply(reqs ...kv.Request) (kv.State, []kv.Response) {
	var s kv.State
	out := make([]kv.Response, len(reqs))
	for i, r := range reqs {
		s, out[i] = kv.Step(s, r)
	}
	return s, out
}

func keysOf(r kv.Response) []string {
	var ks []string
	for _, x := range r.Range.KVs {
		ks = append(ks, x.Key+"="+x.Value)
	}
	return ks
}

// SPEC §2.1: the revision starts at 1 and grows by exactly one per request
// that writes; reads, deletes of nothing, failed requests and compactions
// leave it alone.
func TestRevisions(t *testing.T) {
	for _, tc := range []struct {
		name string
		reqs []kv.Request
		want []int64 // the revision after each request
	}{
		{"fresh store", nil, nil},
		{"put", []kv.Request{put("a", "1"), put("a", "2")}, []int64{2, 3}},
		{"read", []kv.Request{put("a", "1"), get("a", "", 0)}, []int64{2, 2}},
		{"delete of nothing", []kv.Request{del("a", "")}, []int64{1}},
		{"delete", []kv.Request{put("a", "1"), del("a", "")}, []int64{2, 3}},
		{"range delete is one revision", []kv.Request{put("a", "1"), put("b", "1"), del("a", "\x00")}, []int64{2, 3, 4}},
		{"failed put", []kv.Request{put("", "1")}, []int64{1}},
		{"compaction", []kv.Request{put("a", "1"), compact(2)}, []int64{2, 2}},
		{"txn with two puts is one revision", []kv.Request{txn(nil, []kv.Op{opPut("a", "1"), opPut("b", "1")}, nil)}, []int64{2}},
		{"txn that only reads", []kv.Request{txn(nil, []kv.Op{opGet("a", 0)}, nil)}, []int64{1}},
		{"txn whose delete removes nothing", []kv.Request{txn(nil, []kv.Op{opDel("a", "")}, nil)}, []int64{1}},
		{"failed txn", []kv.Request{txn(nil, []kv.Op{opPut("a", "1"), opPut("a", "2")}, nil)}, []int64{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s kv.State
			require.EqualValues(t, 1, s.Revision(), "a fresh store is at revision 1")
			for i, r := range tc.reqs {
				var resp kv.Response
				s, resp = kv.Step(s, r)
				require.Equal(t, tc.want[i], s.Revision(), "after request %d", i)
				if resp.Err == nil {
					require.Equal(t, s.Revision(), resp.Revision, "header revision after request %d", i)
				}
			}
		})
	}
}

// SPEC §2.2: CreateRevision, ModRevision and Version over a key's lives.
func TestKeyLifecycle(t *testing.T) {
	s, _ := apply(put("k", "1"), put("k", "2"), put("k", "3"), del("k", ""), put("k", "4"), put("k", "5"))
	for _, tc := range []struct {
		rev  int64
		want *kv.KeyValue
	}{
		{1, nil},
		{2, &kv.KeyValue{Key: "k", Value: "1", CreateRevision: 2, ModRevision: 2, Version: 1}},
		{3, &kv.KeyValue{Key: "k", Value: "2", CreateRevision: 2, ModRevision: 3, Version: 2}},
		{4, &kv.KeyValue{Key: "k", Value: "3", CreateRevision: 2, ModRevision: 4, Version: 3}},
		{5, nil},
		{6, &kv.KeyValue{Key: "k", Value: "4", CreateRevision: 6, ModRevision: 6, Version: 1}},
		{7, &kv.KeyValue{Key: "k", Value: "5", CreateRevision: 6, ModRevision: 7, Version: 2}},
	} {
		got, ok := s.Get("k", tc.rev)
		if tc.want == nil {
			require.False(t, ok, "revision %d", tc.rev)
			continue
		}
		require.True(t, ok, "revision %d", tc.rev)
		require.Equal(t, *tc.want, got, "revision %d", tc.rev)
	}
	// The events say the same: a DELETE carries only Key and ModRevision.
	h := s.History()
	c5, _ := h.Commit(5)
	require.Equal(t, []kv.Event{{Type: kv.Delete, KV: kv.KeyValue{Key: "k", ModRevision: 5},
		PrevKV: &kv.KeyValue{Key: "k", Value: "3", CreateRevision: 2, ModRevision: 4, Version: 3}}}, c5.Events)
	c6, _ := h.Commit(6)
	require.True(t, c6.Events[0].IsCreate())
	require.Nil(t, c6.Events[0].PrevKV)
}

// SPEC §2.3: Range conventions, revisions, limit, count and more.
func TestRange(t *testing.T) {
	s, _ := apply(put("a", "1"), put("a/1", "2"), put("a/2", "3"), put("b", "4"), del("a/1", ""), compact(3))
	// Revision 6, compacted at 3. Live: a, a/2, b.
	for _, tc := range []struct {
		name      string
		req       kv.RangeRequest
		want      []string
		count     int64
		more      bool
		err       error
		wantEmpty bool
	}{
		{name: "single key", req: kv.RangeRequest{Key: "a"}, want: []string{"a=1"}, count: 1},
		{name: "missing key", req: kv.RangeRequest{Key: "zz"}, wantEmpty: true},
		{name: "prefix", req: kv.RangeRequest{Key: "a/", RangeEnd: kv.PrefixEnd("a/")}, want: []string{"a/2=3"}, count: 1},
		{name: "from key", req: kv.RangeRequest{Key: "a/", RangeEnd: "\x00"}, want: []string{"a/2=3", "b=4"}, count: 2},
		{name: "every key", req: kv.RangeRequest{Key: "\x00", RangeEnd: "\x00"}, want: []string{"a=1", "a/2=3", "b=4"}, count: 3},
		{name: "half-open interval", req: kv.RangeRequest{Key: "a", RangeEnd: "b"}, want: []string{"a=1", "a/2=3"}, count: 2},
		{name: "end below key is empty", req: kv.RangeRequest{Key: "b", RangeEnd: "a"}, wantEmpty: true},
		{name: "end equal to key is empty", req: kv.RangeRequest{Key: "b", RangeEnd: "b"}, wantEmpty: true},
		{name: "past revision", req: kv.RangeRequest{Key: "a", RangeEnd: "b", Revision: 5}, want: []string{"a=1", "a/1=2", "a/2=3"}, count: 3},
		{name: "at the compact revision", req: kv.RangeRequest{Key: "a", RangeEnd: "\x00", Revision: 3}, want: []string{"a=1", "a/1=2"}, count: 2},
		{name: "below the compact revision", req: kv.RangeRequest{Key: "a", Revision: 2}, err: kv.ErrCompacted},
		{name: "future revision", req: kv.RangeRequest{Key: "a", Revision: 7}, err: kv.ErrFutureRev},
		{name: "negative revision is current", req: kv.RangeRequest{Key: "a", Revision: -4}, want: []string{"a=1"}, count: 1},
		{name: "limit", req: kv.RangeRequest{Key: "a", RangeEnd: "\x00", Limit: 2}, want: []string{"a=1", "a/2=3"}, count: 3, more: true},
		{name: "limit equal to count", req: kv.RangeRequest{Key: "a", RangeEnd: "\x00", Limit: 3}, want: []string{"a=1", "a/2=3", "b=4"}, count: 3},
		{name: "negative limit is none", req: kv.RangeRequest{Key: "a", RangeEnd: "\x00", Limit: -1}, want: []string{"a=1", "a/2=3", "b=4"}, count: 3},
		{name: "count only", req: kv.RangeRequest{Key: "a", RangeEnd: "\x00", CountOnly: true, Limit: 1}, count: 3, wantEmpty: true},
		{name: "keys only", req: kv.RangeRequest{Key: "b", KeysOnly: true}, want: []string{"b="}, count: 1},
		{name: "empty key", req: kv.RangeRequest{Key: ""}, err: kv.ErrEmptyKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp := kv.Step(s, kv.Request{Range: &tc.req})
			if tc.err != nil {
				require.Equal(t, kv.Response{Err: tc.err}, resp)
				return
			}
			require.NoError(t, resp.Err)
			require.EqualValues(t, 6, resp.Revision, "the header revision is the current one, whatever revision was read")
			if tc.wantEmpty {
				require.Empty(t, resp.Range.KVs)
			} else {
				require.Equal(t, tc.want, keysOf(resp))
			}
			require.Equal(t, tc.count, resp.Range.Count)
			require.Equal(t, tc.more, resp.Range.More)
		})
	}
	// keys only keeps the revisions and version.
	_, resp := kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "b", KeysOnly: true}})
	require.Equal(t, kv.KeyValue{Key: "b", CreateRevision: 5, ModRevision: 5, Version: 1}, resp.Range.KVs[0])
}

// SPEC §2.3: a keys-only range answers Lease 0 for a key put with a lease,
// as etcd v3.7.3 does (its index-only read); a full range answers the lease.
func TestKeysOnlyHasNoLease(t *testing.T) {
	s, _ := kv.Step(kv.State{}, kv.Request{Put: &kv.PutRequest{Key: "k", Value: "v", Lease: 7}})
	_, full := kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "k"}})
	require.EqualValues(t, 7, full.Range.KVs[0].Lease)
	_, only := kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "k", KeysOnly: true}})
	require.Equal(t, kv.KeyValue{Key: "k", CreateRevision: 2, ModRevision: 2, Version: 1}, only.Range.KVs[0])
}

// SPEC §2.4: compaction errors, and what stays readable.
func TestCompact(t *testing.T) {
	var s kv.State
	require.EqualValues(t, -1, s.CompactRevision(), "never compacted")
	s, resp := kv.Step(s, compact(0))
	require.NoError(t, resp.Err, "etcd allows compacting revision 0 of a fresh store")
	require.EqualValues(t, 0, s.CompactRevision())
	_, resp = kv.Step(s, compact(0))
	require.ErrorIs(t, resp.Err, kv.ErrCompacted)

	s, _ = apply(put("a", "1"), put("a", "2"), del("a", ""), put("b", "1"))
	_, resp = kv.Step(s, compact(6))
	require.ErrorIs(t, resp.Err, kv.ErrFutureRev)
	_, resp = kv.Step(s, compact(-1))
	require.ErrorIs(t, resp.Err, kv.ErrCompacted, "-1 is at or below the initial compact revision")
	s, resp = kv.Step(s, compact(4))
	require.NoError(t, resp.Err)
	require.EqualValues(t, 5, resp.Revision, "compaction answers the current revision and does not advance it")
	require.EqualValues(t, 5, s.Revision())
	for _, rev := range []int64{3, 4} {
		_, resp = kv.Step(s, compact(rev))
		require.ErrorIs(t, resp.Err, kv.ErrCompacted, "compact(%d) after compact(4)", rev)
	}
	_, resp = kv.Step(s, get("a", "\x00", 4))
	require.NoError(t, resp.Err, "the compact revision itself stays readable")
	require.Empty(t, resp.Range.KVs, "a was deleted at 4")
	_, resp = kv.Step(s, get("a", "\x00", 3))
	require.ErrorIs(t, resp.Err, kv.ErrCompacted)
	s, resp = kv.Step(s, compact(5))
	require.NoError(t, resp.Err)
	_, resp = kv.Step(s, get("b", "", 0))
	require.Equal(t, []string{"b=1"}, keysOf(resp), "the latest version of a live key survives compaction")
	require.Equal(t, []int64{4, 5}, s.History().Compactions(), "the history keeps every compaction, in order, not only the last")
	require.Equal(t, []int64{7, 9}, mustStep(t, kv.StartCompacted(10, 7), compact(9)).History().Compactions(), "the one a State started with comes first")
}

func mustStep(t *testing.T, s kv.State, r kv.Request) kv.State {
	t.Helper()
	s, resp := kv.Step(s, r)
	require.NoError(t, resp.Err)
	return s
}

// SPEC §2.5: compares, branches, shared revision, event order, range inside a txn.
func TestTxn(t *testing.T) {
	base, _ := apply(put("a", "1"), put("a", "2")) // a: create 2, mod 3, version 2, value "2"
	cmp := func(target kv.CompareTarget, result kv.CompareResult, value string, number int64) kv.Compare {
		return kv.Compare{Key: "a", Target: target, Result: result, Value: value, Number: number}
	}
	missing := func(target kv.CompareTarget, result kv.CompareResult, value string, number int64) kv.Compare {
		c := cmp(target, result, value, number)
		c.Key = "zz"
		return c
	}
	for _, tc := range []struct {
		name string
		cmp  kv.Compare
		want bool
	}{
		{"value equal", cmp(kv.TargetValue, kv.CompareEqual, "2", 0), true},
		{"value not equal", cmp(kv.TargetValue, kv.CompareNotEqual, "2", 0), false},
		{"value less", cmp(kv.TargetValue, kv.CompareLess, "3", 0), true},
		{"value greater", cmp(kv.TargetValue, kv.CompareGreater, "10", 0), true},
		{"version equal", cmp(kv.TargetVersion, kv.CompareEqual, "", 2), true},
		{"version less", cmp(kv.TargetVersion, kv.CompareLess, "", 2), false},
		{"create revision equal", cmp(kv.TargetCreateRevision, kv.CompareEqual, "", 2), true},
		{"create revision greater", cmp(kv.TargetCreateRevision, kv.CompareGreater, "", 1), true},
		{"mod revision equal", cmp(kv.TargetModRevision, kv.CompareEqual, "", 3), true},
		{"mod revision not equal", cmp(kv.TargetModRevision, kv.CompareNotEqual, "", 3), false},
		{"missing key has version 0", missing(kv.TargetVersion, kv.CompareEqual, "", 0), true},
		{"missing key has create revision 0", missing(kv.TargetCreateRevision, kv.CompareEqual, "", 0), true},
		{"missing key value compare is false", missing(kv.TargetValue, kv.CompareNotEqual, "x", 0), false},
		{"missing key value equal empty is false", missing(kv.TargetValue, kv.CompareEqual, "", 0), false},
		{"unknown result is false", cmp(kv.TargetVersion, kv.CompareResult(9), "", 2), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp := kv.Step(base, txn([]kv.Compare{tc.cmp}, []kv.Op{opGet("a", 0)}, []kv.Op{opGet("a", 0), opGet("a", 0)}))
			require.NoError(t, resp.Err)
			require.Equal(t, tc.want, resp.Txn.Succeeded)
			if tc.want {
				require.Len(t, resp.Txn.Responses, 1, "the success branch ran")
			} else {
				require.Len(t, resp.Txn.Responses, 2, "the failure branch ran")
			}
		})
	}

	t.Run("writes share one revision, events in op order", func(t *testing.T) {
		s, resp := kv.Step(base, txn(nil, []kv.Op{opPut("c", "1"), opDel("a", ""), opPut("b", "1")}, nil))
		require.NoError(t, resp.Err)
		require.EqualValues(t, 4, resp.Revision)
		c, _ := s.LastCommit()
		var got []string
		for _, e := range c.Events {
			require.EqualValues(t, 4, e.KV.ModRevision)
			got = append(got, e.Type.String()+" "+e.KV.Key)
		}
		require.Equal(t, []string{"PUT c", "DELETE a", "PUT b"}, got)
	})
	t.Run("a range sees earlier writes of the same txn", func(t *testing.T) {
		_, resp := kv.Step(base, txn(nil, []kv.Op{opGet("b", 0), opPut("b", "new"), opGet("b", 0), opGet("a", 3)}, nil))
		require.NoError(t, resp.Err)
		r := resp.Txn.Responses
		require.Empty(t, r[0].Range.KVs)
		require.Equal(t, "new", r[2].Range.KVs[0].Value)
		require.EqualValues(t, 4, r[2].Range.KVs[0].ModRevision)
		require.Equal(t, "2", r[3].Range.KVs[0].Value, "an explicit revision reads history")
	})
	t.Run("put response carries prev kv when asked", func(t *testing.T) {
		_, resp := kv.Step(base, txn(nil, []kv.Op{{Put: &kv.PutRequest{Key: "a", Value: "3", PrevKV: true}}}, nil))
		require.Equal(t, "2", resp.Txn.Responses[0].Put.PrevKV.Value)
		_, resp = kv.Step(base, kv.Request{Delete: &kv.DeleteRequest{Key: "a", PrevKV: true}})
		require.Equal(t, kv.DeleteResponse{Deleted: 1, PrevKVs: []kv.KeyValue{{Key: "a", Value: "2", CreateRevision: 2, ModRevision: 3, Version: 2}}}, *resp.Delete)
	})
	for _, tc := range []struct {
		name string
		req  kv.Request
		err  error
	}{
		{"put twice", txn(nil, []kv.Op{opPut("b", "1"), opPut("b", "2")}, nil), kv.ErrDuplicateKey},
		{"put in a deleted range", txn(nil, []kv.Op{opDel("a", "c"), opPut("b", "2")}, nil), kv.ErrDuplicateKey},
		{"delete after put", txn(nil, []kv.Op{opPut("b", "2"), opDel("b", "")}, nil), kv.ErrDuplicateKey},
		{"duplicate in the branch not taken", txn(nil, nil, []kv.Op{opPut("b", "1"), opPut("b", "2")}), kv.ErrDuplicateKey},
		{"empty compare key", txn([]kv.Compare{{Key: ""}}, nil, nil), kv.ErrEmptyKey},
		{"empty op key", txn(nil, []kv.Op{opPut("", "1")}, nil), kv.ErrEmptyKey},
		{"empty op", txn(nil, []kv.Op{{}}, nil), kv.ErrKeyNotFound},
		{"op with two operations", txn(nil, []kv.Op{{Put: &kv.PutRequest{Key: "a"}, Delete: &kv.DeleteRequest{Key: "a"}}}, nil), kv.ErrInvalidRequest},
		{"future range fails the whole txn", txn(nil, []kv.Op{opPut("b", "1"), opGet("a", 4)}, nil), kv.ErrFutureRev},
		{"negative range revision below the compact revision", txn(nil, []kv.Op{opGet("a", -2)}, nil), kv.ErrCompacted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, resp := kv.Step(base, tc.req)
			require.ErrorIs(t, resp.Err, tc.err)
			require.Equal(t, kv.Response{Err: tc.err}, resp, "a failed request carries only its error")
			require.True(t, kv.Equal(base, s), "a failed txn changes nothing")
		})
	}
	t.Run("overlapping deletes are allowed", func(t *testing.T) {
		s, resp := kv.Step(base, txn(nil, []kv.Op{opDel("a", "\x00"), opDel("a", "")}, nil))
		require.NoError(t, resp.Err)
		require.EqualValues(t, 1, resp.Txn.Responses[0].Delete.Deleted)
		require.EqualValues(t, 0, resp.Txn.Responses[1].Delete.Deleted)
		c, _ := s.LastCommit()
		require.Len(t, c.Events, 1)
	})
	t.Run("the same key in both branches is allowed", func(t *testing.T) {
		_, resp := kv.Step(base, txn(nil, []kv.Op{opPut("b", "1")}, []kv.Op{opPut("b", "2")}))
		require.NoError(t, resp.Err)
	})
}

func TestInvalidRequest(t *testing.T) {
	for _, req := range []kv.Request{{}, {Put: &kv.PutRequest{Key: "a"}, Range: &kv.RangeRequest{Key: "a"}}} {
		s, resp := kv.Step(kv.State{}, req)
		require.ErrorIs(t, resp.Err, kv.ErrInvalidRequest)
		require.EqualValues(t, 1, s.Revision())
	}
	for _, req := range []kv.Request{put("", "x"), del("", ""), get("", "", 0)} {
		_, resp := kv.Step(kv.State{}, req)
		require.ErrorIs(t, resp.Err, kv.ErrEmptyKey)
	}
}

// Step is pure: stepping a state again gives the same result, and the state
// stepped from does not change.
func TestStepIsPure(t *testing.T) {
	s1, _ := apply(put("a", "1"), put("b", "1"))
	before := s1.Hash()
	s2, r2 := kv.Step(s1, put("a", "2"))
	s3, r3 := kv.Step(s1, put("a", "3"))
	require.Equal(t, before, s1.Hash())
	require.EqualValues(t, 4, r2.Revision)
	require.EqualValues(t, 4, r3.Revision)
	got, _ := s1.Get("a", 0)
	require.Equal(t, "1", got.Value, "the old state still sees the old value")
	got, _ = s2.Get("a", 0)
	require.Equal(t, "2", got.Value)
	got, _ = s3.Get("a", 0)
	require.Equal(t, "3", got.Value)
	require.False(t, kv.Equal(s2, s3))
}

func TestSameError(t *testing.T) {
	require.True(t, kv.SameError(nil, nil))
	require.False(t, kv.SameError(kv.ErrCompacted, nil))
	require.True(t, kv.SameError(kv.ErrCompacted, errors.New(kv.ErrCompacted.Error())), "errors decoded from a trace match by text")
	require.False(t, kv.SameError(kv.ErrCompacted, kv.ErrFutureRev))
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"a": "b", "a/": "a0", "a\xff": "b", "\xff\xff": "\x00", "": "\x00"} {
		require.Equal(t, want, kv.PrefixEnd(in), fmt.Sprintf("PrefixEnd(%q)", in))
	}
}

// A store that was not fresh: its history starts at a later revision.
func TestStart(t *testing.T) {
	s := kv.Start(10)
	require.EqualValues(t, 10, s.Revision())
	require.True(t, kv.Equal(kv.Start(1), kv.State{}))
	s, resp := kv.Step(s, put("a", "1"))
	require.EqualValues(t, 11, resp.Revision)
	_, resp = kv.Step(s, get("a", "", 12))
	require.ErrorIs(t, resp.Err, kv.ErrFutureRev)
	h := s.History()
	require.EqualValues(t, 10, h.Base())
	require.EqualValues(t, 11, h.Head())
	require.EqualValues(t, 10, kv.Start(10).History().Head())
}

func putLease(k, v string, lease int64) kv.Request {
	return kv.Request{Put: &kv.PutRequest{Key: k, Value: v, Lease: lease}}
}
func revokeLease(lease int64) kv.Request {
	return kv.Request{LeaseRevoke: &kv.LeaseRevokeRequest{Lease: lease}}
}

// SPEC §2.9 Lease operations, §3.15 LeaseAtomic: the server's revocation
// of a lease deletes, at one revision and in key order, exactly the live
// keys whose current version carries the lease — not a key put with it
// and overwritten without it, not another lease's — and creates no
// revision when none is attached (etcd v3.7.3 lessor.Revoke; mvcc
// storeTxnWrite.End).
func TestLeaseRevoke(t *testing.T) {
	s, rs := apply(
		putLease("c", "1", 7), // 2
		putLease("a", "1", 7), // 3
		putLease("b", "1", 8), // 4: another lease
		putLease("d", "1", 7), // 5
		put("d", "2"),         // 6: d leaves lease 7
		putLease("e", "1", 7), // 7
		del("e", ""),          // 8: e is gone already
		revokeLease(7),        // 9: a and c
	)
	last := rs[len(rs)-1]
	require.NoError(t, last.Err)
	require.Equal(t, int64(9), last.Revision)
	require.NotNil(t, last.LeaseRevoke)
	c, ok := s.LastCommit()
	require.True(t, ok)
	require.Equal(t, int64(9), c.Revision)
	var got []string
	for _, e := range c.Events {
		require.Equal(t, kv.Delete, e.Type)
		require.Equal(t, int64(9), e.KV.ModRevision)
		require.Equal(t, int64(7), e.PrevKV.Lease)
		got = append(got, e.KV.Key)
	}
	require.Equal(t, []string{"a", "c"}, got, "the keys attached to lease 7, in key order")
	_, r := kv.Step(s, get("a", "\x00", 0))
	require.Equal(t, []string{"b=1", "d=2"}, keysOf(r))

	// A second revocation, or one of a lease with no key, creates no revision.
	for _, l := range []int64{7, 99} {
		s2, r := kv.Step(s, revokeLease(l))
		require.NoError(t, r.Err)
		require.Equal(t, int64(9), r.Revision)
		require.True(t, kv.Equal(s, s2), "lease %d: nothing attached, nothing changes", l)
	}
	_, r = kv.Step(s, revokeLease(0))
	require.ErrorIs(t, r.Err, kv.ErrInvalidRequest, "lease 0 is no lease")
}
