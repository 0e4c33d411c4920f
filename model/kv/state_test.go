package kv

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// naive is a deliberately simple store: every key's full history in a map,
// copied on every write. It implements Put, Delete, Range and Compact the
// obvious way, as a reference for the persistent treap behind State.
type naive struct {
	rev, compact int64
	hist         map[string][]version // oldest first
}

func (n naive) clone() naive {
	c := naive{rev: n.rev, compact: n.compact, hist: make(map[string][]version, len(n.hist))}
	for k, v := range n.hist {
		c.hist[k] = slices.Clone(v)
	}
	return c
}

func (n naive) at(key string, rev int64) *KeyValue {
	var found *KeyValue
	for _, v := range n.hist[key] {
		if v.kv.ModRevision <= rev {
			if v.tomb {
				found = nil
			} else {
				kv := v.kv
				found = &kv
			}
		}
	}
	return found
}

func (n naive) sortedKeys() []string {
	var ks []string
	for k := range n.hist {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (n naive) step(req Request) (naive, Response) {
	switch {
	case req.Put != nil:
		if req.Put.Key == "" {
			return n, Response{Err: ErrEmptyKey}
		}
		c := n.clone()
		c.rev++
		prev := n.at(req.Put.Key, n.rev)
		kv := KeyValue{Key: req.Put.Key, Value: req.Put.Value, CreateRevision: c.rev, ModRevision: c.rev, Version: 1}
		if prev != nil {
			kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
		}
		c.hist[kv.Key] = append(c.hist[kv.Key], version{kv: kv})
		var pr PutResponse
		if req.Put.PrevKV && prev != nil {
			pr.PrevKV = prev
		}
		return c, Response{Revision: c.rev, Put: &pr}
	case req.Delete != nil:
		if req.Delete.Key == "" {
			return n, Response{Err: ErrEmptyKey}
		}
		c := n.clone()
		var dr DeleteResponse
		for _, k := range n.sortedKeys() {
			if prev := n.at(k, n.rev); prev != nil && InRange(req.Delete.Key, req.Delete.RangeEnd, k) {
				c.hist[k] = append(c.hist[k], version{kv: KeyValue{Key: k, ModRevision: n.rev + 1}, tomb: true})
				dr.Deleted++
				if req.Delete.PrevKV {
					dr.PrevKVs = append(dr.PrevKVs, *prev)
				}
			}
		}
		if dr.Deleted == 0 {
			return n, Response{Revision: n.rev, Delete: &dr}
		}
		c.rev++
		return c, Response{Revision: c.rev, Delete: &dr}
	case req.Range != nil:
		r := *req.Range
		rev := r.Revision
		switch {
		case r.Key == "":
			return n, Response{Err: ErrEmptyKey}
		case rev > n.rev:
			return n, Response{Err: ErrFutureRev}
		case rev <= 0:
			rev = n.rev
		}
		if rev < n.compact {
			return n, Response{Err: ErrCompacted}
		}
		var rr RangeResponse
		for _, k := range n.sortedKeys() {
			kv := n.at(k, rev)
			if kv == nil || !InRange(r.Key, r.RangeEnd, k) {
				continue
			}
			rr.Count++
			switch {
			case r.CountOnly:
			case r.Limit > 0 && int64(len(rr.KVs)) >= r.Limit:
				rr.More = true
			default:
				c := *kv
				if r.KeysOnly {
					c.Value = ""
				}
				rr.KVs = append(rr.KVs, c)
			}
		}
		return n, Response{Revision: n.rev, Range: &rr}
	default:
		rev := req.Compact.Revision
		switch {
		case rev <= n.compact:
			return n, Response{Err: ErrCompacted}
		case rev > n.rev:
			return n, Response{Err: ErrFutureRev}
		}
		c := n.clone()
		c.compact = rev
		return c, Response{Revision: n.rev, Compact: &CompactResponse{}}
	}
}

// testKey draws short keys over a small alphabet, so that keys collide,
// share prefixes, and build treaps of every shape; the empty key is included.
var testKey = rapid.Map(rapid.SliceOfN(rapid.SampledFrom([]byte{'a', '/', '0', 0x00, 0xff}), 0, 2),
	func(b []byte) string { return string(b) })

func drawRequest(t *rapid.T, rev int64) Request {
	key := testKey.Draw(t, "key")
	end := rapid.OneOf(rapid.SampledFrom([]string{"", "\x00"}), testKey).Draw(t, "end")
	switch rapid.IntRange(0, 5).Draw(t, "kind") {
	case 0, 1:
		return Request{Put: &PutRequest{Key: key, Value: rapid.StringN(0, 2, 2).Draw(t, "value"), PrevKV: rapid.Bool().Draw(t, "prevKV")}}
	case 2:
		return Request{Delete: &DeleteRequest{Key: key, RangeEnd: end, PrevKV: rapid.Bool().Draw(t, "prevKV")}}
	case 3:
		return Request{Compact: &CompactRequest{Revision: rapid.Int64Range(-1, rev+1).Draw(t, "compactAt")}}
	default:
		return Request{Range: &RangeRequest{Key: key, RangeEnd: end, Revision: rapid.Int64Range(-1, rev+1).Draw(t, "rev"),
			Limit: rapid.Int64Range(-1, 3).Draw(t, "limit"), CountOnly: rapid.IntRange(0, 4).Draw(t, "countOnly") == 0,
			KeysOnly: rapid.IntRange(0, 4).Draw(t, "keysOnly") == 0}}
	}
}

// TestStepMatchesNaiveStore: the persistent State answers exactly as a
// store that copies everything. SPEC §2.1–§2.4.
func TestStepMatchesNaiveStore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s State
		n := naive{rev: 1, compact: -1, hist: map[string][]version{}}
		var old []State
		var oldHashes []uint64
		for i, steps := 0, rapid.IntRange(1, 60).Draw(t, "steps"); i < steps; i++ {
			req := drawRequest(t, s.Revision())
			old, oldHashes = append(old, s), append(oldHashes, s.Hash())
			var got, want Response
			s, got = Step(s, req)
			n, want = n.step(req)
			if !SameResponse(got, want) {
				t.Fatalf("step %d %s:\nstate machine %s\nnaive store   %s", i, describe(req), describeResp(got), describeResp(want))
			}
			if s.Revision() != n.rev || s.CompactRevision() != n.compact {
				t.Fatalf("revision %d/%d, naive %d/%d", s.Revision(), s.CompactRevision(), n.rev, n.compact)
			}
		}
		for i := range old {
			if old[i].Hash() != oldHashes[i] {
				t.Fatalf("state %d changed after later steps", i)
			}
		}
	})
}

