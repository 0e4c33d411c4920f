package linearizability

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

func properties(vs []Violation) []spec.Property {
	var ps []spec.Property
	seen := map[spec.Property]bool{}
	for _, v := range vs {
		if !seen[v.Property] {
			seen[v.Property] = true
			ps = append(ps, v.Property)
		}
	}
	return ps
}

// porcupineVerdict asks porcupine alone.
func porcupineVerdict(t *traces.Trace) porcupine.CheckResult {
	ops, _ := prepare(t, observe(t), allow{})
	history := make([]porcupine.Operation, len(ops))
	for i, p := range ops {
		history[i] = porcupine.Operation{ClientId: p.t.Client, Input: p.t.Request, Call: p.call, Output: p.out, Return: p.ret}
	}
	return porcupine.CheckOperationsTimeout(NewModel(), history, 30*time.Second)
}

// corrupt changes one recorded response so that the history may no longer be
// linearizable: a stale value, a shifted revision, or a swapped time.
func corrupt(t *rapid.T, tr *traces.Trace) {
	var known []int
	for i, o := range tr.Ops {
		if o.Response != nil {
			known = append(known, i)
		}
	}
	if len(known) == 0 {
		return
	}
	o := &tr.Ops[known[rapid.IntRange(0, len(known)-1).Draw(t, "victim")]]
	r := *o.Response
	switch rapid.IntRange(0, 2).Draw(t, "how") {
	case 0:
		r.Revision += rapid.SampledFrom([]int64{-1, 1}).Draw(t, "shift")
	case 1:
		if r.Range != nil && len(r.Range.KVs) > 0 {
			rr := *r.Range
			rr.KVs = append([]kv.KeyValue(nil), rr.KVs...)
			rr.KVs[0].Value = "stale"
			r.Range = &rr
		} else {
			r.Err = errors.New(kv.ErrCompacted.Error())
			r = kv.Response{Err: r.Err}
		}
	default:
		o.Call, o.Return = o.Call+50, o.Return+50
	}
	o.Response = &r
}

// SPEC §2.7 Linearizable: whenever the revision-order stage accepts a
// history, porcupine accepts it too (the stage never accepts what is not
// linearizable), and Check's verdict is always porcupine's.
func TestRevisionOrderAgreesWithPorcupine(t *testing.T) {
	var fastAccepted, illegal int
	rapid.Check(t, func(rt *rapid.T) {
		cfg := simConfig{ops: rapid.IntRange(1, 40).Draw(rt, "ops"), clients: rapid.IntRange(1, 4).Draw(rt, "clients"),
			compactEvery: rapid.IntRange(0, 10).Draw(rt, "compactEvery"), unknown: 0.2, watch: rapid.Bool().Draw(rt, "watch"),
			seed: rapid.Uint64().Draw(rt, "seed")}
		tr := simulate(cfg)
		if rapid.Bool().Draw(rt, "corrupt") {
			corrupt(rt, tr)
		}
		want := porcupineVerdict(tr)
		ops, _ := prepare(tr, observe(tr), allow{})
		_, fast := revisionOrder(ops, States{{}}, allow{})
		if fast && want != porcupine.Ok {
			rt.Fatalf("the revision order accepted a history porcupine rejects")
		}
		if fast {
			fastAccepted++
		}
		if want == porcupine.Illegal {
			illegal++
		}
		res, err := Check(tr, Options{Timeout: 30 * time.Second})
		if err != nil {
			rt.Fatal(err)
		}
		if (res.Verdict == Linearizable) != (want == porcupine.Ok) {
			rt.Fatalf("Check says %s (%s), porcupine says %v: %v", res.Verdict, res.Method, want, res.Violations)
		}
		if want == porcupine.Illegal && !hasProperty(res.Violations, spec.Linearizable) {
			rt.Fatalf("an illegal history reported without a Linearizable violation: %v", res.Violations)
		}
	})
	t.Logf("revision order accepted %d histories; porcupine rejected %d", fastAccepted, illegal)
	if fastAccepted == 0 || illegal == 0 {
		t.Fatalf("the generator must produce both accepted and illegal histories")
	}
}

