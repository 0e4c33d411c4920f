package mutate

import (
	"fmt"
	"math/rand"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

// The semantic operators on key-value operations (docs/SPEC.md §2.6, §2.7,
// §2.8). They apply to linearizable subjects without a profile (a profile's
// allowances change what a response may say). Serializable reads are not
// linearized (§2.8): only kv-serializable-read changes them.

// writeCreates reports whether a successful response says its request
// created a revision: a put, a delete that removed keys, a transaction
// whose branch wrote.
func writeCreates(resp *kv.Response) bool {
	switch {
	case resp == nil || resp.Err != nil:
		return false
	case resp.Put != nil:
		return true
	case resp.Delete != nil:
		return resp.Delete.Deleted > 0
	case resp.Txn != nil:
		for _, o := range resp.Txn.Responses {
			if o.Put != nil || (o.Delete != nil && o.Delete.Deleted > 0) {
				return true
			}
		}
	}
	return false
}

func kvSubject(s *Subject) bool { return s.H != nil && s.Trace.Header.Profile == "" }

// mutableResponse returns a copy of op i's response, installed in the mutant.
func (m *Mutant) mutableResponse(i int) *kv.Response {
	c := *m.tr().Ops[i].Response
	m.tr().Ops[i].Response = &c
	return &c
}

func opWhere(s *Subject, i int) string {
	o := s.Trace.Ops[i]
	return fmt.Sprintf("op at line %d (client %d)", o.Line, o.Client)
}

var kvOperators = []*Operator{
	{
		Name: "kv-write-revision", Kind: Semantic,
		Doc: "answers a write with the revision another write of known outcome created: two writes claim one revision " +
			"(§2.7 Linearizable; §2.6 WriteRevision when a watch delivered its value)",
		Properties: []spec.Property{spec.Linearizable, spec.WriteRevision},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !kvSubject(s) {
				return false
			}
			var writes []int
			for i, o := range s.Trace.Ops {
				if writeCreates(o.Response) {
					writes = append(writes, i)
				}
			}
			if len(writes) < 2 {
				return false
			}
			x := r.Intn(len(writes))
			// The nearest writes make the mildest lie.
			y := x + 1
			if y == len(writes) || (x > 0 && r.Intn(2) == 0) {
				y = x - 1
			}
			if y < 0 {
				return false
			}
			i, other := writes[x], writes[y]
			from, to := s.Trace.Ops[i].Response.Revision, s.Trace.Ops[other].Response.Revision
			if from == to {
				return false
			}
			m.mutableResponse(i).Revision = to
			m.Expect = [][]spec.Property{{spec.Linearizable}, {spec.WriteRevision}, {spec.Linearizable, spec.WriteRevision}}
			m.whatf("%s: answered revision %d instead of %d, which the %s created", opWhere(s, i), to, from, opWhere(s, other))
			return true
		},
	},
	{
		Name: "kv-stale-read", Kind: Semantic,
		Doc: "answers a read of the current revision with the state and header of a revision older than one its " +
			"client could already know committed (§2.7 Linearizable; etcd#20418)",
		Properties: []spec.Property{spec.Linearizable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !kvSubject(s) {
				return false
			}
			i, ok := pickOp(s, r, func(i int) bool {
				o := s.Trace.Ops[i]
				return o.Request.Range != nil && o.Request.Range.Revision <= 0 && o.Response != nil && o.Response.Err == nil && !o.Serializable &&
					s.committedBy(o.Call-1) > max(s.H.Base(), 1)
			})
			if !ok {
				return false
			}
			o := s.Trace.Ops[i]
			known := s.committedBy(o.Call - 1)
			lo := max(s.H.Base(), 1)
			S := lo + r.Int63n(known-lo)
			resp := m.mutableResponse(i)
			resp.Revision = S
			resp.Range = rangeAt(s, *o.Request.Range, S)
			m.Expect = one(spec.Linearizable)
			m.whatf("%s: answered with the state at revision %d; revision %d had returned before its call", opWhere(s, i), S, known)
			return true
		},
	},
	{
		Name: "kv-read-wrong-revision", Kind: Semantic,
		Doc:        "answers a read at an explicit revision with another revision's different state (§2.7 Linearizable)",
		Properties: []spec.Property{spec.Linearizable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !kvSubject(s) {
				return false
			}
			i, ok := pickOp(s, r, func(i int) bool {
				o := s.Trace.Ops[i]
				return o.Request.Range != nil && o.Request.Range.Revision > 0 && o.Response != nil && o.Response.Err == nil && !o.Serializable
			})
			if !ok {
				return false
			}
			o := s.Trace.Ops[i]
			rq := *o.Request.Range
			want := rangeAt(s, rq, rq.Revision)
			for range tries {
				other := max(s.H.Base(), 1) + r.Int63n(s.head()-max(s.H.Base(), 1)+1)
				got := rangeAt(s, rq, other)
				if other == rq.Revision || sameRange(got, want) {
					continue
				}
				m.mutableResponse(i).Range = got
				m.Expect = one(spec.Linearizable)
				m.whatf("%s: a read at revision %d answered with the state at %d", opWhere(s, i), rq.Revision, other)
				return true
			}
			return false
		},
	},
	{
		Name: "kv-corrupt-response-kv", Kind: Semantic,
		Doc: "changes one field of a key-value in a response (a read's, a put's or a delete's previous key-value) " +
			"(§2.7 Linearizable)",
		Properties: []spec.Property{spec.Linearizable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !kvSubject(s) {
				return false
			}
			i, ok := pickOp(s, r, func(i int) bool { return !s.Trace.Ops[i].Serializable && len(responseKVs(s.Trace.Ops[i].Response)) > 0 })
			if !ok {
				return false
			}
			resp := m.mutableResponse(i)
			kvs := copyResponseKVs(resp)
			k := pickOne(r, kvs)
			field := corruptKV(k, r, s.allows(linearizability.UntrackedVersions))
			m.Expect = one(spec.Linearizable)
			m.whatf("%s: the key-value of %q in its response: %s", opWhere(s, i), k.Key, field)
			return true
		},
	},
	{
		Name: "kv-false-compacted", Kind: Semantic,
		Doc: "answers a read ErrCompacted although no compaction at or above the revision it reads can have taken " +
			"effect before it returned (§2.7 Linearizable)",
		Properties: []spec.Property{spec.Linearizable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !kvSubject(s) {
				return false
			}
			i, ok := pickOp(s, r, func(i int) bool {
				o := s.Trace.Ops[i]
				return o.Request.Range != nil && o.Response != nil && o.Response.Err == nil && !o.Serializable &&
					(o.Request.Range.Revision <= 0 || o.Request.Range.Revision >= s.anyCompact(o.Return))
			})
			if !ok {
				return false
			}
			m.tr().Ops[i].Response = &kv.Response{Err: kv.ErrCompacted}
			m.Expect = one(spec.Linearizable)
			m.whatf("%s: answered %q", opWhere(s, i), kv.ErrCompacted)
			return true
		},
	},
	{
		Name: "kv-serializable-read", Kind: Semantic,
		Doc: "answers a serializable read (§2.8 SerializableRead: served by whichever member, possibly stale) with " +
			"what no member could answer: the state of another revision under its header revision, or ErrCompacted " +
			"for a read of the current revision, which no compaction makes unreadable",
		Properties: []spec.Property{spec.SerializableRead},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !kvSubject(s) {
				return false
			}
			i, ok := pickOp(s, r, func(i int) bool {
				o := s.Trace.Ops[i]
				return o.Serializable && o.Request.Range != nil && o.Response != nil && o.Response.Err == nil
			})
			if !ok {
				return false
			}
			o := s.Trace.Ops[i]
			rq := *o.Request.Range
			if rq.Revision <= 0 && r.Intn(3) == 0 {
				m.tr().Ops[i].Response = &kv.Response{Err: kv.ErrCompacted}
				m.Expect = one(spec.SerializableRead)
				m.whatf("%s: a serializable read of the current revision answered %q", opWhere(s, i), kv.ErrCompacted)
				return true
			}
			at := o.Response.Revision
			if rq.Revision > 0 {
				at = rq.Revision
			}
			want := rangeAt(s, rq, at)
			for range tries {
				other := max(s.H.Base(), 1) + r.Int63n(s.head()-max(s.H.Base(), 1)+1)
				got := rangeAt(s, rq, other)
				if other == at || sameRange(got, want) {
					continue
				}
				m.mutableResponse(i).Range = got
				m.Expect = one(spec.SerializableRead)
				m.whatf("%s: a serializable read at header %d (reading %d) answered with the state at %d", opWhere(s, i), o.Response.Revision, at, other)
				return true
			}
			return false
		},
	},
}

