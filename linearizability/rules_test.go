package linearizability

import (
	"slices"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

func mustCheck(t *testing.T, tr *traces.Trace, opts Options) *Result {
	t.Helper()
	res, err := Check(tr, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ptr[T any](v T) *T { return &v }

// SPEC §2.8 SerializableRead: a serializable range is not linearized — a
// stale one passes where a linearizable one fails — but it must answer the
// state at its header revision, and that revision must have been committed
// by its return.
func TestSerializableReads(t *testing.T) {
	build := func(serializable bool, edit func(*kv.Response)) *traces.Trace {
		b := newTB("serializable")
		b.put("a", "1") // 2
		b.put("a", "2") // 3
		var s kv.State
		s, _ = kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}})
		_, stale := kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "a"}}) // a member still at revision 2
		if edit != nil {
			edit(&stale)
		}
		call := b.tick()
		b.tr.Ops = append(b.tr.Ops, traces.Op{Client: 2, Call: call, Return: b.tick(), Request: kv.Request{Range: &kv.RangeRequest{Key: "a"}},
			Serializable: serializable, Response: &stale})
		return b.tr
	}
	if res := mustCheck(t, build(true, nil), Options{}); len(res.Violations) > 0 || res.Checks[spec.SerializableRead] != 1 {
		t.Errorf("a stale serializable read: %v (checked %d)", res.Violations, res.Checks[spec.SerializableRead])
	}
	if res := mustCheck(t, build(false, nil), Options{}); !hasProperty(res.Violations, spec.Linearizable) {
		t.Errorf("the same read, linearizable: %v", res.Violations)
	}
	for name, edit := range map[string]func(*kv.Response){
		"another revision's value": func(r *kv.Response) { r.Range.KVs[0].Value = "2" },
		"a header never committed": func(r *kv.Response) { r.Revision = 7 },
		"a key that did not exist": func(r *kv.Response) {
			r.Range.KVs = append(r.Range.KVs, kv.KeyValue{Key: "b", Value: "x"})
			r.Range.Count = 2
		},
	} {
		res := mustCheck(t, build(true, edit), Options{})
		if got := properties(res.Violations); !slices.Equal(got, []spec.Property{spec.SerializableRead}) {
			t.Errorf("%s: %v", name, res.Violations)
		}
	}
	// ErrCompacted needs a compaction above the revision read.
	b := newTB("serializable-compacted")
	b.put("a", "1")
	b.put("a", "2")
	compacted := &kv.Response{Err: kv.ErrCompacted}
	call := b.tick()
	b.tr.Ops = append(b.tr.Ops, traces.Op{Client: 2, Call: call, Return: b.tick(), Request: kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 2}}, Serializable: true, Response: compacted})
	if res := mustCheck(t, b.tr, Options{}); !hasProperty(res.Violations, spec.SerializableRead) {
		t.Errorf("ErrCompacted without a compaction: %v", res.Violations)
	}
	b.op(3, kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, false, nil)
	b.tr.Ops[2], b.tr.Ops[3] = b.tr.Ops[3], b.tr.Ops[2]
	b.tr.Ops[3].Call, b.tr.Ops[3].Return = b.tick(), b.tick()
	if res := mustCheck(t, b.tr, Options{}); len(res.Violations) > 0 {
		t.Errorf("ErrCompacted after a compaction at 3: %v", res.Violations)
	}
}

// SPEC §2.4: a store compacted before the run. Reads and watches below the
// base are judged by the compaction in force at the start: exactly when the
// trace records it, and as leniently as unknown requires when it does not.
// Regression for issue 11: conform --endpoints against a compacted store
// failed Linearizable and CompactedCancel.
func TestStoreCompactedBeforeTheRun(t *testing.T) {
	build := func(base *int64, cancelAt int64, readAt int64, readErr error) *traces.Trace {
		tr := &traces.Trace{Name: "reused", Header: traces.Header{Version: traces.Version, System: "test", UniqueValues: true, BaseRevision: 10, BaseCompactRevision: base}}
		s := kv.Start(10)
		s, put := kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}) // 11
		read := &kv.Response{Err: readErr}
		if readErr == nil {
			read = &kv.Response{Revision: 11, Range: &kv.RangeResponse{}}
		}
		tr.Ops = []traces.Op{
			{Client: 1, Call: 1, Return: 2, Request: kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}, Response: &put},
			{Client: 2, Call: 3, Return: 4, Request: kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: readAt}}, Response: read},
		}
		w := &traces.Watch{Client: 3, ID: 1, Stream: ptr(0), Time: 5, Request: watch.Request{Key: "a", StartRevision: 3}}
		w.Responses = []traces.WatchResponse{{Time: 6, Response: watch.Response{Revision: 11, Created: true}}, {Time: 7, Response: watch.Response{Canceled: true, CompactRevision: cancelAt}}}
		tr.Watches = []*traces.Watch{w}
		return tr
	}
	for _, tc := range []struct {
		name     string
		base     *int64
		cancelAt int64
		readAt   int64
		readErr  error
		want     []spec.Property
	}{
		{"recorded: a read below it fails, a watch below it is cancelled at it", ptr(int64(7)), 7, 5, kv.ErrCompacted, nil},
		{"recorded: reading at it succeeds", ptr(int64(7)), 7, 7, nil, nil},
		{"recorded: a read below it cannot succeed", ptr(int64(7)), 7, 5, nil, []spec.Property{spec.Linearizable}},
		{"recorded: a cancel at another revision", ptr(int64(7)), 6, 5, kv.ErrCompacted, []spec.Property{spec.CompactedCancel}},
		{"recorded never compacted: a compacted read fails", ptr(int64(-1)), 7, 5, kv.ErrCompacted, []spec.Property{spec.Linearizable}},
		{"not recorded: any compaction up to the base", nil, 7, 5, kv.ErrCompacted, nil},
		{"not recorded: a lower one", nil, 4, 5, kv.ErrCompacted, nil},
		{"not recorded: a read at 8 succeeded, so it is at most 8", nil, 9, 8, nil, []spec.Property{spec.CompactedCancel}},
	} {
		res := mustCheck(t, build(tc.base, tc.cancelAt, tc.readAt, tc.readErr), Options{})
		if got := properties(res.Violations); !sameSet(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, res.Violations, tc.want)
		}
	}
}

