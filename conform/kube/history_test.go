package kube

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

var testGVR = k8s.GVR{Version: "v1", Resource: "podtemplates"}

func TestDecodeContinue(t *testing.T) {
	prefix := testGVR.Prefix("ns")
	tok := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	for _, c := range []struct {
		token string
		key   string
		rv    int64
		ok    bool
	}{
		{tok(`{"v":"meta.k8s.io/v1","rv":12,"start":"/obj-1\u0000"}`), prefix + "obj-1", 12, true},
		{tok(`{"v":"meta.k8s.io/v1","rv":-1,"start":"obj-2\u0000"}`), prefix + "obj-2", -1, true},
		{tok(`{"v":"other/v9","rv":12,"start":"obj-1"}`), "", 0, false},
		{"not base64!", "", 0, false},
		{"", "", 0, false},
	} {
		key, rv, ok := decodeContinue(c.token, prefix)
		if key != c.key || rv != c.rv || ok != c.ok {
			t.Errorf("decodeContinue(%q) = %q %d %v, want %q %d %v", c.token, key, rv, ok, c.key, c.rv, c.ok)
		}
	}
}

// A run by hand: base 10; a create at 12, an update at 14 and a delete
// answered with a Status (its revision, 15, only a watch delivered); 11 and
// 13 are other writers' (another namespace). A list at 14 sees the update.
func handRun(t *testing.T, deletedAt int64, exclusive bool) (*built, error) {
	t.Helper()
	r := newRecorder(testGVR, "ns")
	key := testGVR.Key("ns", "a")
	r.addWrite(&writeRec{kind: create, key: key, value: "v1", uid: "u1", call: 1, rev: 12})
	r.addWrite(&writeRec{kind: update, key: key, value: "v2", uid: "u1", call: 2, rev: 14})
	r.addWrite(&writeRec{kind: remove, key: key, uid: "u1", call: 3})
	r.addList(&listRec{first: -1, call: 4, rv: 14, items: []rawObject{{key: key, value: "v2", rv: 14, uid: "u1"}}, semantic: "MostRecent"})
	w := r.addWatch(&watchRec{opts: k8s.WatchOptions{ResourceVersion: "14"}, call: 5})
	if deletedAt > 0 {
		r.addEvent(w, rawEvent{typ: k8s.Deleted, obj: rawObject{key: key, value: "v2", rv: deletedAt, uid: "u1"}})
	}
	r.endWatch(w)
	return r.build(traces.Header{System: "hand"}, 10, 15, exclusive)
}

func TestHistoryFromAnswers(t *testing.T) {
	b, err := handRun(t, 15, false)
	if err != nil {
		t.Fatal(err)
	}
	if b.stats.Foreign != 2 || b.stats.Base != 10 || b.stats.Head != 15 || len(b.trace.Ops) != 5 {
		t.Fatalf("stats %+v, %d ops; want revisions 11–15 with 2 foreign", b.stats, len(b.trace.Ops))
	}
	if d := b.trace.Ops[4].Request.Delete; d == nil || d.Key != testGVR.Key("ns", "a") {
		t.Errorf("revision 15 is %v, want the delete the watch delivered", b.trace.Ops[4].Request)
	}
	for _, rev := range []int{0, 2} {
		if p := b.trace.Ops[rev].Request.Put; p == nil || !strings.HasPrefix(p.Key, foreignKey) {
			t.Errorf("revision %d is %v, want another writer's", 11+rev, b.trace.Ops[rev].Request)
		}
	}
	res, err := linearizability.Check(b.trace, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) > 0 || res.Verdict != linearizability.Linearizable {
		t.Errorf("%s %v", res.Verdict, res.Violations)
	}
}

// A DELETED event at a revision a write of the run holds (the update's,
// 14) cannot be the deletion's: the delete stays unplaced, and the run
// cannot be recorded rather than checked against a made-up history.
func TestHistoryDeleteAtAWrite(t *testing.T) {
	if _, err := handRun(t, 14, false); err == nil || !strings.Contains(err.Error(), "no watch delivered it") {
		t.Errorf("a delete whose only observed revision is an update's: %v, want it unplaced", err)
	}
}

// Without a watch's DELETED event, a delete answered with a Status has no
// revision: in an exclusive run the one free revision is its; otherwise
// the run cannot be recorded.
func TestHistoryUnobservedDelete(t *testing.T) {
	if _, err := handRun(t, 0, false); err == nil || !strings.Contains(err.Error(), "no watch delivered it") {
		t.Errorf("non-exclusive: %v, want the delete unplaced", err)
	}
	if _, err := handRun(t, 0, true); err == nil || !strings.Contains(err.Error(), "not the store's only writer") {
		t.Errorf("exclusive with other writers: %v, want errNotExclusive", err)
	}
}

// The watch's DELETED event is checked like any other: a list at 15 that
// still shows the object fails ListSnapshot.
func TestHistoryListAfterDelete(t *testing.T) {
	b, err := handRun(t, 15, false)
	if err != nil {
		t.Fatal(err)
	}
	key := testGVR.Key("ns", "a")
	b.trace.K8s.Lists = append(b.trace.K8s.Lists, k8s.ListCall{Prefix: testGVR.Prefix("ns"), Before: 14, After: 15,
		Result: k8s.ListResult{ResourceVersion: 15, Items: []k8s.Object{{Key: key, Value: "v2", ResourceVersion: 14, UID: 12}}}})
	b.trace.K8sInfo.Lists = append(b.trace.K8sInfo.Lists, traces.K8sListInfo{Call: 6, Return: 7})
	res, err := linearizability.Check(b.trace, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 1 || res.Violations[0].Property != spec.ListSnapshot {
		t.Errorf("%v, want ListSnapshot", res.Violations)
	}
}