func hasProperty(vs []Violation, p spec.Property) bool {
	for _, v := range vs {
		if v.Property == p {
			return true
		}
	}
	return false
}

// Valid simulated runs, with compaction, unknown outcomes and a collector
// watch, pass every property.
func TestSimulatedRunsPass(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tr := simulate(simConfig{ops: rapid.IntRange(1, 300).Draw(rt, "ops"), clients: 8, compactEvery: 25, unknown: 0.05,
			watch: true, seed: rapid.Uint64().Draw(rt, "seed")})
		res, err := Check(tr, Options{})
		if err != nil {
			rt.Fatal(err)
		}
		if res.Verdict != Linearizable || len(res.Violations) > 0 {
			rt.Fatalf("%s via %s: %v", res.Verdict, res.Method, res.Violations)
		}
		if res.History.Len() > 0 && res.Checks[spec.Reliable] == 0 {
			rt.Fatalf("the collector watch was not validated")
		}
	})
}

// A stale read (a read that misses a write that returned before it was
// called) is not linearizable; the violation points at the read, and the
// visualisation is written. SPEC §2.7; the shape of etcd#20418.
func TestNotLinearizable(t *testing.T) {
	put := kv.Request{Put: &kv.PutRequest{Key: "a", Value: "2"}}
	get := kv.Request{Range: &kv.RangeRequest{Key: "a"}}
	var s kv.State
	s, r1 := kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}})
	old := s
	s, r2 := kv.Step(s, put)
	_, stale := kv.Step(old, get)
	stale.Revision = r2.Revision // the header is current, but the value is old
	tr := &traces.Trace{Name: "stale-read.ndjson", Header: traces.Header{System: "test", UniqueValues: true}, Ops: []traces.Op{
		{Line: 2, Client: 1, Call: 0, Return: 10, Request: kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}, Response: &r1},
		{Line: 3, Client: 1, Call: 20, Return: 30, Request: put, Response: &r2},
		{Line: 4, Client: 2, Call: 40, Return: 50, Request: get, Response: &stale},
	}}
	res, err := Check(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != NotLinearizable || res.Method != "porcupine" {
		t.Fatalf("verdict %s via %s", res.Verdict, res.Method)
	}
	if got := properties(res.Violations); len(got) != 1 || got[0] != spec.Linearizable {
		t.Fatalf("violations %v", res.Violations)
	}
	if v := res.Violations[0]; v.Where != "op at line 4 (client 2)" || !strings.Contains(v.Message, `range("a")`) {
		t.Errorf("the violation does not point at the stale read: %s: %s", v.Where, v.Message)
	}
	// Check decides; drawing is a call of its own.
	var page strings.Builder
	if err := res.Visualize(&page); err != nil || !strings.Contains(page.String(), "<html") {
		t.Fatalf("no visualisation: %v", err)
	}
	dir := t.TempDir()
	path, err := res.WriteHTML(dir)
	if err != nil || path != filepath.Join(dir, "stale-read.ndjson.html") {
		t.Fatalf("WriteHTML: %q, %v", path, err)
	}
	if html, err := os.ReadFile(path); err != nil || !strings.Contains(string(html), "<html") {
		t.Fatalf("no visualisation written: %v", err)
	}
	// A linearizable history has nothing to draw.
	ok, _ := Check(&traces.Trace{Name: "ok", Ops: tr.Ops[:2]}, Options{})
	if err := ok.Visualize(&page); err != ErrNothingToDraw {
		t.Errorf("Visualize of a linearizable history: %v", err)
	}
	if path, err := ok.WriteHTML(dir); path != "" || err != nil {
		t.Errorf("WriteHTML of a linearizable history: %q, %v", path, err)
	}
}