// A write of unknown outcome that only a Kubernetes watch event (or list)
// showed is pinned there, as etcd watch events pin writes: on the recorded
// client-go informer run, forgetting the outcome of any write whose value
// the informer's ListWatch delivered changes no verdict. Regression for
// issue 19 (it gave FAIL Reliable, InformerSubsequence, InformerConverges).
// SPEC §2.7.
func TestUnknownWritesFollowInformerEvents(t *testing.T) {
	for _, file := range []string{"informer-client-go-0.37.2.ndjson", "informer-watchspec-reference.ndjson"} {
		tr, err := traces.ReadFile("../traces/corpus/" + file)
		if err != nil {
			t.Fatal(err)
		}
		shown := map[[2]string]bool{}
		for _, en := range tr.K8s.Entries {
			if en.WatchEvent != nil {
				o := en.WatchEvent.Event.Object
				shown[[2]string{o.Key, o.Value}] = true
			}
		}
		forgotten := 0
		for i := range tr.Ops {
			o := &tr.Ops[i]
			if p := o.Request.Put; p != nil && o.Response != nil && shown[[2]string{p.Key, p.Value}] {
				c := *tr
				c.Ops = slices.Clone(tr.Ops)
				c.Ops[i].Response, c.Ops[i].Error = nil, "context deadline exceeded"
				forgotten++
				if res := mustCheck(t, &c, Options{}); res.Verdict != Linearizable || len(res.Violations) > 0 {
					t.Errorf("%s with the outcome of line %d forgotten: %s, %v", file, o.Line, res.Verdict, res.Violations)
				}
			}
		}
		if forgotten == 0 {
			t.Errorf("%s: no write shown by a Kubernetes watch event", file)
		}
	}
}

// A PUT event carrying the key's value from another revision is one fault:
// Reliable, not also WriteRevision against the put that wrote that value
// (issue 19). SPEC §2.6, §3.3.
func TestForgedEventValueHasOneName(t *testing.T) {
	b := newTB("forged")
	b.put("a", "1")
	b.put("a", "2")
	b.put("b", "1")
	b.collector(false, func(e *kv.Event) {
		if e.KV.Key == "a" && e.KV.ModRevision == 3 {
			e.KV.Value = "1" // the value of revision 2
		}
	})
	res := mustCheck(t, b.tr, Options{})
	if got := properties(res.Violations); !slices.Equal(got, []spec.Property{spec.Reliable}) {
		t.Errorf("FAIL %v, want Reliable only: %v", got, res.Violations)
	}
}

// A compaction of unknown outcome whose cancel was never delivered took
// effect when a watch that asked for PrevKV got an event without it, whose
// previous state only that compaction removed; the missing PrevKV is not
// a violation (issue 19). Unless a read below it succeeded after that
// event: then it had not taken effect, and the PrevKV is missing. SPEC
// §3.8, §6.
func TestUnknownCompactionShownByMissingPrevKV(t *testing.T) {
	build := func(readAfter bool) *traces.Trace {
		b := newTB("unknown-compaction-prevkv")
		b.put("a", "1") // 2
		b.put("a", "2") // 3
		b.put("a", "3") // 4
		s := b.s
		call := b.tick()
		b.tr.Ops = append(b.tr.Ops, traces.Op{Client: 3, Call: call, Return: call + 1, Request: kv.Request{Compact: &kv.CompactRequest{Revision: 4}}, Error: "context deadline exceeded"})
		req := watch.Request{Key: "a", StartRevision: 4, PrevKV: true}
		w := &traces.Watch{Client: 9, ID: 1, Stream: ptr(0), Time: b.tick(), Request: req}
		ev := kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: "a", Value: "3", CreateRevision: 2, ModRevision: 4, Version: 3}} // no PrevKV: revision 3 is below the compaction
		w.Responses = []traces.WatchResponse{{Time: b.tick(), Response: watch.Response{Revision: 4, Created: true}}, {Time: b.tick(), Response: watch.Response{Revision: 4, Events: []kv.Event{ev}}}}
		b.tr.Watches = append(b.tr.Watches, w)
		if readAfter {
			_, r := kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 3}})
			c := b.tick()
			b.tr.Ops = append(b.tr.Ops, traces.Op{Client: 4, Call: c, Return: b.tick(), Request: kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 3}}, Response: &r})
		}
		return b.tr
	}
	if res := mustCheck(t, build(false), Options{}); len(res.Violations) > 0 {
		t.Errorf("the missing PrevKV shows the compaction: %v", res.Violations)
	}
	if res := mustCheck(t, build(true), Options{}); !hasProperty(res.Violations, spec.PrevKV) {
		t.Errorf("a read below the compaction succeeded afterwards: %v", res.Violations)
	}
}