func describe(r Request) string {
	switch {
	case r.Put != nil:
		return fmt.Sprintf("put %+v", *r.Put)
	case r.Delete != nil:
		return fmt.Sprintf("delete %+v", *r.Delete)
	case r.Range != nil:
		return fmt.Sprintf("range %+v", *r.Range)
	case r.Compact != nil:
		return fmt.Sprintf("compact %+v", *r.Compact)
	}
	return "txn"
}

func describeResp(r Response) string {
	s := fmt.Sprintf("rev=%d err=%v", r.Revision, r.Err)
	if r.Range != nil {
		s += fmt.Sprintf(" range=%+v", *r.Range)
	}
	if r.Delete != nil {
		s += fmt.Sprintf(" delete=%+v", *r.Delete)
	}
	if r.Put != nil && r.Put.PrevKV != nil {
		s += fmt.Sprintf(" prev=%+v", *r.Put.PrevKV)
	}
	return s
}

// TestEqualAndHash: Equal holds exactly when two states have the same
// revision, compact revision and key histories, whatever the order their
// keys were first written in; equal states hash alike.
func TestEqualAndHash(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Request { return drawRequest(t, 8) }), 0, 30).Draw(t, "reqs")
		var a, b State
		var na, nb naive
		na = naive{rev: 1, compact: -1, hist: map[string][]version{}}
		nb = na.clone()
		for _, r := range reqs {
			a, _ = Step(a, r)
			na, _ = na.step(r)
		}
		// b: either the same requests, or the same with some dropped.
		for _, r := range reqs {
			if rapid.IntRange(0, 9).Draw(t, "drop") == 0 {
				continue
			}
			b, _ = Step(b, r)
			nb, _ = nb.step(r)
		}
		same := na.rev == nb.rev && na.compact == nb.compact && fmt.Sprint(na.hist) == fmt.Sprint(nb.hist)
		if Equal(a, b) != same {
			t.Fatalf("Equal = %v, naive comparison says %v", Equal(a, b), same)
		}
		if same && a.Hash() != b.Hash() {
			t.Fatalf("equal states with different hashes")
		}
	})
}

// The treap's shape depends only on its keys: inserting in any order gives
// the same tree, which is what lets Equal compare structurally.
func TestTreapShapeIsCanonical(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfNDistinct(rapid.StringN(0, 3, 3), 0, 40, rapid.ID[string]).Draw(t, "keys")
		perm := rapid.Permutation(keys).Draw(t, "perm")
		var a, b *node
		for _, k := range keys {
			a, _ = insert(a, k, &version{kv: KeyValue{Key: k}})
		}
		for _, k := range perm {
			b, _ = insert(b, k, &version{kv: KeyValue{Key: k}})
		}
		if !sameShape(a, b) {
			t.Fatal("two insertion orders gave two shapes")
		}
		checkHeap(t, a)
	})
}

func sameShape(a, b *node) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.key == b.key && sameShape(a.left, b.left) && sameShape(a.right, b.right)
}

func checkHeap(t *rapid.T, n *node) {
	if n == nil {
		return
	}
	for _, c := range []*node{n.left, n.right} {
		if c != nil && above(c.prio, c.key, n.prio, n.key) {
			t.Fatalf("heap order broken at %q", n.key)
		}
		checkHeap(t, c)
	}
	if n.left != nil && n.left.key >= n.key || n.right != nil && n.right.key <= n.key {
		t.Fatalf("search order broken at %q", n.key)
	}
}

// TestVisitMatchesInRange: walking the treap over a range yields exactly the
// keys InRange accepts, in order, for every range over every key set drawn.
// SPEC §2.3 (range conventions).
func TestVisitMatchesInRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfNDistinct(testKey, 0, 25, rapid.ID[string]).Draw(t, "keys")
		var root *node
		for _, k := range keys {
			root, _ = insert(root, k, &version{kv: KeyValue{Key: k}})
		}
		sorted := slices.Sorted(slices.Values(keys))
		bounds := append([]string{"", "\x00", "a0", "a/", "\xff\xff"}, keys...)
		for _, from := range bounds {
			for _, end := range bounds {
				var got, want []string
				if !emptyRange(from, end) {
					visit(root, from, end, func(n *node) bool { got = append(got, n.key); return true })
				}
				for _, k := range sorted {
					if InRange(from, end, k) {
						want = append(want, k)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("visit [%q, %q): got %q, want %q", from, end, got, want)
				}
			}
		}
	})
}
