package kv_test

import (
	"fmt"

	"github.com/watchspec/watchspec/model/kv"
)

// Step is a pure function from a state and a request to a new state and a
// response; the old state stays valid and unchanged.
func ExampleStep() {
	var s kv.State // a fresh store, at revision 1
	s, r := kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "a", Value: "1"}})
	fmt.Println("put:", r.Revision)
	before := s
	s, r = kv.Step(s, kv.Request{Txn: &kv.TxnRequest{
		Compare: []kv.Compare{{Key: "a", Target: kv.TargetVersion, Result: kv.CompareEqual, Number: 1}},
		Success: []kv.Op{{Put: &kv.PutRequest{Key: "a", Value: "2"}}, {Put: &kv.PutRequest{Key: "b", Value: "2"}}},
	}})
	fmt.Println("txn:", r.Revision, r.Txn.Succeeded)
	_, r = kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "a", RangeEnd: kv.PrefixEnd("a"), Revision: 2}})
	fmt.Println("a at revision 2:", r.Range.KVs[0].Value, "header:", r.Revision)
	_, r = kv.Step(before, kv.Request{Range: &kv.RangeRequest{Key: "b"}})
	fmt.Println("b before the txn:", r.Range.Count)
	s, _ = kv.Step(s, kv.Request{Compact: &kv.CompactRequest{Revision: 3}})
	_, r = kv.Step(s, kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 2}})
	fmt.Println("after compaction:", r.Err)
	// Output:
	// put: 2
	// txn: 3 true
	// a at revision 2: 1 header: 3
	// b before the txn: 0
	// after compaction: mvcc: required revision has been compacted
}
