package traces_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// anyBytes draws byte strings that are often not valid UTF-8.
var anyBytes = rapid.OneOf(
	rapid.SampledFrom([]string{"a", "a/1", "key with spaces", "ключ", "\x00", "\xff\xfe", "\"quoted\"\n"}),
	rapid.Map(rapid.SliceOfN(rapid.Byte(), 1, 6), func(b []byte) string { return string(b) }),
)

func drawKV(t *rapid.T) kv.KeyValue {
	return kv.KeyValue{Key: anyBytes.Draw(t, "key"), Value: rapid.OneOf(rapid.Just(""), anyBytes).Draw(t, "value"),
		CreateRevision: rapid.Int64Range(0, 9).Draw(t, "create"), ModRevision: rapid.Int64Range(0, 9).Draw(t, "mod"),
		Version: rapid.Int64Range(0, 9).Draw(t, "version")}
}

func drawKVs(t *rapid.T) []kv.KeyValue {
	return rapid.SliceOfN(rapid.Custom(drawKV), 0, 3).Draw(t, "kvs")
}

func drawKVPtr(t *rapid.T) *kv.KeyValue {
	if rapid.Bool().Draw(t, "nil") {
		return nil
	}
	k := drawKV(t)
	return &k
}

func drawOp(t *rapid.T) (kv.Op, kv.OpResponse) {
	switch rapid.IntRange(0, 2).Draw(t, "opKind") {
	case 0:
		return kv.Op{Range: &kv.RangeRequest{Key: anyBytes.Draw(t, "k"), RangeEnd: anyBytes.Draw(t, "end"), Revision: rapid.Int64Range(-1, 9).Draw(t, "rev"), Limit: rapid.Int64Range(-1, 3).Draw(t, "limit"), CountOnly: rapid.Bool().Draw(t, "co"), KeysOnly: rapid.Bool().Draw(t, "ko")}},
			kv.OpResponse{Range: &kv.RangeResponse{KVs: drawKVs(t), More: rapid.Bool().Draw(t, "more"), Count: rapid.Int64Range(0, 5).Draw(t, "count")}}
	case 1:
		return kv.Op{Put: &kv.PutRequest{Key: anyBytes.Draw(t, "k"), Value: anyBytes.Draw(t, "v"), PrevKV: rapid.Bool().Draw(t, "p")}},
			kv.OpResponse{Put: &kv.PutResponse{PrevKV: drawKVPtr(t)}}
	default:
		return kv.Op{Delete: &kv.DeleteRequest{Key: anyBytes.Draw(t, "k"), RangeEnd: anyBytes.Draw(t, "end"), PrevKV: rapid.Bool().Draw(t, "p")}},
			kv.OpResponse{Delete: &kv.DeleteResponse{Deleted: rapid.Int64Range(0, 3).Draw(t, "n"), PrevKVs: drawKVs(t)}}
	}
}

func drawTraceOp(t *rapid.T) traces.Op {
	op := traces.Op{Client: rapid.IntRange(0, 5).Draw(t, "client"), Call: rapid.Int64Range(0, 1000).Draw(t, "call")}
	var resp kv.Response
	switch rapid.IntRange(0, 2).Draw(t, "kind") {
	case 0:
		o, r := drawOp(t)
		op.Request = kv.Request{Range: o.Range, Put: o.Put, Delete: o.Delete}
		resp = kv.Response{Range: r.Range, Put: r.Put, Delete: r.Delete}
	case 1:
		txn := &kv.TxnRequest{}
		for range rapid.IntRange(0, 2).Draw(t, "ncmp") {
			c := kv.Compare{Key: anyBytes.Draw(t, "ck"), Target: kv.CompareTarget(rapid.IntRange(0, 3).Draw(t, "target")), Result: kv.CompareResult(rapid.IntRange(0, 3).Draw(t, "result"))}
			if c.Target == kv.TargetValue {
				c.Value = anyBytes.Draw(t, "cv")
			} else {
				c.Number = rapid.Int64Range(-1, 9).Draw(t, "cn")
			}
			txn.Compare = append(txn.Compare, c)
		}
		tr := &kv.TxnResponse{Succeeded: rapid.Bool().Draw(t, "ok")}
		for _, branch := range []*[]kv.Op{&txn.Success, &txn.Failure} {
			for range rapid.IntRange(0, 2).Draw(t, "nops") {
				o, r := drawOp(t)
				*branch = append(*branch, o)
				if (branch == &txn.Success) == tr.Succeeded {
					tr.Responses = append(tr.Responses, r)
				}
			}
		}
		op.Request, resp = kv.Request{Txn: txn}, kv.Response{Txn: tr}
	default:
		op.Request, resp = kv.Request{Compact: &kv.CompactRequest{Revision: rapid.Int64Range(-1, 9).Draw(t, "c")}}, kv.Response{Compact: &kv.CompactResponse{}}
	}
	resp.Revision = rapid.Int64Range(0, 9).Draw(t, "hdr")
	switch rapid.IntRange(0, 2).Draw(t, "outcome") {
	case 0:
		op.Return = op.Call + rapid.Int64Range(0, 100).Draw(t, "dur")
		op.Response = &resp
	case 1:
		op.Return = op.Call + rapid.Int64Range(0, 100).Draw(t, "dur")
		op.Response = &kv.Response{Err: errors.New(rapid.SampledFrom([]string{kv.ErrCompacted.Error(), kv.ErrFutureRev.Error()}).Draw(t, "err"))}
	default:
		op.Error = "context deadline exceeded"
		if rapid.Bool().Draw(t, "gaveUp") {
			op.Return = op.Call + 5
		}
	}
	return op
}