func pickOp(s *Subject, r *rand.Rand, ok func(int) bool) (int, bool) {
	var idx []int
	for i := range s.Trace.Ops {
		if ok(i) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return 0, false
	}
	return pickOne(r, idx), true
}

// rangeAt answers rq as a correct store does at revision rev (without
// compaction): the keys, the count, more, keys only, count only.
func rangeAt(s *Subject, rq kv.RangeRequest, rev int64) *kv.RangeResponse {
	kvs := s.KH.State.Snapshot(rq.Key, rq.RangeEnd, rev)
	out := &kv.RangeResponse{Count: int64(len(kvs))}
	if rq.CountOnly {
		return out
	}
	if rq.Limit > 0 && int64(len(kvs)) > rq.Limit {
		kvs, out.More = kvs[:rq.Limit], true
	}
	for _, k := range kvs {
		if rq.KeysOnly {
			k.Value = ""
		}
		out.KVs = append(out.KVs, k)
	}
	return out
}

func sameRange(a, b *kv.RangeResponse) bool {
	if a.Count != b.Count || a.More != b.More || len(a.KVs) != len(b.KVs) {
		return false
	}
	for i := range a.KVs {
		if a.KVs[i] != b.KVs[i] {
			return false
		}
	}
	return true
}

// responseKVs lists the key-values of a successful response.
func responseKVs(resp *kv.Response) []kv.KeyValue {
	if resp == nil || resp.Err != nil {
		return nil
	}
	var out []kv.KeyValue
	add := func(rg *kv.RangeResponse, p *kv.PutResponse, d *kv.DeleteResponse) {
		if rg != nil {
			out = append(out, rg.KVs...)
		}
		if p != nil && p.PrevKV != nil {
			out = append(out, *p.PrevKV)
		}
		if d != nil {
			out = append(out, d.PrevKVs...)
		}
	}
	add(resp.Range, resp.Put, resp.Delete)
	if resp.Txn != nil {
		for _, o := range resp.Txn.Responses {
			add(o.Range, o.Put, o.Delete)
		}
	}
	return out
}

