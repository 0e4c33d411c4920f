package traces_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

const header2 = `{"format":"watchspec-trace","version":2,"system":"test","start":"2026-11-29T21:00:00Z"}`

// lines joins a header and records into a trace.
func lines(header string, records ...string) string {
	return header + "\n" + strings.Join(records, "\n") + "\n"
}

const (
	watch1    = `{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a"}}`
	k8sWatch7 = `{"type":"k8s_watch","watch":7,"time":5,"prefix":"/p/","options":{},"before":2}`
)

// TestMalformedV2: every way a version 2 trace can be malformed fails with
// "name:line: what is wrong".
func TestMalformedV2(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		// Header.
		{"base compaction below -1", `{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T21:00:00Z","base_compact_revision":-2}`,
			`bad.ndjson:1: header: "base_compact_revision" is -2: −1 (never compacted) or a compaction revision, or leave it out when not known`},
		{"base compaction above base revision", `{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T21:00:00Z","base_revision":5,"base_compact_revision":6}`,
			`bad.ndjson:1: header: "base_compact_revision" 6 is above "base_revision" 5: a store is never compacted beyond its revision`},
		{"negative base revision", `{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T21:00:00Z","base_revision":-5}`,
			`bad.ndjson:1: header "base_revision" is negative (-5)`},
		// Ops.
		{"serializable in a txn", lines(header2, `{"type":"op","client":1,"call":1,"error":"x","request":{"txn":{"success":[{"range":{"key":"a","serializable":true}}]}}}`),
			`bad.ndjson:2: invalid record: json: unknown field "serializable"`},
		{"serializable not a bool", lines(header2, `{"type":"op","client":1,"call":1,"error":"x","request":{"range":{"key":"a","serializable":"yes"}}}`),
			`bad.ndjson:2: field "request.range.serializable": expected bool`},
		// Watches.
		{"stream not an integer", lines(header2, `{"type":"watch","client":1,"watch":1,"stream":"s","time":3,"request":{"key":"a"}}`),
			`bad.ndjson:2: field "stream": expected int`},
		{"responses out of order", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":9,"response":{"revision":1,"created":true}}`,
			`{"type":"watch_response","client":1,"watch":1,"time":8,"response":{"revision":2,"progress":true}}`),
			"bad.ndjson:4: response at time 8 precedes the watch's previous response at 9 (line 3): responses are recorded in the order received"},
		{"progress without revision", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"progress":true}}`),
			`bad.ndjson:3: a progress notification must record its header "revision"`},
		{"response records nothing", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{}}`),
			`bad.ndjson:3: the response records nothing: no "revision", no events, not created or canceled, no "error"`},
		{"error with events", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":2,"events":[{"type":"PUT","kv":{"key":"a","mod_revision":2}}],"error":"x"}}`),
			`bad.ndjson:3: a response with an "error" ended its watch: it carries no events`},
		{"error on created", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":2,"created":true,"error":"x"}}`),
			`bad.ndjson:3: a response with an "error" ended its watch: it is not the created response`},
		{"error for a compaction", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":0,"canceled":true,"compact_revision":3,"error":"etcdserver: mvcc: required revision has been compacted"}}`),
			`bad.ndjson:3: a compaction cancel is recorded by "compact_revision": "error" is for other errors`},
		{"response after the error", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"canceled":true,"error":"etcdserver: no leader"}}`,
			`{"type":"watch_response","client":1,"watch":1,"time":5,"response":{"revision":3,"progress":true}}`),
			"bad.ndjson:4: response to watch 1 of client 1 after the error that ended it (line 3)"},
		// Progress requests.
		{"progress request without stream", lines(header2, `{"type":"progress_request","client":1,"time":4}`), `bad.ndjson:2: missing "stream"`},
		{"progress request without time", lines(header2, `{"type":"progress_request","client":1,"stream":0}`), `bad.ndjson:2: missing "time"`},
		{"progress request at a negative time", lines(header2, `{"type":"progress_request","client":1,"stream":0,"time":-1}`), `bad.ndjson:2: "time" is negative (-1)`},
		{"progress request with a watch", lines(header2, `{"type":"progress_request","client":1,"stream":0,"watch":3,"time":1}`), `bad.ndjson:2: invalid record: json: unknown field "watch"`},
		// Kubernetes records.
		{"k8s list without times", lines(header2, `{"type":"k8s_list","prefix":"/p/","options":{},"before":1,"after":1,"result":{"resource_version":1}}`),
			`bad.ndjson:2: a k8s_list needs "call" and "return"`},
		{"k8s list returns before its call", lines(header2, `{"type":"k8s_list","call":5,"return":4,"prefix":"/p/","options":{},"before":1,"after":1,"result":{"resource_version":1}}`),
			`bad.ndjson:2: "return" (4) is before "call" (5)`},
		{"k8s list compact revision 0", lines(header2, `{"type":"k8s_list","call":1,"return":4,"prefix":"/p/","options":{},"before":1,"after":1,"compact_revision":0,"result":{"resource_version":1}}`),
			`bad.ndjson:2: "compact_revision" 0 names no compaction: write −1 for a store never compacted, or leave it out when not known`},
		{"k8s watch compact revision below -1", lines(header2, `{"type":"k8s_watch","watch":7,"time":5,"prefix":"/p/","options":{},"before":2,"compact_revision":-3}`),
			`bad.ndjson:2: "compact_revision" is -3`},
		{"k8s watch without time", lines(header2, `{"type":"k8s_watch","watch":7,"prefix":"/p/","options":{},"before":2}`),
			`bad.ndjson:2: a k8s_watch needs "watch" and "time"`},
		{"k8s watch id twice", lines(header2, k8sWatch7, k8sWatch7), "bad.ndjson:3: k8s watch 7 was already created on line 2"},
		{"k8s event of no watch", lines(header2, k8sWatch7, `{"type":"k8s_watch_event","watch":0,"time":6,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":3}}}`),
			"bad.ndjson:3: k8s watch 0, which no earlier k8s_watch created"},
		{"k8s event without time", lines(header2, k8sWatch7, `{"type":"k8s_watch_event","watch":7,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":3}}}`),
			`bad.ndjson:3: missing "time": every Kubernetes record is timed in version 2`},
		{"k8s event before its watch", lines(header2, k8sWatch7, `{"type":"k8s_watch_event","watch":7,"time":4,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":3}}}`),
			"bad.ndjson:3: time 4 precedes the time 5 of k8s watch 7's creation or last event"},
		{"k8s event after the watch ended", lines(header2, k8sWatch7, `{"type":"k8s_watch_end","watch":7,"time":6,"after":3}`,
			`{"type":"k8s_watch_event","watch":7,"time":7,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":3}}}`),
			"bad.ndjson:4: k8s watch 7 already ended on line 3"},
		{"k8s watch ended twice", lines(header2, k8sWatch7, `{"type":"k8s_watch_end","watch":7,"time":6,"after":3}`, `{"type":"k8s_watch_end","watch":7,"time":7,"after":3}`),
			"bad.ndjson:4: k8s watch 7 already ended on line 3"},
		{"k8s watch end after 0", lines(header2, k8sWatch7, `{"type":"k8s_watch_end","watch":7,"time":6,"after":0}`),
			`bad.ndjson:3: "after" must be the revision committed when the watch ended (at least 1)`},
		{"informer without time", lines(header2, `{"type":"informer","entry":{"resync":true}}`),
			`bad.ndjson:2: missing "time": every Kubernetes record is timed in version 2`},
		{"informer log goes back in time", lines(header2, `{"type":"informer","time":9,"entry":{"resync":true}}`, `{"type":"informer","time":8,"entry":{"resync":true}}`),
			"bad.ndjson:3: time 8 precedes the time 9 of the informer log's previous entry (line 2): the log is recorded in order"},
		{"list returns before the log's last entry", lines(header2, `{"type":"informer","time":9,"entry":{"resync":true}}`,
			`{"type":"k8s_list","call":1,"return":4,"prefix":"/p/","options":{},"before":1,"after":1,"result":{"resource_version":1}}`),
			`bad.ndjson:3: "return" time 4 precedes the time 9 of the informer log's previous entry (line 2)`},
		{"cache before the log's last entry", lines(header2, `{"type":"informer","time":9,"entry":{"resync":true}}`, `{"type":"informer_cache","time":3,"prefix":"/p/"}`),
			"bad.ndjson:3: time 3 precedes the time 9 of the informer log's previous entry (line 2)"},
		{"two caches", lines(header2, `{"type":"informer_cache","time":3,"prefix":"/p/"}`, `{"type":"informer_cache","time":3,"prefix":"/p/"}`),
			"bad.ndjson:3: a second informer_cache (the first is on line 2)"},
		{"continue key bad base64", lines(header2, `{"type":"k8s_list","call":1,"return":4,"prefix":"/p/","options":{"continue":{"base64":"!"}},"before":1,"after":1,"result":{"resource_version":1}}`),
			"bad.ndjson:2: invalid record: bad base64 in byte string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := traces.Read(strings.NewReader(tc.body), "bad.ndjson")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestVersion1RejectsVersion2: what only version 2 can say is an error in a
// trace whose header says version 1, rather than read with a meaning the
// recorder did not give it.
func TestVersion1RejectsVersion2(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"base compaction", `{"format":"watchspec-trace","version":1,"system":"x","start":"2026-11-29T21:00:00Z","base_compact_revision":-1}`,
			`bad.ndjson:1: header: "base_compact_revision" is new in version 2, and the header says version 1`},
		{"serializable", lines(header, `{"type":"op","client":1,"call":1,"error":"x","request":{"range":{"key":"a","serializable":false}}}`),
			`bad.ndjson:2: "serializable" is new in version 2, and the header says version 1`},
		{"stream", lines(header, `{"type":"watch","client":1,"watch":1,"stream":0,"time":3,"request":{"key":"a"}}`),
			`bad.ndjson:2: a watch's "stream" is new in version 2, and the header says version 1`},
		{"watch error", lines(header, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":0,"canceled":true,"error":"x"}}`),
			`bad.ndjson:3: a watch response's "error" is new in version 2, and the header says version 1`},
		{"progress request", lines(header, `{"type":"progress_request","client":1,"stream":0,"time":4}`),
			`bad.ndjson:2: the record type "progress_request" is new in version 2, and the header says version 1`},
		{"k8s watch id", lines(header, `{"type":"k8s_watch","watch":7,"time":5,"prefix":"/p/","options":{},"before":2}`),
			"bad.ndjson:2: k8s watches are numbered from 0 in order in version 1: expected 0, found 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := traces.Read(strings.NewReader(tc.body), "bad.ndjson")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestVersion1Meanings: a version 1 trace reads as it always did, with
// what version 1 could not say marked unknown: a watch response's revision
// of 0, a Kubernetes record's time, a compact_revision of 0.
func TestVersion1Meanings(t *testing.T) {
	tr, err := traces.Read(strings.NewReader(lines(header, watch1,
		`{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":0,"canceled":true,"compact_revision":3}}`,
		`{"type":"k8s_watch","watch":0,"time":0,"prefix":"/p/","options":{},"before":2,"compact_revision":0}`,
		`{"type":"k8s_list","call":0,"return":0,"prefix":"/p/","options":{"continue":"/p/a"},"before":1,"after":1,"compact_revision":-1,"result":{"resource_version":1}}`,
		`{"type":"informer","entry":{"resync":true}}`,
	)), "v1.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if r := tr.Watches[0].Responses[0]; !r.RevisionUnknown || r.Response.Revision != 0 {
		t.Errorf("a version 1 revision of 0 reads as %+v, want unknown", r)
	}
	if tr.Header.BaseCompactRevision != nil || tr.Watches[0].Stream != nil {
		t.Errorf("version 1 reads a base compaction or a stream")
	}
	info := tr.K8sInfo
	if info == nil || !info.Untimed || info.Watches[0].ID != 0 || info.Watches[0].Line != 4 || info.Lists[0].Line != 5 || len(info.Entries) != 2 {
		t.Fatalf("version 1 Kubernetes records read as %+v", info)
	}
	if tr.K8s.Watches[0].CompactRevision != 0 || tr.K8s.Lists[0].CompactRevision != -1 || tr.K8s.Lists[0].Options.Continue != "/p/a" {
		t.Errorf("version 1 Kubernetes records read as %+v", tr.K8s)
	}
}

// TestVersion2Meanings: version 2 tells a recorded revision of 0 from an
// unrecorded one, and reads Kubernetes compactions and ids as the
// recorder wrote them.
func TestVersion2Meanings(t *testing.T) {
	tr, err := traces.Read(strings.NewReader(lines(`{"format":"watchspec-trace","version":2,"system":"x","start":"2026-11-29T21:00:00Z","base_revision":9,"base_compact_revision":7}`,
		watch1,
		`{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":0,"canceled":true,"compact_revision":3}}`,
		`{"type":"watch","client":1,"watch":2,"stream":4,"time":3,"request":{"key":"a"}}`,
		`{"type":"watch_response","client":1,"watch":2,"time":4,"response":{"canceled":true,"error":"etcdserver: no leader"}}`,
		`{"type":"k8s_watch","watch":-7,"time":1,"prefix":"/p/","options":{},"before":2}`,
		`{"type":"k8s_list","call":1,"return":2,"prefix":"/p/","options":{"continue":{"base64":"L3Av/w=="}},"before":1,"after":1,"compact_revision":5,"result":{"resource_version":1}}`,
		`{"type":"k8s_watch_event","watch":-7,"time":3,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":3}}}`,
	)), "v2.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if *tr.Header.BaseCompactRevision != 7 {
		t.Errorf("base compaction %d", *tr.Header.BaseCompactRevision)
	}
	if r := tr.Watches[0].Responses[0]; r.RevisionUnknown {
		t.Errorf("a recorded revision of 0 reads as unknown")
	}
	w := tr.Watches[1]
	if r := w.Responses[0]; *w.Stream != 4 || !r.RevisionUnknown || r.Error != "etcdserver: no leader" || !r.Response.Canceled {
		t.Errorf("watch read as %+v, %+v", w, r)
	}
	if tr.K8s.Watches[0].CompactRevision != 0 || tr.K8s.Lists[0].CompactRevision != 5 || tr.K8s.Lists[0].Options.Continue != "/p/\xff" {
		t.Errorf("Kubernetes records read as %+v", tr.K8s)
	}
	if info := tr.K8sInfo; info.Untimed || info.Watches[0].ID != -7 || tr.K8s.Entries[1].WatchEvent.Watch != 0 || info.Entries[1].Time != 3 || info.Lists[0].Call != 1 {
		t.Errorf("Kubernetes records read as %+v", info)
	}
}

// TestInvalidUTF8IsMalformed: bytes that are not UTF-8 in a plain JSON
// string, or a lone surrogate escape, would read as U+FFFD, so that two
// keys collapse into one and a history that is not linearizable passes; the
// line is rejected instead. Regression for issue 18.
func TestInvalidUTF8IsMalformed(t *testing.T) {
	put := func(key string) string {
		return `{"type":"op","client":1,"call":1,"return":2,"request":{"put":{"key":"` + key + `","value":"v"}},"response":{"revision":2,"put":{}}}`
	}
	for _, tc := range []struct{ name, body, want string }{
		{"raw byte in a key", lines(header2, put("a\xff")), `bad.ndjson:2: invalid UTF-8 at byte 70: a trace is UTF-8 JSON; write bytes that are not UTF-8 as {"base64": "..."}`},
		{"raw byte in a version 1 key", lines(header, put("\xfe")), "bad.ndjson:2: invalid UTF-8 at byte 69"},
		{"raw byte in the header", `{"format":"watchspec-trace","version":2,"system":"` + "\xff" + `","start":"2026-11-29T21:00:00Z"}`, "bad.ndjson:1: invalid UTF-8 at byte 50"},
		{"lone high surrogate", lines(header2, put(`a\ud800`)), `bad.ndjson:2: invalid record: a byte string holds \ud800, half of a UTF-16 surrogate pair, which stands for no bytes`},
		{"lone low surrogate", lines(header2, put(`\uDC01b`)), `a byte string holds \uDC01, half of a UTF-16 surrogate pair`},
		{"high surrogate then a letter", lines(header2, put(`\ud800\u0041`)), `a byte string holds \ud800`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := traces.Read(strings.NewReader(tc.body), "bad.ndjson")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
	// An escaped surrogate pair and an escaped backslash before "ud800"
	// are fine.
	tr, err := traces.Read(strings.NewReader(lines(header2, put(`\ud83d\ude00`), put(`\\ud800`))), "good.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if k := tr.Ops[0].Request.Put.Key; k != "😀" {
		t.Errorf("surrogate pair read as %q", k)
	}
	if k := tr.Ops[1].Request.Put.Key; k != `\ud800` {
		t.Errorf("escaped backslash read as %q", k)
	}
}

// TestNegativeIsMalformed: a negative revision, version, count or time is
// damaged input, not something the checker later fails the store for.
// Regression for issue 18.
func TestNegativeIsMalformed(t *testing.T) {
	opWith := func(resp string) string {
		return `{"type":"op","client":1,"call":1,"return":2,"request":{"range":{"key":"a"}},"response":` + resp + `}`
	}
	for _, tc := range []struct{ name, body, want string }{
		{"op header revision", lines(header, opWith(`{"revision":-4,"range":{"count":0}}`)), `bad.ndjson:2: response "revision" is negative (-4): a server never reports a negative revision`},
		{"mod revision", lines(header2, opWith(`{"revision":4,"range":{"count":1,"kvs":[{"key":"a","mod_revision":-2}]}}`)), `bad.ndjson:2: response range kvs[0]: "mod_revision" is negative (-2)`},
		{"create revision", lines(header2, opWith(`{"revision":4,"range":{"count":1,"kvs":[{"key":"a","mod_revision":2,"create_revision":-1}]}}`)), `"create_revision" is negative (-1)`},
		{"version", lines(header2, opWith(`{"revision":4,"range":{"count":1,"kvs":[{"key":"a","mod_revision":2,"version":-1}]}}`)), `"version" is negative (-1)`},
		{"count", lines(header2, opWith(`{"revision":4,"range":{"count":-1}}`)), `bad.ndjson:2: response range "count" is negative (-1)`},
		{"deleted", lines(header2, `{"type":"op","client":1,"call":1,"return":2,"request":{"delete":{"key":"a"}},"response":{"revision":3,"delete":{"deleted":-1}}}`), `response delete "deleted" is negative (-1)`},
		{"watch header revision", lines(header, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":-3,"created":true}}`), `bad.ndjson:3: response "revision" is negative (-3)`},
		{"watch compact revision", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":0,"canceled":true,"compact_revision":-3}}`), `bad.ndjson:3: response "compact_revision" is negative (-3)`},
		{"event revision", lines(header2, watch1, `{"type":"watch_response","client":1,"watch":1,"time":4,"response":{"revision":3,"events":[{"type":"PUT","kv":{"key":"a","mod_revision":-3}}]}}`), `bad.ndjson:3: events[0] kv: "mod_revision" is negative (-3)`},
		{"watch time", lines(header, `{"type":"watch","client":1,"watch":1,"time":-3,"request":{"key":"a"}}`), `bad.ndjson:2: "time" is negative (-3): times are nanoseconds since the start`},
		{"k8s list before", lines(header, `{"type":"k8s_list","call":0,"return":0,"prefix":"/p/","options":{},"before":-1,"after":1,"result":{"resource_version":1}}`), `bad.ndjson:2: "before" is negative (-1)`},
		{"k8s list time", lines(header, `{"type":"k8s_list","call":-1,"return":0,"prefix":"/p/","options":{},"before":1,"after":1,"result":{"resource_version":1}}`), `bad.ndjson:2: "call" is negative (-1)`},
		{"k8s list result", lines(header, `{"type":"k8s_list","call":0,"return":0,"prefix":"/p/","options":{},"before":1,"after":1,"result":{"resource_version":-1}}`), `bad.ndjson:2: result "resource_version" is negative (-1)`},
		{"k8s object", lines(header, `{"type":"k8s_list","call":0,"return":0,"prefix":"/p/","options":{},"before":1,"after":1,"result":{"resource_version":1,"items":[{"key":"/p/a","resource_version":-1}]}}`), `result items[0]: "resource_version" is negative (-1)`},
		{"k8s uid", lines(header, `{"type":"k8s_list","call":0,"return":0,"prefix":"/p/","options":{},"before":1,"after":1,"result":{"resource_version":1,"items":[{"key":"/p/a","resource_version":1,"uid":-1}]}}`), `result items[0]: "uid" is negative (-1)`},
		{"k8s watch time", lines(header, `{"type":"k8s_watch","watch":0,"time":-1,"prefix":"/p/","options":{},"before":2}`), `bad.ndjson:2: "time" is negative (-1)`},
		{"k8s bookmark", lines(header, `{"type":"k8s_watch","watch":0,"time":0,"prefix":"/p/","options":{},"before":2}`, `{"type":"k8s_watch_event","watch":0,"time":0,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":-3}}}`), `bad.ndjson:3: event object: "resource_version" is negative (-3)`},
		{"k8s event time", lines(header, `{"type":"k8s_watch","watch":0,"time":0,"prefix":"/p/","options":{},"before":2}`, `{"type":"k8s_watch_event","watch":0,"time":-2,"event":{"type":"BOOKMARK","object":{"key":"","resource_version":3}}}`), `bad.ndjson:3: "time" is negative (-2)`},
		{"k8s watch end", lines(header, `{"type":"k8s_watch","watch":0,"time":0,"prefix":"/p/","options":{},"before":2}`, `{"type":"k8s_watch_end","watch":0,"time":0,"after":-2}`), `bad.ndjson:3: "after" is negative (-2)`},
		{"informer start", lines(header, `{"type":"informer","time":0,"entry":{"start":-1}}`), `bad.ndjson:2: "start" is negative (-1)`},
		{"informer synced rv", lines(header, `{"type":"informer","time":0,"entry":{"synced_rv":-1}}`), `bad.ndjson:2: "synced_rv" is negative (-1)`},
		{"informer time", lines(header, `{"type":"informer","time":-1,"entry":{"resync":true}}`), `bad.ndjson:2: "time" is negative (-1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := traces.Read(strings.NewReader(tc.body), "bad.ndjson")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
	// What a client sent may be negative: a range at revision -1 reads the
	// current revision, a watch from -1 is refused by the server.
	if _, err := traces.Read(strings.NewReader(lines(header2,
		`{"type":"op","client":1,"call":1,"error":"x","request":{"range":{"key":"a","revision":-1}}}`,
		`{"type":"watch","client":1,"watch":1,"time":3,"request":{"key":"a","start_revision":-1}}`,
		`{"type":"op","client":1,"call":1,"error":"x","request":{"compact":{"revision":-1}}}`,
	)), "requests.ndjson"); err != nil {
		t.Error(err)
	}
}

// gzipped compresses b.
func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// corpusBytes returns the uncompressed bytes of a corpus trace.
func corpusBytes(t *testing.T, file string) []byte {
	b, err := os.ReadFile(filepath.Join("corpus", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCorruptGzipIsNamed: damage anywhere in a gzip stream — truncation, a
// wrong checksum, a flipped byte in the compressed data — is reported as
// corrupt gzip data with file:line, never as the invalid JSON or invalid
// UTF-8 the damage inflates to. Regression for issue 18.
func TestCorruptGzipIsNamed(t *testing.T) {
	gz := gzipped(t, corpusBytes(t, "stale-read.ndjson"))
	type damaged struct {
		name string
		data []byte
	}
	cases := []damaged{{"truncated", gz[:len(gz)/2]}, {"no trailer", gz[:len(gz)-8]}}
	bad := bytes.Clone(gz)
	bad[len(bad)-8] ^= 0xff // the CRC-32
	cases = append(cases, damaged{"checksum", bad})
	// Every 7th byte of the compressed data, after the 10-byte header.
	for i := 10; i < len(gz)-8; i += 7 {
		bad := bytes.Clone(gz)
		bad[i] ^= 0x55
		cases = append(cases, damaged{fmt.Sprintf("byte %d flipped", i), bad})
	}
	for _, c := range cases {
		_, err := traces.Read(bytes.NewReader(c.data), "run.ndjson.gz")
		if err == nil || !strings.HasPrefix(err.Error(), "run.ndjson.gz:") || !strings.Contains(err.Error(), "corrupt gzip data") {
			t.Errorf("%s: got %v, want a corrupt gzip error with file:line", c.name, err)
		}
	}
	if _, err := traces.Read(bytes.NewReader(gz[:len(gz)/2]), "run.ndjson.gz"); err == nil || !strings.Contains(err.Error(), "corrupt gzip data: the stream is truncated") {
		t.Errorf("truncated: got %v", err)
	}
	// The same through ReadFile.
	path := filepath.Join(t.TempDir(), "run.ndjson.gz")
	os.WriteFile(path, cases[0].data, 0o644)
	if _, err := traces.ReadFile(path); err == nil || !strings.Contains(err.Error(), path+":") || !strings.Contains(err.Error(), "corrupt gzip data") {
		t.Errorf("ReadFile: got %v", err)
	}
}

// TestGzipByContent: gzip data is read as such whatever its name (stdin
// has none), and a ".gz" name that holds no gzip data is an error.
func TestGzipByContent(t *testing.T) {
	plain := corpusBytes(t, "stale-read.ndjson")
	want, err := traces.Read(bytes.NewReader(plain), "stale-read.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	got, err := traces.Read(bytes.NewReader(gzipped(t, plain)), "-")
	if err != nil {
		t.Fatal(err)
	}
	clearLines(want)
	clearLines(got)
	want.Name = got.Name
	if !sameTrace(want, got) {
		t.Error("the gzip-compressed trace reads differently")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "plain.ndjson.gz"), plain, 0o644)
	if _, err := traces.ReadFile(filepath.Join(dir, "plain.ndjson.gz")); err == nil || !strings.Contains(err.Error(), "not gzip data, though the name ends in .gz") {
		t.Errorf("a .gz file of plain text: got %v", err)
	}
	os.WriteFile(filepath.Join(dir, "packed.ndjson"), gzipped(t, plain), 0o644)
	if _, err := traces.ReadFile(filepath.Join(dir, "packed.ndjson")); err != nil {
		t.Errorf("gzip data without .gz: %v", err)
	}
}

// TestCorpusWritesBackLineForLine: every corpus trace (all version 1)
// written back has exactly the lines of the file it was read from (Write
// groups records by kind, where a recorder interleaves them): version 1 is
// read and written exactly as before version 2.
func TestCorpusWritesBackLineForLine(t *testing.T) {
	files, _ := filepath.Glob("corpus/*.ndjson*")
	for _, f := range files {
		tr, err := traces.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Header.Version != 1 {
			continue
		}
		b := corpusBytes(t, filepath.Base(f))
		if strings.HasSuffix(f, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			out.ReadFrom(zr)
			b = out.Bytes()
		}
		var buf bytes.Buffer
		if err := traces.Write(&buf, tr); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sorted := func(b []byte) []string {
			ls := strings.Split(string(b), "\n")
			sort.Strings(ls)
			return ls
		}
		got, want := sorted(buf.Bytes()), sorted(b)
		if len(got) != len(want) {
			t.Errorf("%s: written back as %d lines, not %d", f, len(got), len(want))
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: written back differs from the file:\n%s\nnot\n%s", f, got[i], want[i])
				break
			}
		}
	}
}

// TestWriteRefusesWhatItsVersionCannotSay: a version 1 writer fails on
// every version 2 field rather than drop it, and a version 2 trace needs
// the times of its Kubernetes records.
func TestWriteRefusesWhatItsVersionCannotSay(t *testing.T) {
	v1 := traces.Header{Version: 1, System: "test", Start: "2026-11-29T21:00:00Z"}
	one := int64(1)
	if _, err := traces.NewWriter(&bytes.Buffer{}, traces.Header{Version: 1, System: "x", BaseCompactRevision: &one}); err == nil || !strings.Contains(err.Error(), "version 1 cannot record the header's base_compact_revision") {
		t.Errorf("base compaction in version 1: %v", err)
	}
	if _, err := traces.NewWriter(&bytes.Buffer{}, traces.Header{Version: 3, System: "x"}); err == nil || !strings.Contains(err.Error(), "cannot write format version 3") {
		t.Errorf("version 3: %v", err)
	}
	rangeResp := kv.Response{Revision: 2, Range: &kv.RangeResponse{}}
	for name, write := range map[string]func(w *traces.Writer) error{
		"serializable": func(w *traces.Writer) error {
			return w.Op(traces.Op{Client: 1, Call: 1, Return: 2, Request: kv.Request{Range: &kv.RangeRequest{Key: "a"}}, Serializable: true, Response: &rangeResp})
		},
		"stream":           func(w *traces.Writer) error { return w.WatchStream(1, 1, 0, 1, watch.Request{Key: "a"}) },
		"progress request": func(w *traces.Writer) error { return w.ProgressRequest(traces.ProgressRequest{Client: 1}) },
		"watch error": func(w *traces.Writer) error {
			return w.WatchResponseRecord(1, 1, traces.WatchResponse{Response: watch.Response{Canceled: true}, Error: "x"})
		},
		"continue key": func(w *traces.Writer) error {
			return w.K8sList(k8s.ListCall{Options: k8s.ListOptions{Continue: "\xff"}}, -1, 0, 0)
		},
	} {
		var buf bytes.Buffer
		w, err := traces.NewWriter(&buf, v1)
		if err != nil {
			t.Fatal(err)
		}
		err = write(w)
		if err == nil || !strings.Contains(err.Error(), "version 1 cannot record") {
			t.Errorf("%s in version 1: %v", name, err)
		}
		if w.Flush() == nil {
			t.Errorf("%s: the error is not sticky", name)
		}
	}
	var buf bytes.Buffer
	w, _ := traces.NewWriter(&buf, traces.Header{System: "x"})
	if w.Version() != traces.Version {
		t.Errorf("a writer without a version writes version %d", w.Version())
	}
	if err := w.Op(traces.Op{Client: 1, Call: 1, Request: kv.Request{Put: &kv.PutRequest{Key: "a"}}, Serializable: true, Error: "x"}); err == nil || !strings.Contains(err.Error(), "only a range request may be serializable") {
		t.Errorf("a serializable put: %v", err)
	}
	w, _ = traces.NewWriter(&buf, traces.Header{System: "x"})
	if err := w.WatchResponseRecord(1, 1, traces.WatchResponse{Response: watch.Response{Revision: 3}, RevisionUnknown: true}); err == nil || !strings.Contains(err.Error(), "unknown revision has Revision 3") {
		t.Errorf("an unknown revision with a value: %v", err)
	}

	run := &k8s.Run{Watches: []k8s.WatchCall{{Prefix: "/p/"}, {Prefix: "/p/"}}}
	for _, tc := range []struct {
		name string
		tr   *traces.Trace
		want string
	}{
		{"untimed version 2", &traces.Trace{Header: traces.Header{Version: 2, System: "x"}, K8s: run},
			"traces: version 2 times every Kubernetes record: set Trace.K8sInfo (or write version 1)"},
		{"info for another run", &traces.Trace{Header: traces.Header{System: "x"}, K8s: run, K8sInfo: &traces.K8sInfo{Watches: make([]traces.K8sWatchInfo, 1)}},
			"traces: K8sInfo has 1 watches, the run 2"},
		{"two watches with one id", &traces.Trace{Header: traces.Header{System: "x"}, K8s: run, K8sInfo: &traces.K8sInfo{Watches: make([]traces.K8sWatchInfo, 2)}},
			"traces: K8sInfo gives two watches the id 0"},
		{"version 2 fields in an untimed run", &traces.Trace{Header: traces.Header{System: "x"}, K8s: run, ProgressRequests: []traces.ProgressRequest{{}}},
			"traces: version 1 cannot record a progress request"},
	} {
		err := traces.Write(&bytes.Buffer{}, tc.tr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := traces.Write(&bytes.Buffer{}, &traces.Trace{Header: traces.Header{System: "x"}, K8s: run}); err != nil {
		t.Errorf("an untimed run is written as version 1: %v", err)
	}
}

// BenchmarkReadFile reads the largest corpus trace, a recorded etcd run.
func BenchmarkReadFile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := traces.ReadFile("corpus/etcd-3.7.3-1member.ndjson.gz"); err != nil {
			b.Fatal(err)
		}
	}
}