// drawTrace draws a trace of the given format version, with every field
// that version can say.
func drawTrace(t *rapid.T, version int) *traces.Trace {
	tr := &traces.Trace{Name: "drawn", Header: traces.Header{Format: traces.Format, Version: version, System: "test", Start: "2026-11-29T21:00:00Z", Seed: 7, UniqueValues: true,
		BaseRevision: rapid.Int64Range(0, 9).Draw(t, "base")}}
	if version >= 2 && rapid.Bool().Draw(t, "compactionKnown") {
		c := rapid.Int64Range(-1, max(tr.Header.BaseRevision, 1)).Draw(t, "baseCompact")
		tr.Header.BaseCompactRevision = &c
	}
	tr.Ops = rapid.SliceOfN(rapid.Custom(drawTraceOp), 0, 6).Draw(t, "ops")
	for i := range tr.Ops {
		tr.Ops[i].Serializable = version >= 2 && tr.Ops[i].Request.Range != nil && rapid.Bool().Draw(t, "serializable")
	}
	for i := range rapid.IntRange(0, 3).Draw(t, "nwatches") {
		w := &traces.Watch{Client: i, ID: rapid.IntRange(0, 3).Draw(t, "id"), Time: rapid.Int64Range(0, 50).Draw(t, "wt"),
			Request: watch.Request{Key: anyBytes.Draw(t, "wk"), RangeEnd: anyBytes.Draw(t, "we"), StartRevision: rapid.Int64Range(-1, 9).Draw(t, "start"),
				NoPut: rapid.Bool().Draw(t, "np"), NoDelete: rapid.Bool().Draw(t, "nd"), PrevKV: rapid.Bool().Draw(t, "pk"), ProgressNotify: rapid.Bool().Draw(t, "pn"), Fragment: rapid.Bool().Draw(t, "fr")}}
		if version >= 2 && rapid.Bool().Draw(t, "streamKnown") {
			s := rapid.IntRange(0, 2).Draw(t, "stream")
			w.Stream = &s
		}
		at := w.Time
		for range rapid.IntRange(0, 3).Draw(t, "nresp") {
			r := watch.Response{Revision: rapid.Int64Range(0, 9).Draw(t, "rev"), Created: rapid.Bool().Draw(t, "created"),
				Canceled: rapid.Bool().Draw(t, "canceled"), CompactRevision: rapid.Int64Range(0, 3).Draw(t, "cr"), CancelReason: rapid.SampledFrom([]string{"", "why"}).Draw(t, "reason")}
			for range rapid.IntRange(0, 2).Draw(t, "nev") {
				r.Events = append(r.Events, kv.Event{Type: kv.EventType(rapid.IntRange(0, 1).Draw(t, "et")), KV: drawKV(t), PrevKV: drawKVPtr(t)})
			}
			at += rapid.Int64Range(0, 9).Draw(t, "rt")
			wr := traces.WatchResponse{Time: at, Response: r}
			switch {
			case version < 2:
				// Version 1 cannot tell a revision of 0 from one not recorded.
				wr.RevisionUnknown = r.Revision == 0
			case rapid.IntRange(0, 4).Draw(t, "unknown") == 0:
				wr.RevisionUnknown, wr.Response.Revision = true, 0
				if len(r.Events) == 0 && !r.Created && !r.Canceled && r.CompactRevision == 0 {
					wr.Response.Canceled = true // a response must record something
				}
			}
			if version >= 2 && rapid.IntRange(0, 4).Draw(t, "fails") == 0 {
				wr.Error = rapid.SampledFrom([]string{"etcdserver: no leader", "context canceled"}).Draw(t, "error")
				wr.Response.Events, wr.Response.Created, wr.Response.CompactRevision, wr.Response.Canceled = nil, false, 0, true
				w.Responses = append(w.Responses, wr)
				break // an error ends the watch
			}
			w.Responses = append(w.Responses, wr)
		}
		tr.Watches = append(tr.Watches, w)
	}
	if version >= 2 {
		for range rapid.IntRange(0, 2).Draw(t, "nprogress") {
			tr.ProgressRequests = append(tr.ProgressRequests, traces.ProgressRequest{Client: rapid.IntRange(0, 3).Draw(t, "pc"),
				Stream: rapid.IntRange(0, 2).Draw(t, "ps"), Time: rapid.Int64Range(0, 50).Draw(t, "pt")})
		}
	}
	for range rapid.IntRange(0, 2).Draw(t, "nann") {
		a := traces.Annotation{Time: rapid.Int64Range(0, 9).Draw(t, "at"), Tag: "restart", Text: rapid.String().Draw(t, "text")}
		a.End = a.Time + rapid.Int64Range(0, 9).Draw(t, "ae")
		tr.Annotations = append(tr.Annotations, a)
	}
	return tr
}

