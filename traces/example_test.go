package traces_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// Read a trace, here from a string; traces.ReadFile reads a file, plain or
// gzip-compressed.
func ExampleRead() {
	const trace = `{"format":"watchspec-trace","version":2,"system":"etcd","system_version":"3.7.3","start":"2026-11-29T12:00:00Z","base_revision":1,"base_compact_revision":-1}
{"type":"watch","client":2,"watch":0,"stream":0,"time":50,"request":{"key":"a"}}
{"type":"watch_response","client":2,"watch":0,"time":60,"response":{"revision":1,"created":true}}
{"type":"op","client":1,"call":100,"return":900,"request":{"put":{"key":"a","value":"v1"}},"response":{"revision":2,"put":{}}}
{"type":"op","client":1,"call":1000,"return":1100,"request":{"range":{"key":"a","serializable":true}},"response":{"revision":2,"range":{"kvs":[{"key":"a","value":"v1","create_revision":2,"mod_revision":2,"version":1}],"count":1}}}
{"type":"watch_response","client":2,"watch":0,"time":950,"response":{"revision":2,"events":[{"type":"PUT","kv":{"key":"a","value":"v1","create_revision":2,"mod_revision":2,"version":1}}]}}
{"type":"progress_request","client":2,"stream":0,"time":1200}
{"type":"watch_response","client":2,"watch":0,"time":1300,"response":{"revision":2,"progress":true}}
{"type":"watch_response","client":2,"watch":0,"time":1400,"response":{"canceled":true,"error":"etcdserver: no leader"}}
`
	t, err := traces.Read(strings.NewReader(trace), "example.ndjson")
	if err != nil {
		fmt.Println(err)
		return
	}
	h := t.Header
	fmt.Printf("%s %s, format version %d, compaction in force at the start: %d\n", h.System, h.SystemVersion, h.Version, *h.BaseCompactRevision)
	for _, op := range t.Ops {
		switch r := op.Request; {
		case r.Put != nil:
			fmt.Printf("line %d: client %d put %s=%s at revision %d\n", op.Line, op.Client, r.Put.Key, r.Put.Value, op.Response.Revision)
		case r.Range != nil:
			fmt.Printf("line %d: client %d read %s (serializable %v) at revision %d\n", op.Line, op.Client, r.Range.Key, op.Serializable, op.Response.Revision)
		}
	}
	for _, w := range t.Watches {
		for _, r := range w.Responses {
			switch {
			case r.Error != "":
				fmt.Printf("line %d: watch %d ended: %s (revision recorded: %v)\n", r.Line, w.ID, r.Error, !r.RevisionUnknown)
			default:
				fmt.Printf("line %d: watch %d on stream %d: revision %d, %d events, progress %v\n", r.Line, w.ID, *w.Stream, r.Response.Revision, len(r.Response.Events), r.Response.IsProgressNotify())
			}
		}
	}
	for _, p := range t.ProgressRequests {
		fmt.Printf("line %d: client %d asked stream %d for progress\n", p.Line, p.Client, p.Stream)
	}

	// A malformed trace fails with file:line and what is wrong.
	_, err = traces.Read(strings.NewReader(trace[:strings.Index(trace, "\n")+1]+`{"type":"op","client":1,"call":-5,"request":{"compact":{"revision":1}},"error":"timeout"}`), "bad.ndjson")
	fmt.Println(err)
	// Output:
	// etcd 3.7.3, format version 2, compaction in force at the start: -1
	// line 4: client 1 put a=v1 at revision 2
	// line 5: client 1 read a (serializable true) at revision 2
	// line 3: watch 0 on stream 0: revision 1, 0 events, progress false
	// line 6: watch 0 on stream 0: revision 2, 1 events, progress false
	// line 8: watch 0 on stream 0: revision 2, 0 events, progress true
	// line 9: watch 0 ended: etcdserver: no leader (revision recorded: false)
	// line 7: client 2 asked stream 0 for progress
	// bad.ndjson:2: "call" is negative (-5): times are nanoseconds since the start
}

// A recorder writes records as they happen; NewWriter writes the latest
// format version unless the header asks for another.
func ExampleNewWriter() {
	never := int64(-1)
	w, err := traces.NewWriter(os.Stdout, traces.Header{System: "etcd", SystemVersion: "3.7.3", Start: "2026-11-29T12:00:00Z", BaseCompactRevision: &never})
	if err != nil {
		fmt.Println(err)
		return
	}
	const stream = 0 // the client's first Watcher context
	w.WatchStream(2, 0, stream, 50, watch.Request{Key: "a"})
	w.WatchResponse(2, 0, 60, watch.Response{Revision: 1, Created: true})
	put := kv.Response{Revision: 2, Put: &kv.PutResponse{}}
	w.Op(traces.Op{Client: 1, Call: 100, Return: 900, Request: kv.Request{Put: &kv.PutRequest{Key: "a", Value: "\xff"}}, Response: &put})
	w.ProgressRequest(traces.ProgressRequest{Client: 2, Stream: stream, Time: 1200})
	w.WatchResponseRecord(2, 0, traces.WatchResponse{Time: 1400, Response: watch.Response{Canceled: true}, RevisionUnknown: true, Error: "context canceled"})
	if err := w.Flush(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"format":"watchspec-trace","version":2,"system":"etcd","system_version":"3.7.3","start":"2026-11-29T12:00:00Z","base_compact_revision":-1}
	// {"type":"watch","client":2,"watch":0,"stream":0,"time":50,"request":{"key":"a"}}
	// {"type":"watch_response","client":2,"watch":0,"time":60,"response":{"revision":1,"created":true}}
	// {"type":"op","client":1,"call":100,"return":900,"request":{"put":{"key":"a","value":{"base64":"/w=="}}},"response":{"revision":2,"put":{}}}
	// {"type":"progress_request","client":2,"stream":0,"time":1200}
	// {"type":"watch_response","client":2,"watch":0,"time":1400,"response":{"canceled":true,"error":"context canceled"}}
}
