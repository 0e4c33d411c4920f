package watch_test

import (
	"fmt"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
)

// A server that drops the event of revision 3 is caught: the validator names
// the property and points at the revision and key.
func ExampleValidator() {
	var s kv.State
	h := &kv.History{}
	for _, v := range []string{"1", "2", "3"} {
		s, _ = kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "a", Value: v}})
		c, _ := s.LastCommit()
		_ = h.Append(c) // revisions 2, 3, 4
	}
	req := watch.Request{Key: "a", StartRevision: 2}
	perfect := watch.Canonical(h, req, s.Revision())
	fmt.Println(len(watch.Validate(h, req, perfect)), "violations in the canonical stream")

	v := watch.NewValidator(h, req)
	for i, resp := range perfect {
		if i == 2 { // the response for revision 3
			continue
		}
		for _, violation := range v.Observe(resp) {
			fmt.Println(violation)
		}
	}
	// Output:
	// 0 violations in the canonical stream
	// Reliable §3.3 revisions=[3] keys=["a"]: 1 matching events in revisions 3..3 (first: PUT "a"="2"@3 (create 2, version 2)) were skipped before the event at revision 4
}

// etcd may send a watch a header below an earlier one (a catch-up batch
// re-sent after the stream's buffer was full): not a violation of what etcd
// guarantees, but of the strict profile's expectation.
func ExampleNewValidatorWith() {
	var s kv.State
	h := &kv.History{}
	for _, v := range []string{"1", "2", "3"} {
		s, _ = kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "a", Value: v}})
		c, _ := s.LastCommit()
		_ = h.Append(c) // revisions 2, 3, 4
	}
	req := watch.Request{Key: "a", StartRevision: 2}
	stream := watch.Canonical(h, req, s.Revision())
	// The batch of revision 2 went out with the current revision (4); the
	// batch of revision 3, parked, was re-sent with header 3.
	stream[1].Revision, stream[2].Revision = 4, 3
	for _, cfg := range []watch.Config{{}, {Expect: watch.Expectations{MonotonicHeaders: true}}} {
		v := watch.NewValidatorWith(h, req, cfg)
		n := 0
		for _, r := range stream {
			n += len(v.Observe(r))
		}
		fmt.Printf("strict=%v: %d violations\n", cfg.Expect.MonotonicHeaders, n)
	}
	// Output:
	// strict=false: 0 violations
	// strict=true: 1 violations
}

// What a perfect server sends for a watch from the past with PrevKV.
func ExampleCanonical() {
	var s kv.State
	h := &kv.History{}
	for _, req := range []kv.Request{
		{Put: &kv.PutRequest{Key: "a", Value: "1"}},
		{Put: &kv.PutRequest{Key: "a", Value: "2"}},
		{Delete: &kv.DeleteRequest{Key: "a"}},
	} {
		s, _ = kv.Step(s, req)
		c, _ := s.LastCommit()
		_ = h.Append(c)
	}
	for _, r := range watch.Canonical(h, watch.Request{Key: "a", StartRevision: 3, PrevKV: true}, s.Revision()) {
		fmt.Printf("header=%d created=%v", r.Revision, r.Created)
		for _, e := range r.Events {
			fmt.Printf(" %s %q@%d prev=%q", e.Type, e.KV.Key, e.KV.ModRevision, e.PrevKV.Value)
		}
		fmt.Println()
	}
	// Output:
	// header=4 created=true
	// header=4 created=false PUT "a"@3 prev="1"
	// header=4 created=false DELETE "a"@4 prev="2"
}