// A write whose client never learnt the outcome is pinned by the watch that
// saw its unique value; without the watch, both outcomes are allowed.
func TestUnknownOutcome(t *testing.T) {
	put := kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}
	get := kv.Request{Range: &kv.RangeRequest{Key: "a"}}
	var s kv.State
	s, _ = kv.Step(s, put)
	_, seen := kv.Step(s, get)
	_, unseen := kv.Step(kv.State{}, get)
	for _, tc := range []struct {
		name string
		read kv.Response
	}{{"applied", seen}, {"not applied", unseen}} {
		tr := &traces.Trace{Name: tc.name, Header: traces.Header{System: "test", UniqueValues: true}, Ops: []traces.Op{
			{Client: 1, Call: 0, Return: 10, Request: put, Error: "timeout"},
			{Client: 2, Call: 20, Return: 30, Request: get, Response: &tc.read},
		}}
		res, err := Check(tr, Options{})
		if err != nil || res.Verdict != Linearizable {
			t.Errorf("%s: %v %v", tc.name, res.Verdict, err)
		}
	}
}

// Two writes of unknown outcome — a delete and a put — and one revision
// between two known ones: every key-value response allows either to have
// created it, but the watch delivered a DELETE there. The delete is pinned,
// the put cannot have created that revision, and the watch passes. (The
// shape of a run's end, where every in-flight request times out.) SPEC §2.7.
func TestUnknownOutcomesFollowWatches(t *testing.T) {
	var s kv.State
	s, r1 := kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "b", Value: "1"}})
	del := kv.Request{Delete: &kv.DeleteRequest{Key: "b"}}
	s, _ = kv.Step(s, del) // revision 3: the delete happened
	put := kv.Request{Put: &kv.PutRequest{Key: "a", Value: "never"}}
	final := kv.Request{Put: &kv.PutRequest{Key: "z", Value: "final"}}
	s, r4 := kv.Step(s, final)
	h := s.History()
	req := watch.Request{Key: "\x00", RangeEnd: "\x00", StartRevision: 1}
	w := &traces.Watch{Client: 9, ID: 1, Request: req}
	for i, r := range watch.Canonical(h, req, 1) {
		w.Responses = append(w.Responses, traces.WatchResponse{Time: int64(100 + i), Response: r})
	}
	tr := &traces.Trace{Name: "unknown", Header: traces.Header{System: "test", UniqueValues: true}, Watches: []*traces.Watch{w},
		Ops: []traces.Op{
			{Client: 1, Call: 0, Return: 10, Request: kv.Request{Put: &kv.PutRequest{Key: "b", Value: "1"}}, Response: &r1},
			{Client: 2, Call: 20, Return: 90, Request: put, Error: "context deadline exceeded"},
			{Client: 3, Call: 20, Return: 90, Request: del, Error: "context deadline exceeded"},
			{Client: 4, Call: 95, Return: 99, Request: final, Response: &r4},
		}}
	res, err := Check(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Linearizable || len(res.Violations) > 0 {
		t.Fatalf("%s via %s: %v", res.Verdict, res.Method, res.Violations)
	}
	if c, _ := res.History.Commit(3); len(c.Events) != 1 || c.Events[0].Type != kv.Delete {
		t.Fatalf("revision 3 of the history is %+v, not the delete the watch saw", c)
	}
}

