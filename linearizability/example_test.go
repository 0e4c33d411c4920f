package linearizability_test

import (
	"fmt"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// A recorded run: a write, then a watch that misses it. Check finds the
// history linearizable and names the watch's fault.
func ExampleCheck() {
	put := kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}
	tr := &traces.Trace{Name: "example", Header: traces.Header{Version: traces.Version, System: "example", UniqueValues: true},
		Ops: []traces.Op{{Client: 1, Call: 10, Return: 20, Request: put, Response: &kv.Response{Revision: 2, Put: &kv.PutResponse{}}}},
		Watches: []*traces.Watch{{Client: 2, ID: 1, Time: 1, Request: watch.Request{Key: "a", StartRevision: 1},
			Responses: []traces.WatchResponse{
				{Time: 2, Response: watch.Response{Revision: 1, Created: true}},
				{Time: 30, Response: watch.Response{Revision: 2}}, // a progress notification, but the event at 2 never came
			}}},
	}
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Verdict, "by", res.Method)
	for _, v := range res.Violations {
		fmt.Println(v.Property, v.Where)
	}
	// Output:
	// linearizable by revision order
	// Bookmarkable watch 1 of client 2 (line 0), response at line 0
}

// A strict check holds a store to watchspec's recommendations beyond etcd's
// guarantees (docs/SPEC.md §9.3): here, headers that never go back.
func ExampleProfileOption() {
	strict, err := linearizability.ProfileOption("strict")
	if err != nil {
		panic(err)
	}
	for _, e := range strict.Expectations {
		fmt.Println(e.Name, "strengthens", e.Rule)
	}
	// Output:
	// MonotonicHeaders strengthens §3.12 MonotonicRevision
	// StartAfterCreated strengthens §3.10 StartRevision (§1 from(w))
	// StrictFreshStart strengthens §5.8 FreshStart
}
