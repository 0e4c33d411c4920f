package k8s_test

import (
	"fmt"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
)

// An informer started when revision 3 was committed, but its first list, at
// resourceVersion "0", was answered from a cache still at revision 2
// (kubernetes#59848). The API allows that, so the default verdict passes;
// the expectation StrictFreshStart (the strict profile) names it.
func ExampleCheckInformerWith() {
	var s kv.State
	for _, v := range []string{"v1", "v2"} {
		s, _ = kv.Step(s, kv.Request{Put: &kv.PutRequest{Key: "/registry/pods/default/web", Value: v}})
	}
	h, _ := k8s.NewHistory(s.History())
	stale := h.Objects("/registry/pods/default/", 2)
	fresh := h.Objects("/registry/pods/default/", 3)
	prefix := "/registry/pods/default/"
	list := k8s.ListCall{Prefix: prefix, Options: k8s.ListOptions{ResourceVersion: "0"}, Before: 3, After: 3,
		Result: k8s.ListResult{ResourceVersion: 2, Items: stale}}
	changed := k8s.WatchEvent{Type: k8s.Modified, Object: fresh[0]}
	watch := k8s.WatchCall{Prefix: prefix, Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 3, After: 3, Events: []k8s.WatchEvent{changed}}
	handler, first, synced := 0, 0, int64(3)
	run := k8s.Run{Prefix: prefix, Lists: []k8s.ListCall{list}, Watches: []k8s.WatchCall{watch}, Cache: fresh,
		Entries: []k8s.Entry{
			{HandlerAdded: &handler},
			{Start: &k8s.StartEntry{Revision: 3}},
			{List: &first},
			{Notification: &k8s.Notification{Type: k8s.OnAdd, New: &stale[0], InInitialList: true}},
			{WatchEvent: &k8s.WatchEventEntry{Watch: 0, Event: changed}},
			{SyncedRV: &synced},
			{Notification: &k8s.Notification{Type: k8s.OnUpdate, Old: &stale[0], New: &fresh[0]}},
			{Quiesced: true},
		}}

	fmt.Println("default:", len(k8s.CheckInformer(h, run)), "violations")
	for _, v := range k8s.CheckInformerWith(h, run, k8s.Expectations{StrictFreshStart: true}) {
		fmt.Println("strict:", v.Property, v.Property.Section())
	}
	// Output:
	// default: 0 violations
	// strict: FreshStart §5.8
}