// clearLines zeroes the line numbers Read fills in, for comparison.
func clearLines(t *traces.Trace) {
	for i := range t.Ops {
		t.Ops[i].Line = 0
	}
	for _, w := range t.Watches {
		w.Line = 0
		for i := range w.Responses {
			w.Responses[i].Line = 0
		}
	}
	for i := range t.Annotations {
		t.Annotations[i].Line = 0
	}
	for i := range t.ProgressRequests {
		t.ProgressRequests[i].Line = 0
	}
	if k := t.K8sInfo; k != nil {
		for i := range k.Lists {
			k.Lists[i].Line = 0
		}
		for i := range k.Watches {
			k.Watches[i].Line, k.Watches[i].EndLine = 0, 0
		}
		for i := range k.Entries {
			k.Entries[i].Line = 0
		}
		k.Cache.Line = 0
	}
}

// TestRoundTrip: any trace of either version, with any bytes in keys and
// values, reads back exactly as written, in the version it says.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := drawTrace(t, rapid.IntRange(1, traces.Version).Draw(t, "version"))
		// A watch's (client, id) must be unique: keep the first of each.
		seen := map[[2]int]bool{}
		var ws []*traces.Watch
		for _, w := range tr.Watches {
			if !seen[[2]int{w.Client, w.ID}] {
				seen[[2]int{w.Client, w.ID}] = true
				ws = append(ws, w)
			}
		}
		tr.Watches = ws
		var buf bytes.Buffer
		if err := traces.Write(&buf, tr); err != nil {
			t.Fatal(err)
		}
		got, err := traces.Read(&buf, "drawn")
		if err != nil {
			t.Fatalf("reading back: %v\n%s", err, buf.String())
		}
		clearLines(got)
		if !sameTrace(tr, got) {
			t.Fatalf("round trip changed the trace:\nwrote %+v\nread  %+v", tr, got)
		}
	})
}

// sameTrace compares traces, errors by text.
func sameTrace(a, b *traces.Trace) bool {
	if !reflect.DeepEqual(a.Header, b.Header) || len(a.Ops) != len(b.Ops) || !reflect.DeepEqual(a.Watches, b.Watches) ||
		!reflect.DeepEqual(a.Annotations, b.Annotations) || !reflect.DeepEqual(a.ProgressRequests, b.ProgressRequests) ||
		!reflect.DeepEqual(a.K8s, b.K8s) || !reflect.DeepEqual(a.K8sInfo, b.K8sInfo) {
		return false
	}
	for i := range a.Ops {
		x, y := a.Ops[i], b.Ops[i]
		if x.Client != y.Client || x.Call != y.Call || x.Return != y.Return || x.Error != y.Error || x.Serializable != y.Serializable ||
			!reflect.DeepEqual(x.Request, y.Request) || (x.Response == nil) != (y.Response == nil) {
			return false
		}
		if x.Response != nil && !kv.SameResponse(*x.Response, *y.Response) {
			return false
		}
	}
	return true
}

func TestUTF8KeysStayReadable(t *testing.T) {
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Header{System: "test"})
	if err != nil {
		t.Fatal(err)
	}
	resp := kv.Response{Revision: 2, Put: &kv.PutResponse{}}
	w.Op(traces.Op{Client: 1, Call: 1, Return: 2, Request: kv.Request{Put: &kv.PutRequest{Key: "/registry/pods/ключ", Value: "\xff\x00"}}, Response: &resp})
	w.Flush()
	out := buf.String()
	if !strings.Contains(out, `"key":"/registry/pods/ключ"`) {
		t.Errorf("a UTF-8 key is not written as a plain string:\n%s", out)
	}
	if !strings.Contains(out, `"value":{"base64":"/wA="}`) {
		t.Errorf("a non-UTF-8 value is not written as base64:\n%s", out)
	}
}