// A compaction called before a read of older history but returned after it
// may take effect after the read: the revision-order stage places it at its
// return, so a real run with concurrent compactions (watchspec conform) is
// decided without porcupine's search — and still before a read that failed
// on the history it compacted. SPEC §2.7 Linearizable.
func TestRevisionOrderPlacesCompactionsLate(t *testing.T) {
	var s kv.State
	var ops []traces.Op
	do := func(client int, call, ret int64, req kv.Request) {
		var r kv.Response
		s, r = kv.Step(s, req)
		ops = append(ops, traces.Op{Client: client, Call: call, Return: ret, Request: req, Response: &r})
	}
	old := kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 2}}
	do(1, 1, 2, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}})
	do(1, 3, 4, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "2"}})
	do(3, 10, 12, old) // served: the compaction below had not happened yet
	do(2, 5, 20, kv.Request{Compact: &kv.CompactRequest{Revision: 3}})
	do(4, 14, 18, old) // failed: the compaction had happened
	do(3, 25, 26, old) // failed: the compaction had returned
	tr := &traces.Trace{Name: "late-compaction", Header: traces.Header{System: "test", UniqueValues: true}, Ops: ops}
	if got := ops[2].Response; got.Err != nil || len(got.Range.KVs) != 1 {
		t.Fatalf("the model answered the first read %+v", got)
	}
	if got := ops[4].Response; !kv.SameError(got.Err, kv.ErrCompacted) {
		t.Fatalf("the model answered the second read %+v", got)
	}
	res, err := Check(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Linearizable || res.Method != "revision order" {
		t.Errorf("verdict %s by %s, want linearizable by revision order; violations %v", res.Verdict, res.Method, res.Violations)
	}
}

// A compaction whose client never learned the outcome (the run ended while
// it was in flight) took effect when a watch is cancelled for exactly its
// revision: the watch checks must know it from its call on, or they report
// the cancel and the missing PrevKVs as violations. Found by CI in a conform
// run against the reference server. SPEC §3.11 CompactedCancel, §3.8 PrevKV.
func TestUnknownCompactionSeenByAWatch(t *testing.T) {
	var s kv.State
	var ops []traces.Op
	do := func(call int64, req kv.Request, unknown bool) {
		var r kv.Response
		s, r = kv.Step(s, req)
		o := traces.Op{Client: 1, Call: call, Return: call + 5, Request: req, Response: &r}
		if unknown {
			o.Response, o.Return, o.Error = nil, 0, "context deadline exceeded"
		}
		ops = append(ops, o)
	}
	do(10, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}, false) // 2
	do(20, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "2"}}, false) // 3
	do(30, kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, true)   // took effect, outcome unknown
	w := &traces.Watch{Client: 2, ID: 1, Time: 40, Request: watch.Request{Key: "a", StartRevision: 2, PrevKV: true}}
	w.Responses = []traces.WatchResponse{
		{Time: 41, Response: watch.Response{Revision: 3, Created: true}},
		{Time: 42, Response: watch.Response{Canceled: true, CompactRevision: 3}},
	}
	tr := &traces.Trace{Name: "unknown-compaction", Header: traces.Header{System: "test", UniqueValues: true}, Ops: ops, Watches: []*traces.Watch{w}}
	res, err := Check(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Linearizable || len(res.Violations) > 0 {
		t.Errorf("verdict %s, violations %v", res.Verdict, res.Violations)
	}
	// A cancel for a compaction nobody asked for is still a violation.
	w.Responses[1].Response.CompactRevision = 2
	if res, err := Check(tr, Options{}); err != nil || !hasProperty(res.Violations, spec.CompactedCancel) {
		t.Errorf("a cancel at a revision never compacted: %v, %v", res.Violations, err)
	}
}

