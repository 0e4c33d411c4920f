package linearizability_test

import (
	"errors"
	"fmt"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
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

// Which progress notifications bind a watch follows from the trace's
// streams (docs/SPEC.md §3.6): a watch alone on its stream binds those after
// its registration, and on a stream shared with another watch and asked for
// progress none binds. Binds then answers for one notification: here one at
// revision 5 on a watch created at header 7 that has received nothing yet —
// the answer to a request computed before the watch was registered.
func ExampleProgressBinding() {
	stream := 0
	alone := &traces.Watch{Client: 1, ID: 1, Stream: &stream, Time: 10, Request: watch.Request{Key: "a"}}
	tr := &traces.Trace{Header: traces.Header{Version: traces.Version},
		Watches:          []*traces.Watch{alone},
		ProgressRequests: []traces.ProgressRequest{{Client: 1, Stream: 0, Time: 9}},
	}
	b := linearizability.ProgressBinding(tr, alone)
	fmt.Println(b, b.Binds(7, false, 5), b.Binds(7, true, 5))

	shared := &traces.Watch{Client: 1, ID: 2, Stream: &stream, Time: 11, Request: watch.Request{Key: "b"}}
	tr.Watches = append(tr.Watches, shared)
	fmt.Println(linearizability.ProgressBinding(tr, alone))

	tr.ProgressRequests = nil
	fmt.Println(linearizability.ProgressBinding(tr, alone))
	// Output:
	// BindAfterRegistration false true
	// BindNone
	// BindAll
}

// A result is a value: Err is nil when every property holds, and otherwise
// holds every violation, each naming its property and SPEC section.
func ExampleResult_Err() {
	put := kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}}
	tr := &traces.Trace{Name: "example", Header: traces.Header{Version: traces.Version, System: "example", UniqueValues: true},
		Ops: []traces.Op{{Client: 1, Call: 10, Return: 20, Request: put, Response: &kv.Response{Revision: 2, Put: &kv.PutResponse{}}}},
		Watches: []*traces.Watch{{Client: 2, ID: 1, Time: 1, Request: watch.Request{Key: "a", StartRevision: 1},
			Responses: []traces.WatchResponse{
				{Time: 2, Response: watch.Response{Revision: 1, Created: true}},
				{Time: 30, Response: watch.Response{Revision: 2}}, // claims revision 2 without its event
			}}},
	}
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		panic(err) // the trace cannot be checked at all
	}
	var verr *linearizability.ViolationsError
	if errors.As(res.Err(), &verr) {
		fmt.Println(verr.Properties())
	}
	var v spec.Violation
	if errors.As(res.Err(), &v) {
		fmt.Println(v.Property, v.Property.Section(), v.Keys)
	}
	// Output:
	// [Bookmarkable]
	// Bookmarkable §3.6 [a]
}
