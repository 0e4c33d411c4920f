// Package histsim simulates linearizable runs of an etcd-like store, as
// traces: the checkers' tests and benchmarks (linearizability, bench) feed
// them to the checker, which must accept every one. It is checker-side: it
// imports the model.
package histsim

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// Config shapes a simulated run.
type Config struct {
	Ops, Clients int
	CompactEvery int     // every n-th operation compacts (0: never)
	Unknown      float64 // share of writes whose client never learns the outcome
	Watch        bool    // record a collector watch over every key
	Seed         uint64
}

// Simulate produces a linearizable trace: clients issue requests with
// overlapping [call, return] intervals, and a simulated server applies each
// at a random instant inside its interval. Values are unique. A write with
// an unknown outcome is applied or not, at random. With cfg.Watch, a
// collector watch on every key receives the canonical stream of the final
// history, each revision shortly after it was committed.
func Simulate(cfg Config) *traces.Trace {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))
	type pending struct {
		client    int
		call, ret int64
		applyAt   int64
		req       kv.Request
		unknown   bool
		apply     bool
	}
	var ps []pending
	clock := make([]int64, cfg.Clients)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i := 0; i < cfg.Ops; i++ {
		c := rng.IntN(cfg.Clients)
		call := clock[c] + 1 + rng.Int64N(5)
		ret := call + 1 + rng.Int64N(20)
		clock[c] = ret
		var req kv.Request
		k := keys[rng.IntN(len(keys))]
		switch r := rng.IntN(10); {
		case cfg.CompactEvery > 0 && i%cfg.CompactEvery == cfg.CompactEvery-1:
			req.Compact = &kv.CompactRequest{} // revision chosen when applied
		case r < 5:
			req.Put = &kv.PutRequest{Key: k, Value: fmt.Sprint("v", i)}
		case r < 6:
			req.Delete = &kv.DeleteRequest{Key: k}
		case r < 7:
			req.Txn = &kv.TxnRequest{
				Compare: []kv.Compare{{Key: k, Target: kv.TargetVersion, Result: kv.CompareGreater, Number: 0}},
				Success: []kv.Op{{Put: &kv.PutRequest{Key: k, Value: fmt.Sprint("t", i)}}},
				Failure: []kv.Op{{Range: &kv.RangeRequest{Key: k}}}}
		case r < 8:
			req.Range = &kv.RangeRequest{Key: k, Revision: -1} // a past revision, chosen when applied
		default:
			req.Range = &kv.RangeRequest{Key: "a", RangeEnd: "\x00"}
		}
		p := pending{client: c, call: call, ret: ret, applyAt: call + rng.Int64N(ret-call+1), req: req, apply: true}
		if req.Put != nil && rng.Float64() < cfg.Unknown {
			p.unknown, p.apply = true, rng.IntN(2) == 0
		}
		ps = append(ps, p)
	}
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ps[order[a]].applyAt < ps[order[b]].applyAt })
	var s kv.State
	t := &traces.Trace{Name: fmt.Sprintf("sim-%d", cfg.Seed), Header: traces.Header{Format: traces.Format, Version: traces.Version,
		System: "simulation", Start: "2026-11-29T00:00:00Z", UniqueValues: true}}
	t.Ops = make([]traces.Op, len(ps))
	commitTime := map[int64]int64{}
	for _, i := range order {
		p := &ps[i]
		if p.req.Compact != nil {
			p.req.Compact.Revision = max(1, s.Revision()-5)
		}
		if p.req.Range != nil && p.req.Range.Revision == -1 {
			p.req.Range = &kv.RangeRequest{Key: p.req.Range.Key, Revision: max(1, s.Revision()-rng.Int64N(4))}
		}
		op := traces.Op{Client: p.client, Call: p.call, Return: p.ret, Request: p.req}
		if p.apply {
			var resp kv.Response
			s, resp = kv.Step(s, p.req)
			op.Response = &resp
			if _, ok := commitTime[s.Revision()]; !ok {
				commitTime[s.Revision()] = p.applyAt
			}
		}
		if p.unknown {
			op.Response, op.Error = nil, "context deadline exceeded"
		}
		t.Ops[i] = op
	}
	if cfg.Watch {
		h := s.History()
		req := watch.Request{Key: "\x00", RangeEnd: "\x00", StartRevision: 1}
		w := &traces.Watch{Client: cfg.Clients, ID: 1, Time: 0, Request: req}
		// The collector starts before anything is compacted.
		h0, _ := kv.NewHistory(h.Commits()...)
		for _, r := range watch.Canonical(h0, req, 1) {
			at := int64(0)
			if len(r.Events) > 0 {
				at = commitTime[r.Events[0].KV.ModRevision] + 1
			}
			w.Responses = append(w.Responses, traces.WatchResponse{Time: at, Response: r})
		}
		t.Watches = append(t.Watches, w)
	}
	return t
}

// ThreeKeyTxns returns a history of revisions transactions, each putting
// the keys a, b and c (3 × revisions events), the watch of [a, d) from
// revision 1 with prevKV, and the canonical stream of that watch: the input
// of the watch-validation benchmarks.
func ThreeKeyTxns(revisions int) (*kv.History, watch.Request, []watch.Response) {
	var s kv.State
	h := &kv.History{}
	for i := range revisions {
		s, _ = kv.Step(s, kv.Request{Txn: &kv.TxnRequest{Success: []kv.Op{
			{Put: &kv.PutRequest{Key: "a", Value: string(rune('a' + i%26))}},
			{Put: &kv.PutRequest{Key: "b", Value: "x"}},
			{Put: &kv.PutRequest{Key: "c", Value: "y"}},
		}}})
		c, _ := s.LastCommit()
		h.Append(c)
	}
	req := watch.Request{Key: "a", RangeEnd: "d", StartRevision: 1, PrevKV: true}
	return h, req, watch.Canonical(h, req, 1)
}