// A compaction of unknown outcome creates no revision, so what watches saw
// rules nothing out about it: it may have taken effect at a revision whose
// events a watch delivered, and a read below it answered "compacted" after
// its call is explained. (The checker once ruled out every revision with
// delivered events for it, as for an unknown write, and failed §2.7 on
// etcd-3.7.3-conform-defaults with one compaction's outcome forgotten —
// mutation campaign, forget-outcomes.) SPEC §2.4, §2.7.
func TestUnknownCompactionAtAWatchedRevision(t *testing.T) {
	var s kv.State
	var ops []traces.Op
	do := func(call int64, req kv.Request, unknown bool) {
		var r kv.Response
		s, r = kv.Step(s, req)
		o := traces.Op{Client: 1, Call: call, Return: call + 5, Request: req, Response: &r}
		if unknown {
			o.Response, o.Error = nil, "context deadline exceeded"
		}
		ops = append(ops, o)
	}
	do(10, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}, false)      // 2
	do(20, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "2"}}, false)      // 3
	do(30, kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, true)        // took effect at revision 3
	do(40, kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 2}}, false) // compacted
	if !kv.SameError(ops[3].Response.Err, kv.ErrCompacted) {
		t.Fatalf("the model answered the read %+v", ops[3].Response)
	}
	w := &traces.Watch{Client: 2, ID: 1, Time: 5, Request: watch.Request{Key: "a", StartRevision: 2}}
	w.Responses = []traces.WatchResponse{
		{Time: 6, Response: watch.Response{Revision: 1, Created: true}},
		{Time: 12, Response: watch.Response{Revision: 2, Events: []kv.Event{{Type: kv.Put, KV: kv.KeyValue{Key: "a", Value: "1", CreateRevision: 2, ModRevision: 2, Version: 1}}}}},
		{Time: 22, Response: watch.Response{Revision: 3, Events: []kv.Event{{Type: kv.Put, KV: kv.KeyValue{Key: "a", Value: "2", CreateRevision: 2, ModRevision: 3, Version: 2}}}}},
	}
	tr := &traces.Trace{Name: "unknown-compaction-watched", Header: traces.Header{System: "test", UniqueValues: true}, Ops: ops, Watches: []*traces.Watch{w}}
	if res := mustCheck(t, tr, Options{}); res.Verdict != Linearizable || len(res.Violations) > 0 {
		t.Errorf("verdict %s, violations %v", res.Verdict, res.Violations)
	}
	// Without the compaction the read is still wrong.
	tr.Ops = slices.Delete(slices.Clone(ops), 2, 3)
	if res := mustCheck(t, tr, Options{}); !hasProperty(res.Violations, spec.Linearizable) {
		t.Errorf("a compacted read with no compaction: %s, %v", res.Verdict, res.Violations)
	}
}

// etcd reads a compaction's header revision after applying it, so writes
// applied meanwhile may raise it: a compaction answered with revision 5
// may have taken effect at 4, before a read that failed on the history it
// compacted. A header below the revision current when it was called is
// still wrong. SPEC §2.4 Compaction, §2.7 Linearizable.
func TestCompactionHeaderReadAfterApply(t *testing.T) {
	ok := func(rev int64, r kv.Response) *kv.Response { r.Revision = rev; return &r }
	trace := func(header int64) *traces.Trace {
		ops := []traces.Op{
			{Client: 1, Call: 1, Return: 2, Request: kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}, Response: ok(2, kv.Response{Put: &kv.PutResponse{}})},
			{Client: 1, Call: 3, Return: 4, Request: kv.Request{Put: &kv.PutRequest{Key: "a", Value: "2"}}, Response: ok(3, kv.Response{Put: &kv.PutResponse{}})},
			{Client: 2, Call: 10, Return: 100, Request: kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, Response: ok(header, kv.Response{Compact: &kv.CompactResponse{}})},
			{Client: 3, Call: 20, Return: 30, Request: kv.Request{Put: &kv.PutRequest{Key: "b", Value: "1"}}, Response: ok(4, kv.Response{Put: &kv.PutResponse{}})},
			{Client: 4, Call: 40, Return: 50, Request: kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 2}}, Response: &kv.Response{Err: kv.ErrCompacted}},
			{Client: 3, Call: 60, Return: 70, Request: kv.Request{Put: &kv.PutRequest{Key: "b", Value: "2"}}, Response: ok(5, kv.Response{Put: &kv.PutResponse{}})},
		}
		return &traces.Trace{Name: "compaction-header", Header: traces.Header{System: "test", UniqueValues: true}, Ops: ops}
	}
	res, err := Check(trace(5), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Linearizable || len(res.Violations) > 0 {
		t.Errorf("header read after later writes: %s, %v", res.Verdict, res.Violations)
	}
	res, err = Check(trace(2), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasProperty(res.Violations, spec.Linearizable) {
		t.Errorf("a header older than the compaction's call: %s, %v", res.Verdict, res.Violations)
	}
}