// SPEC §3.6: which progress notifications bind a watch follows from the
// trace's streams (format 2). A progress request answered before a watch
// sharing the stream was registered reaches it with a revision it has not
// caught up to: alone on the stream it binds (and a stale one at or below
// the created header does not), on a shared stream with progress requests
// none binds, and without requests every one does.
func TestProgressBindingFollowsStreams(t *testing.T) {
	build := func(shared, requested bool) *traces.Trace {
		b := newTB("streams")
		b.put("a", "1") // 2
		b.put("a", "2") // 3
		b.put("a", "3") // 4
		catchUp := &traces.Watch{Client: 9, ID: 1, Stream: ptr(0), Time: b.tick(), Request: watch.Request{Key: "a", StartRevision: 2}}
		catchUp.Responses = append(catchUp.Responses, traces.WatchResponse{Time: b.tick(), Response: watch.Response{Revision: 4, Created: true}})
		if shared {
			other := &traces.Watch{Client: 9, ID: 2, Stream: ptr(0), Time: 1, Request: watch.Request{Key: "z"}}
			other.Responses = []traces.WatchResponse{{Time: 2, Response: watch.Response{Revision: 1, Created: true}}}
			b.tr.Watches = append(b.tr.Watches, other)
		}
		if requested {
			b.tr.ProgressRequests = append(b.tr.ProgressRequests, traces.ProgressRequest{Client: 9, Stream: 0, Time: catchUp.Time})
		}
		// The answer, computed before the watch was registered, at 4: the
		// watch has delivered nothing of 2..4.
		catchUp.Responses = append(catchUp.Responses, traces.WatchResponse{Time: b.tick(), Response: watch.Response{Revision: 4}})
		b.tr.Watches = append(b.tr.Watches, catchUp)
		return b.tr
	}
	for _, tc := range []struct {
		shared, requested bool
		binds             bool
	}{{false, false, true}, {true, false, true}, {false, true, false}, {true, true, false}} {
		res := mustCheck(t, build(tc.shared, tc.requested), Options{})
		if got := hasProperty(res.Violations, spec.Bookmarkable); got != tc.binds {
			t.Errorf("shared %v, requested %v: Bookmarkable %v, want %v: %v", tc.shared, tc.requested, got, tc.binds, res.Violations)
		}
	}
	// A notification beyond the head binds nothing yet is still wrong.
	tr := build(true, true)
	tr.Watches[1].Responses[1].Response.Revision = 9
	if res := mustCheck(t, tr, Options{}); !hasProperty(res.Violations, spec.Bookmarkable) {
		t.Errorf("a notification beyond the head: %v", res.Violations)
	}
}

// SPEC §1 from(w): against one server, a watch from revision 0 starts no
// lower than what was answered before it was requested; against a cluster
// (the default) nothing bounds it from below.
func TestSingleServerBoundsAWatchFromNow(t *testing.T) {
	b := newTB("from-now")
	b.put("a", "1") // 2
	b.put("a", "2") // 3
	w := &traces.Watch{Client: 9, ID: 1, Stream: ptr(0), Time: b.tick(), Request: watch.Request{Key: "a"}}
	h := b.s.History()
	c2, _ := h.Commit(2)
	w.Responses = []traces.WatchResponse{
		{Time: b.tick(), Response: watch.Response{Revision: 3, Created: true}},
		{Time: b.tick(), Response: watch.Response{Revision: 3, Events: c2.Events}}, // committed and answered before the watch
	}
	w.Responses[1].Response.Events[0].PrevKV = nil
	b.tr.Watches = append(b.tr.Watches, w)
	if res := mustCheck(t, b.tr, Options{}); hasProperty(res.Violations, spec.StartRevision) {
		t.Errorf("a cluster's member may lag: %v", res.Violations)
	}
	res := mustCheck(t, b.tr, Options{SingleServer: true})
	if !hasProperty(res.Violations, spec.StartRevision) {
		t.Errorf("one server: %v", res.Violations)
	}
	for _, v := range res.Violations {
		if v.Property == spec.StartRevision && !strings.Contains(v.Message, "cannot start below revision 3") {
			t.Errorf("message: %s", v.Message)
		}
	}
}