const header = `{"format":"watchspec-trace","version":1,"system":"test","start":"2026-11-29T21:00:00Z"}`

// TestMalformed: every malformed trace fails with "name:line: what is wrong".
func TestMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty", ``, "bad.ndjson:1: empty trace"},
		{"not a header", `{"type":"op"}`, `bad.ndjson:1: the header's format is ""`},
		{"future version", `{"format":"watchspec-trace","version":3,"system":"x","start":"2026-11-29T21:00:00Z"}`, "bad.ndjson:1: trace format version 3 is not supported (this watchspec reads versions 1 to 2)"},
		{"bad start", `{"format":"watchspec-trace","version":1,"system":"x","start":"yesterday"}`, `bad.ndjson:1: header: "start" must be an RFC 3339 time`},
		{"no system", `{"format":"watchspec-trace","version":1,"start":"2026-11-29T21:00:00Z"}`, `bad.ndjson:1: header: "system" must name`},
		{"not json", header + "\n{nope", "bad.ndjson:2: invalid JSON"},
		{"unknown type", header + "\n" + `{"type":"teleport"}`, `bad.ndjson:2: unknown record type "teleport"`},
		{"no type", header + "\n" + `{"client":1}`, `bad.ndjson:2: record without a "type"`},
		{"unknown field", header + "\n" + `{"type":"annotation","time":1,"tag":"x","colour":"red"}`, `bad.ndjson:2: invalid record: json: unknown field "colour"`},
		{"wrong field type", header + "\n" + `{"type":"op","client":"one"}`, `bad.ndjson:2: field "client": expected int`},
		{"two requests", header + "\n" + `{"type":"op","client":1,"call":1,"return":2,"request":{"put":{"key":"a","value":"b"},"compact":{"revision":1}},"response":{"revision":2,"put":{}}}`, "bad.ndjson:2: request must set exactly one of its operations, not 2"},
		{"return before call", header + "\n" + `{"type":"op","client":1,"call":5,"return":2,"request":{"compact":{"revision":1}},"response":{"compact":{}}}`, `bad.ndjson:2: "return" (2) is before "call" (5)`},
		{"negative call", header + "\n" + `{"type":"op","client":1,"call":-5,"request":{"compact":{"revision":1}},"error":"x"}`, `bad.ndjson:2: "call" is negative`},
		{"response of another kind", header + "\n" + `{"type":"op","client":1,"call":1,"return":2,"request":{"compact":{"revision":1}},"response":{"put":{}}}`, "bad.ndjson:2: the response to a compact carries a put result"},
		{"no outcome", header + "\n" + `{"type":"op","client":1,"call":1,"return":2,"request":{"compact":{"revision":1}}}`, `bad.ndjson:2: an op needs a "response", or an "error"`},
		{"bad compare", header + "\n" + `{"type":"op","client":1,"call":1,"error":"x","request":{"txn":{"compare":[{"key":"a","target":"colour","result":"="}]}}}`, `bad.ndjson:2: txn compare[0] target "colour" is not one of`},
		{"bad base64", header + "\n" + `{"type":"op","client":1,"call":1,"error":"x","request":{"put":{"key":{"base64":"!!"},"value":"v"}}}`, "bad.ndjson:2: invalid record"},
		{"response before watch", header + "\n" + `{"type":"watch_response","client":1,"watch":1,"time":3,"response":{"revision":1}}`, "bad.ndjson:2: response to watch 1 of client 1, which no earlier line created"},
		{"duplicate watch", header + "\n" + `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a"}}` + "\n" + `{"type":"watch","client":1,"watch":1,"time":4,"request":{"key":"a"}}`, "bad.ndjson:3: watch 1 of client 1 was already created on line 2"},
		{"bad filter", header + "\n" + `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a","filters":["NOGOOD"]}}`, `bad.ndjson:2: unknown watch filter "NOGOOD"`},
		{"bad event type", header + "\n" + `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a"}}` + "\n" + `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":2,"events":[{"type":"MOVE","kv":{"key":"a","mod_revision":2}}]}}`, `bad.ndjson:3: events[0]: type "MOVE" is neither PUT nor DELETE`},
		{"event without kv", header + "\n" + `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a"}}` + "\n" + `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":2,"events":[{"type":"PUT"}]}}`, `bad.ndjson:3: events[0] kv: missing`},
		{"progress flag lies", header + "\n" + `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a"}}` + "\n" + `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":2,"created":true,"progress":true}}`, `bad.ndjson:3: "progress" is true but the response is not a progress notification`},
		{"response before its watch in time", header + "\n" + `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a"}}` + "\n" + `{"type":"watch_response","client":1,"watch":1,"time":2,"response":{"revision":2}}`, "bad.ndjson:3: response at time 2 precedes its watch's creation at 3 (line 2)"},
		{"two values on a line", header + "\n" + `{"type":"annotation","time":1,"tag":"x"} {}`, "bad.ndjson:2: invalid JSON at byte 42: invalid character '{' after top-level value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := traces.Read(strings.NewReader(tc.body), "bad.ndjson")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// FuzzRead: no input makes Read panic; what it accepts it writes back and
// reads again unchanged.
func FuzzRead(f *testing.F) {
	f.Add([]byte(header + "\n"))
	f.Add([]byte(header + "\n" + `{"type":"op","client":1,"call":1,"return":2,"request":{"put":{"key":"a","value":{"base64":"/wA="}}},"response":{"revision":2,"put":{}}}`))
	f.Add([]byte(header + "\n" + `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a","range_end":"b","filters":["NOPUT"],"prev_kv":true}}` + "\n" +
		`{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":2,"events":[{"type":"DELETE","kv":{"key":"a","mod_revision":2},"prev_kv":{"key":"a","value":"v","mod_revision":1}}]}}`))
	f.Add([]byte(header + "\n" + `{"type":"op","client":1,"call":1,"error":"x","request":{"txn":{"compare":[{"key":"a","target":"version","result":">","number":1}],"success":[{"range":{"key":"a"}}]}}}`))
	// Version 2: streams, progress requests, unknown revisions, errors,
	// serializable reads, timed Kubernetes records with ids.
	f.Add([]byte(`{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T21:00:00Z","base_revision":4,"base_compact_revision":-1}` + "\n" +
		`{"type":"op","client":1,"call":1,"return":2,"request":{"range":{"key":"a","serializable":true}},"response":{"revision":2,"range":{"count":0}}}` + "\n" +
		`{"type":"watch","client":1,"watch":1,"stream":0,"time":3,"request":{"key":"a"}}` + "\n" +
		`{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":2,"created":true}}` + "\n" +
		`{"type":"progress_request","client":1,"stream":0,"time":5}` + "\n" +
		`{"type":"watch_response","client":1,"watch":1,"time":6,"response":{"canceled":true,"error":"etcdserver: no leader"}}`))
	f.Add([]byte(`{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T21:00:00Z"}` + "\n" +
		`{"type":"k8s_list","call":1,"return":2,"prefix":"/p/","options":{"limit":1,"continue":{"base64":"/w=="}},"before":1,"after":2,"compact_revision":-1,"result":{"resource_version":2,"items":[{"key":"/p/a","resource_version":2,"uid":2}],"continue":"/p/a"}}` + "\n" +
		`{"type":"k8s_watch","watch":9,"time":3,"prefix":"/p/","options":{"resource_version":"2","allow_watch_bookmarks":true},"before":2,"compact_revision":1}` + "\n" +
		`{"type":"k8s_watch_event","watch":9,"time":4,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":2}}}` + "\n" +
		`{"type":"informer","time":5,"entry":{"notification":{"handler":0,"type":"OnAdd","new":{"key":"/p/a","resource_version":2,"uid":2}}}}` + "\n" +
		`{"type":"k8s_watch_end","watch":9,"time":6,"after":2}` + "\n" +
		`{"type":"informer_cache","time":7,"prefix":"/p/","objects":[{"key":"/p/a","resource_version":2,"uid":2}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := traces.Read(bytes.NewReader(data), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Fatalf("error without file:line: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := traces.Write(&buf, tr); err != nil {
			t.Fatal(err)
		}
		again, err := traces.Read(&buf, "fuzz")
		if err != nil {
			t.Fatalf("a trace Read accepted does not read back after Write: %v", err)
		}
		clearLines(tr)
		clearLines(again)
		if !sameTrace(tr, again) {
			t.Fatalf("write/read changed an accepted trace")
		}
	})
}

func drawObject(t *rapid.T) k8s.Object {
	return k8s.Object{Key: anyBytes.Draw(t, "okey"), Value: anyBytes.Draw(t, "oval"), ResourceVersion: rapid.Int64Range(1, 9).Draw(t, "orv"), UID: rapid.Int64Range(0, 9).Draw(t, "uid")}
}

func drawObjectPtr(t *rapid.T) *k8s.Object {
	o := drawObject(t)
	return &o
}

// drawRun draws an informer run whose entries are in a writable order;
// with utf8, its continue keys are UTF-8 (as version 1 needs).
func drawRun(t *rapid.T, utf8 bool) *k8s.Run {
	run := &k8s.Run{Prefix: "/registry/pods/", Cache: rapid.SliceOfN(rapid.Custom(drawObject), 0, 3).Draw(t, "cache")}
	for i := range rapid.IntRange(0, 6).Draw(t, "entries") {
		var e k8s.Entry
		switch rapid.IntRange(0, 8).Draw(t, "kind") {
		case 0:
			e.Start = &k8s.StartEntry{Revision: rapid.Int64Range(1, 9).Draw(t, "start")}
		case 1:
			h := rapid.IntRange(0, 3).Draw(t, "h")
			e.HandlerAdded = &h
		case 2:
			n := k8s.Notification{Handler: rapid.IntRange(0, 3).Draw(t, "nh"), Type: rapid.SampledFrom([]k8s.NotificationType{k8s.OnAdd, k8s.OnUpdate, k8s.OnDelete}).Draw(t, "nt"),
				InInitialList: rapid.Bool().Draw(t, "init"), Tombstone: rapid.Bool().Draw(t, "tomb")}
			if n.Type != k8s.OnDelete || rapid.Bool().Draw(t, "newOnDelete") {
				n.New = drawObjectPtr(t)
			}
			if n.Type == k8s.OnDelete && !n.Tombstone || rapid.Bool().Draw(t, "old") {
				n.Old = drawObjectPtr(t)
			}
			e.Notification = &n
		case 3:
			h := rapid.IntRange(-1, 3).Draw(t, "synced")
			e.HasSynced = &h
		case 4:
			rv := rapid.Int64Range(0, 9).Draw(t, "rv")
			e.SyncedRV = &rv
		case 5:
			e.Resync = true
		case 6:
			e.Quiesced = true
		case 7:
			c := k8s.ListCall{Prefix: "/registry/pods/", Before: 2, After: 3, CompactRevision: rapid.Int64Range(-1, 2).Draw(t, "compacted"), Options: k8s.ListOptions{ResourceVersion: rapid.SampledFrom([]string{"", "0", "5"}).Draw(t, "lrv"), Limit: rapid.Int64Range(0, 2).Draw(t, "limit")}}
			if !utf8 {
				c.Options.Continue = rapid.OneOf(rapid.Just(""), anyBytes).Draw(t, "continue")
			}
			if rapid.Bool().Draw(t, "gone") {
				c.Result.Status = &k8s.Status{Code: 410, Reason: "Expired", Message: "too old"}
			} else {
				c.Result = k8s.ListResult{ResourceVersion: 3, Items: rapid.SliceOfN(rapid.Custom(drawObject), 0, 2).Draw(t, "items"), Continue: rapid.SampledFrom([]string{"", "tok"}).Draw(t, "cont")}
				if !utf8 {
					c.Result.Continue = rapid.OneOf(rapid.Just(""), anyBytes).Draw(t, "resultContinue")
					c.Result.ContinueAfter = rapid.OneOf(rapid.Just(""), anyBytes).Draw(t, "continueAfter")
				}
			}
			if len(run.Lists) > 0 && rapid.Bool().Draw(t, "continuation") {
				first := run.Lists[0].Result
				c.First = &first
			}
			run.Lists = append(run.Lists, c)
			idx := len(run.Lists) - 1
			e.List = &idx
		default:
			if len(run.Watches) == 0 || rapid.Bool().Draw(t, "newWatch") {
				yes := rapid.Bool().Draw(t, "sie")
				run.Watches = append(run.Watches, k8s.WatchCall{Prefix: "/registry/pods/", Before: 2, After: int64(i % 2 * 7),
					Options: k8s.WatchOptions{ResourceVersion: "0", SendInitialEvents: &yes, AllowWatchBookmarks: true}})
			}
			// Any open watch gets the event: a watch made later may deliver
			// before one made earlier, which may deliver nothing.
			w := rapid.IntRange(0, len(run.Watches)-1).Draw(t, "watch")
			ev := k8s.WatchEvent{Type: rapid.SampledFrom([]k8s.EventType{k8s.Added, k8s.Modified, k8s.Deleted, k8s.Bookmark}).Draw(t, "et"), Object: drawObject(t)}
			if ev.Type == k8s.Bookmark {
				ev.Object = k8s.Object{ResourceVersion: ev.Object.ResourceVersion}
				ev.InitialEventsEnd = rapid.Bool().Draw(t, "end")
			}
			run.Watches[w].Events = append(run.Watches[w].Events, ev)
			e.WatchEvent = &k8s.WatchEventEntry{Watch: w, Event: ev}
		}
		run.Entries = append(run.Entries, e)
	}
	return run
}

// normalize makes empty slices nil, as reading gives them.
func normalize(run *k8s.Run) {
	if len(run.Cache) == 0 {
		run.Cache = nil
	}
	for i := range run.Lists {
		if len(run.Lists[i].Result.Items) == 0 {
			run.Lists[i].Result.Items = nil
		}
		if f := run.Lists[i].First; f != nil && len(f.Items) == 0 {
			f.Items = nil
		}
	}
}

// drawK8sInfo draws the times and ids of run's records, in an order the
// reader accepts: the log's entries in time order, each watch made before
// its events and ended after them, the cache read last.
func drawK8sInfo(t *rapid.T, run *k8s.Run) *traces.K8sInfo {
	info := &traces.K8sInfo{Lists: make([]traces.K8sListInfo, len(run.Lists)), Watches: make([]traces.K8sWatchInfo, len(run.Watches)),
		Entries: make([]traces.K8sEntryInfo, len(run.Entries))}
	ids := rapid.SliceOfNDistinct(rapid.IntRange(-3, 99), len(run.Watches), len(run.Watches), rapid.ID[int]).Draw(t, "ids")
	first, last := make([]int64, len(run.Watches)), make([]int64, len(run.Watches))
	for i := range first {
		first[i] = -1
	}
	var clock int64
	for i, e := range run.Entries {
		clock += rapid.Int64Range(0, 3).Draw(t, "tick")
		info.Entries[i].Time = clock
		switch {
		case e.List != nil:
			info.Lists[*e.List] = traces.K8sListInfo{Call: clock - rapid.Int64Range(0, clock).Draw(t, "listTook"), Return: clock}
		case e.WatchEvent != nil:
			w := e.WatchEvent.Watch
			if first[w] < 0 {
				first[w] = clock
			}
			last[w] = clock
		}
	}
	for i := range run.Watches {
		info.Watches[i].ID = ids[i]
		if first[i] < 0 {
			info.Watches[i].Time = rapid.Int64Range(0, clock+5).Draw(t, "watchAt")
			last[i] = info.Watches[i].Time
		} else {
			info.Watches[i].Time = first[i] - rapid.Int64Range(0, first[i]).Draw(t, "watchAt")
		}
		if run.Watches[i].After != 0 { // else no k8s_watch_end is written
			info.Watches[i].End = last[i] + rapid.Int64Range(0, 3).Draw(t, "endAfter")
		}
	}
	info.Cache.Time = clock + rapid.Int64Range(0, 3).Draw(t, "cacheAfter")
	return info
}

// TestK8sRoundTrip: an informer run reads back exactly as written, with
// the times and watch ids of its records (version 2), or untimed with its
// watches numbered by position (version 1: a run without K8sInfo).
func TestK8sRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		timed := rapid.Bool().Draw(t, "timed")
		tr := &traces.Trace{Name: "k8s", Header: traces.Header{Format: traces.Format, System: "test", Start: "2026-11-29T21:00:00Z"},
			K8s: drawRun(t, !timed)}
		if timed {
			tr.K8sInfo = drawK8sInfo(t, tr.K8s)
		}
		var buf bytes.Buffer
		if err := traces.Write(&buf, tr); err != nil {
			t.Fatal(err)
		}
		got, err := traces.Read(&buf, "k8s")
		if err != nil {
			t.Fatalf("reading back: %v\n%s", err, buf.String())
		}
		normalize(tr.K8s)
		if !reflect.DeepEqual(tr.K8s, got.K8s) {
			t.Fatalf("round trip changed the run:\nwrote %+v\nread  %+v\n%s", tr.K8s, got.K8s, buf.String())
		}
		if want := map[bool]int{true: 2, false: 1}[timed]; got.Header.Version != want {
			t.Fatalf("written as version %d, want %d", got.Header.Version, want)
		}
		clearLines(got)
		if !timed {
			if !got.K8sInfo.Untimed {
				t.Fatal("a version 1 run reads as timed")
			}
			for i, w := range got.K8sInfo.Watches {
				if w.ID != i {
					t.Fatalf("version 1 watch %d reads with id %d", i, w.ID)
				}
			}
			return
		}
		for _, l := range []any{&tr.K8sInfo.Lists, &tr.K8sInfo.Watches, &tr.K8sInfo.Entries} {
			if v := reflect.ValueOf(l).Elem(); v.Len() == 0 {
				v.SetZero() // reading gives nil
			}
		}
		if !reflect.DeepEqual(tr.K8sInfo, got.K8sInfo) {
			t.Fatalf("round trip changed the times or ids:\nwrote %+v\nread  %+v\n%s", tr.K8sInfo, got.K8sInfo, buf.String())
		}
	})
}

// TestK8sWatchesWrittenInOrder: a watch made later may deliver first, and
// one made earlier may deliver nothing; the writer still writes k8s_watch
// records in the order of the run's watches, which is how the reader
// numbers them (found by a recorded apiserver cacher run, whose trace could
// not be read back). In version 2 the records carry the recorder's ids.
func TestK8sWatchesWrittenInOrder(t *testing.T) {
	w := func() k8s.WatchCall {
		return k8s.WatchCall{Prefix: "/registry/pods/", Before: 2, After: 3, Options: k8s.WatchOptions{ResourceVersion: "2"}}
	}
	run := &k8s.Run{Watches: []k8s.WatchCall{w(), w(), w()}}
	info := &traces.K8sInfo{Watches: []traces.K8sWatchInfo{{ID: 70, Time: 1, End: 9}, {ID: 3, Time: 2, End: 9}, {ID: 50, Time: 3, End: 9}}}
	for n, i := range []int{2, 0, 2} {
		ev := k8s.WatchEvent{Type: k8s.Added, Object: k8s.Object{Key: "/registry/pods/a", Value: fmt.Sprint(i), ResourceVersion: 3, UID: 1}}
		run.Watches[i].Events = append(run.Watches[i].Events, ev)
		run.Entries = append(run.Entries, k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: i, Event: ev}})
		info.Entries = append(info.Entries, traces.K8sEntryInfo{Time: int64(4 + n)})
	}
	for _, info := range []*traces.K8sInfo{nil, info} {
		tr := &traces.Trace{Name: "order", Header: traces.Header{Format: traces.Format, System: "test", Start: "2026-11-30T00:00:00Z"}, K8s: run, K8sInfo: info}
		var buf bytes.Buffer
		if err := traces.Write(&buf, tr); err != nil {
			t.Fatal(err)
		}
		got, err := traces.Read(bytes.NewReader(buf.Bytes()), "order")
		if err != nil {
			t.Fatalf("reading back: %v\n%s", err, buf.String())
		}
		if !reflect.DeepEqual(got.K8s.Watches, run.Watches) {
			t.Errorf("round trip changed the watches:\nwrote %+v\nread  %+v", run.Watches, got.K8s.Watches)
		}
		if info != nil {
			for i, w := range got.K8sInfo.Watches {
				if w.ID != info.Watches[i].ID {
					t.Errorf("watch %d reads with id %d, written %d", i, w.ID, info.Watches[i].ID)
				}
			}
		}
	}
}

// TestWriteFile: a trace written to a file reads back with ReadFile, plain
// or gzip-compressed by its ".gz" name.
func TestWriteFile(t *testing.T) {
	tr, err := traces.ReadFile("corpus/stale-read.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t.ndjson", "t.ndjson.gz"} {
		path := filepath.Join(t.TempDir(), name)
		if err := traces.WriteFile(path, tr); err != nil {
			t.Fatal(err)
		}
		got, err := traces.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got.Ops, tr.Ops) || got.Header != tr.Header {
			t.Errorf("%s: the trace changed on its way through the file", name)
		}
		b, _ := os.ReadFile(path)
		if gz := len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b; gz != strings.HasSuffix(name, ".gz") {
			t.Errorf("%s: compressed %v", name, gz)
		}
	}
	if err := traces.WriteFile(filepath.Join(t.TempDir(), "no", "such", "dir.ndjson"), tr); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// The fragment flag of a watch request survives a write and a read, and
// a request without it writes no field (traces made before it read and
// write the same). SPEC §6: responses are recorded joined, so the flag
// only says what was asked.
func TestWatchRequestFragmentRoundTrip(t *testing.T) {
	never := int64(-1)
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Header{System: "etcd", SystemVersion: "3.7.3", Start: "2026-12-02T12:00:00Z", BaseCompactRevision: &never})
	if err != nil {
		t.Fatal(err)
	}
	w.WatchStream(2, 0, 0, 50, watch.Request{Key: "a", Fragment: true})
	w.WatchStream(2, 1, 0, 60, watch.Request{Key: "b"})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), `"fragment":true`); n != 1 {
		t.Fatalf("the trace holds %d fragment fields, want 1:\n%s", n, buf.String())
	}
	tr, err := traces.Read(bytes.NewReader(buf.Bytes()), "fragment.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Watches) != 2 || !tr.Watches[0].Request.Fragment || tr.Watches[1].Request.Fragment {
		t.Fatalf("read back %+v, want the first watch with Fragment and the second without", tr.Watches)
	}
}