// copyResponseKVs copies every part of resp that holds key-values and
// returns pointers to the copies, to change in place.
func copyResponseKVs(resp *kv.Response) []*kv.KeyValue {
	var out []*kv.KeyValue
	copyParts := func(rg **kv.RangeResponse, p **kv.PutResponse, d **kv.DeleteResponse) {
		if *rg != nil {
			c := **rg
			c.KVs = append([]kv.KeyValue(nil), c.KVs...)
			*rg = &c
			for i := range c.KVs {
				out = append(out, &c.KVs[i])
			}
		}
		if *p != nil && (*p).PrevKV != nil {
			c := **p
			prev := *c.PrevKV
			c.PrevKV = &prev
			*p = &c
			out = append(out, c.PrevKV)
		}
		if *d != nil {
			c := **d
			c.PrevKVs = append([]kv.KeyValue(nil), c.PrevKVs...)
			*d = &c
			for i := range c.PrevKVs {
				out = append(out, &c.PrevKVs[i])
			}
		}
	}
	copyParts(&resp.Range, &resp.Put, &resp.Delete)
	if resp.Txn != nil {
		t := *resp.Txn
		t.Responses = append([]kv.OpResponse(nil), t.Responses...)
		resp.Txn = &t
		for i := range t.Responses {
			o := &t.Responses[i]
			copyParts(&o.Range, &o.Put, &o.Delete)
		}
	}
	return out
}
