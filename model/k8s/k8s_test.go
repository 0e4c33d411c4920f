package k8s_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
)

var pods = k8s.GVR{Version: "v1", Resource: "pods"}
var prefix = pods.Prefix("default")

func TestKeys(t *testing.T) {
	require.Equal(t, "/registry/pods/default/web", pods.Key("default", "web"))
	require.Equal(t, "/registry/apps/deployments/", k8s.GVR{Group: "apps", Version: "v1", Resource: "deployments"}.Prefix(""))
	require.Equal(t, "web", k8s.Object{Key: pods.Key("default", "web")}.Name())
	for s, ok := range map[string]bool{"": true, "0": true, "12": true, "012": false, "-1": false, "x": false} {
		_, got := k8s.ParseRV(s)
		require.Equal(t, ok, got, "ParseRV(%q)", s)
	}
}

// SPEC §4: the list semantics table.
func TestListSemantic(t *testing.T) {
	for _, tc := range []struct {
		o    k8s.ListOptions
		want k8s.Semantic
		rv   int64
		err  bool
	}{
		{o: k8s.ListOptions{}, want: k8s.MostRecent},
		{o: k8s.ListOptions{ResourceVersion: "0"}, want: k8s.Any},
		{o: k8s.ListOptions{ResourceVersion: "7"}, want: k8s.NotOlderThan, rv: 7},
		{o: k8s.ListOptions{ResourceVersion: "7", Limit: 5}, want: k8s.Exact, rv: 7},
		{o: k8s.ListOptions{ResourceVersion: "0", Limit: 5}, want: k8s.Any},
		{o: k8s.ListOptions{Limit: 5}, want: k8s.MostRecent},
		{o: k8s.ListOptions{Continue: "tok"}, want: k8s.Continuation},
		{o: k8s.ListOptions{ResourceVersion: "7", Continue: "tok"}, err: true},
		{o: k8s.ListOptions{ResourceVersion: "7", ResourceVersionMatch: "Exact"}, want: k8s.Exact, rv: 7},
		{o: k8s.ListOptions{ResourceVersion: "7", ResourceVersionMatch: "NotOlderThan", Limit: 5}, want: k8s.NotOlderThan, rv: 7},
		{o: k8s.ListOptions{ResourceVersion: "0", ResourceVersionMatch: "NotOlderThan"}, want: k8s.Any},
		{o: k8s.ListOptions{ResourceVersion: "0", ResourceVersionMatch: "Exact"}, err: true},
		{o: k8s.ListOptions{ResourceVersionMatch: "Exact"}, err: true},
		{o: k8s.ListOptions{ResourceVersion: "7", ResourceVersionMatch: "Newest"}, err: true},
		{o: k8s.ListOptions{ResourceVersion: "7", ResourceVersionMatch: "Exact", Continue: "tok"}, err: true},
		{o: k8s.ListOptions{ResourceVersion: "abc"}, err: true},
	} {
		got, rv, err := k8s.ListSemantic(tc.o)
		if tc.err {
			require.ErrorIs(t, err, k8s.ErrInvalid, "%+v", tc.o)
			continue
		}
		require.NoError(t, err, "%+v", tc.o)
		require.Equal(t, tc.want, got, "%+v", tc.o)
		require.Equal(t, tc.rv, rv, "%+v", tc.o)
	}
}

// SPEC §4: the watch semantics table.
func TestWatchSemantic(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		o    k8s.WatchOptions
		want k8s.WatchStart
		err  bool
	}{
		{o: k8s.WatchOptions{}, want: k8s.WatchStart{InitialState: true, Semantic: k8s.Any}},
		{o: k8s.WatchOptions{ResourceVersion: "0"}, want: k8s.WatchStart{InitialState: true, Semantic: k8s.Any}},
		{o: k8s.WatchOptions{ResourceVersion: "9"}, want: k8s.WatchStart{Semantic: k8s.Exact, From: 9}},
		{o: k8s.WatchOptions{SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan", AllowWatchBookmarks: true},
			want: k8s.WatchStart{InitialState: true, Semantic: k8s.MostRecent, EndBookmark: true}},
		{o: k8s.WatchOptions{ResourceVersion: "9", SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan", AllowWatchBookmarks: true},
			want: k8s.WatchStart{InitialState: true, Semantic: k8s.NotOlderThan, From: 9, EndBookmark: true}},
		{o: k8s.WatchOptions{ResourceVersion: "9", SendInitialEvents: &no, ResourceVersionMatch: "NotOlderThan"},
			want: k8s.WatchStart{Semantic: k8s.Exact, From: 9}},
		{o: k8s.WatchOptions{SendInitialEvents: &yes}, err: true},
		{o: k8s.WatchOptions{ResourceVersionMatch: "NotOlderThan"}, err: true},
	} {
		got, err := k8s.WatchSemantic(tc.o)
		if tc.err {
			require.ErrorIs(t, err, k8s.ErrInvalid, "%+v", tc.o)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%+v", tc.o)
	}
}

// steps applies reqs to a fresh store, each of which must succeed.
func steps(t *testing.T, reqs ...kv.Request) kv.State {
	t.Helper()
	var s kv.State
	for _, r := range reqs {
		var resp kv.Response
		s, resp = kv.Step(s, r)
		require.NoError(t, resp.Err)
	}
	return s
}

// store builds a history: a (rev 2), b (3), a updated (4), c (5), b deleted (6), compacted at 4.
func store(t *testing.T) (k8s.History, kv.State) {
	s := steps(t,
		kv.Request{Put: &kv.PutRequest{Key: prefix + "a", Value: "a1"}},
		kv.Request{Put: &kv.PutRequest{Key: prefix + "b", Value: "b1"}},
		kv.Request{Put: &kv.PutRequest{Key: prefix + "a", Value: "a2"}},
		kv.Request{Put: &kv.PutRequest{Key: prefix + "c", Value: "c1"}},
		kv.Request{Delete: &kv.DeleteRequest{Key: prefix + "b"}},
		kv.Request{Compact: &kv.CompactRequest{Revision: 4}},
	)
	h, err := k8s.NewHistory(s.History())
	require.NoError(t, err)
	return h, s
}

func objs(h k8s.History, rev int64) []k8s.Object { return h.Objects(prefix, rev) }

func props(vs []spec.Violation) []spec.Property {
	var ps []spec.Property
	for _, v := range vs {
		if !slices.Contains(ps, v.Property) {
			ps = append(ps, v.Property)
		}
	}
	return ps
}

// SPEC §4.1 ListResourceVersion, §4.2 ListSnapshot, §4.5 Expired.
func TestCheckList(t *testing.T) {
	h, _ := store(t)
	ok := func(rv int64) k8s.ListResult { return k8s.ListResult{ResourceVersion: rv, Items: objs(h, rv)} }
	gone := k8s.ListResult{Status: &k8s.Status{Code: k8s.StatusGone, Reason: "Expired"}}
	for _, tc := range []struct {
		name string
		call k8s.ListCall
		want []spec.Property
	}{
		{"consistent", k8s.ListCall{Before: 6, After: 6, Result: ok(6)}, nil},
		{"consistent but stale", k8s.ListCall{Before: 6, After: 6, Result: ok(5)}, []spec.Property{spec.ListResourceVersion}},
		{"any may be stale", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "0"}, Before: 6, After: 6, Result: ok(4)}, nil},
		{"from the future", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "0"}, Before: 6, After: 6, Result: ok(7)}, []spec.Property{spec.ListResourceVersion}},
		{"not older than", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "5"}, Before: 6, After: 6, Result: ok(6)}, nil},
		{"older than asked", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "5"}, Before: 6, After: 6, Result: ok(4)}, []spec.Property{spec.ListResourceVersion}},
		{"exact", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "5", ResourceVersionMatch: "Exact"}, Before: 6, After: 6, Result: ok(5)}, nil},
		{"not exact", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "5", ResourceVersionMatch: "Exact"}, Before: 6, After: 6, Result: ok(6)}, []spec.Property{spec.ListResourceVersion}},
		{"wrong items", k8s.ListCall{Before: 6, After: 6, Result: k8s.ListResult{ResourceVersion: 6, Items: objs(h, 3)}}, []spec.Property{spec.ListSnapshot}},
		{"exact of compacted history is gone", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "3", ResourceVersionMatch: "Exact"}, Before: 6, After: 6, Result: gone}, nil},
		// A cache that still holds a snapshot of a compacted revision may
		// serve it, exactly (docs/FINDINGS.md cacher-1).
		{"exact of compacted history served from a snapshot", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "3", ResourceVersionMatch: "Exact"}, Before: 6, After: 6, Result: ok(3)}, nil},
		{"exact of compacted history served wrong", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "3", ResourceVersionMatch: "Exact"}, Before: 6, After: 6,
			Result: k8s.ListResult{ResourceVersion: 3, Items: objs(h, 3)[:1]}}, []spec.Property{spec.ListSnapshot}},
		{"gone without compaction", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "5", ResourceVersionMatch: "Exact"}, Before: 6, After: 6, Result: gone}, []spec.Property{spec.Expired}},
		{"consistent list is never gone", k8s.ListCall{Before: 6, After: 6, Result: gone}, []spec.Property{spec.Expired}},
		{"invalid options answered 400", k8s.ListCall{Options: k8s.ListOptions{ResourceVersionMatch: "Exact"}, Result: k8s.ListResult{Status: &k8s.Status{Code: k8s.StatusBadRequest}}}, nil},
		// The apiserver's REST layer answers what ValidateListOptions refuses with 422 Invalid.
		{"invalid options answered 422", k8s.ListCall{Options: k8s.ListOptions{ResourceVersionMatch: "Exact"}, Result: k8s.ListResult{Status: &k8s.Status{Code: k8s.StatusInvalid}}}, nil},
		{"invalid options answered 410", k8s.ListCall{Options: k8s.ListOptions{ResourceVersionMatch: "Exact"}, Result: gone}, []spec.Property{spec.ListResourceVersion}},
		{"invalid options served", k8s.ListCall{Options: k8s.ListOptions{ResourceVersionMatch: "Exact"}, Result: ok(6)}, []spec.Property{spec.ListResourceVersion}},
		{"first page", k8s.ListCall{Options: k8s.ListOptions{Limit: 1}, Before: 6, After: 6,
			Result: k8s.ListResult{ResourceVersion: 6, Items: objs(h, 6)[:1], Continue: prefix + "a"}}, nil},
		{"page too long", k8s.ListCall{Options: k8s.ListOptions{Limit: 1}, Before: 6, After: 6,
			Result: k8s.ListResult{ResourceVersion: 6, Items: objs(h, 3), Continue: "x"}}, []spec.Property{spec.ListSnapshot}},
		{"continuation", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 6, After: 6,
			First: &k8s.ListResult{ResourceVersion: 6}, Result: k8s.ListResult{ResourceVersion: 6, Items: objs(h, 6)[1:]}}, nil},
		{"continuation at another revision", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 6, After: 6,
			First: &k8s.ListResult{ResourceVersion: 5}, Result: k8s.ListResult{ResourceVersion: 6, Items: objs(h, 6)[1:]}}, []spec.Property{spec.ListResourceVersion}},
		// §4.5 judges a 410 by the compaction in force when the list was
		// answered: the recording's, or else the latest compaction at or
		// below the revision committed when it returned (the compaction at
		// 4 was made later than a list that returned at 3).
		{"gone before any compaction", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "2", ResourceVersionMatch: "Exact"}, Before: 3, After: 6, CompactRevision: -1, Result: gone}, []spec.Property{spec.Expired}},
		{"gone before a later compaction", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "2", ResourceVersionMatch: "Exact"}, Before: 3, After: 3, Result: gone}, []spec.Property{spec.Expired}},
		{"gone after a compaction not recorded", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "2", ResourceVersionMatch: "Exact"}, Before: 5, After: 5, Result: gone}, nil},
		// A page's continue token starts the next page right after its last item.
		{"continue token skips an object", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "5", Limit: 1}, Before: 6, After: 6,
			Result: k8s.ListResult{ResourceVersion: 5, Items: objs(h, 5)[:1], Continue: prefix + "b"}}, []spec.Property{spec.ListSnapshot}},
		{"continue token repeats an object", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "5", Limit: 2}, Before: 6, After: 6,
			Result: k8s.ListResult{ResourceVersion: 5, Items: objs(h, 5)[:2], Continue: prefix + "a"}}, []spec.Property{spec.ListSnapshot}},
		// The inconsistent continuation (SPEC §4.5): a 410 to a continuation
		// of compacted history may hand out a token that continues from the
		// same key at the latest revision.
		{"410 with the inconsistent continuation", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 6, After: 6,
			First: &k8s.ListResult{ResourceVersion: 3}, Result: goneWith(prefix + "a")}, nil},
		{"410 with a token from another key", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 6, After: 6,
			First: &k8s.ListResult{ResourceVersion: 3}, Result: goneWith(prefix + "b")}, []spec.Property{spec.Expired}},
		{"410 to a first page with a token", k8s.ListCall{Options: k8s.ListOptions{ResourceVersion: "3", ResourceVersionMatch: "Exact", Limit: 1}, Before: 6, After: 6,
			Result: goneWith(prefix + "a")}, []spec.Property{spec.Expired}},
		{"inconsistent continuation", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 6, After: 6,
			First: ptr(goneWith(prefix + "a")), Result: k8s.ListResult{ResourceVersion: 6, Items: objs(h, 6)[1:]}}, nil},
		{"inconsistent continuation at an old revision", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 6, After: 6,
			First: ptr(goneWith(prefix + "a")), Result: k8s.ListResult{ResourceVersion: 5, Items: objs(h, 5)[1:]}}, []spec.Property{spec.ListResourceVersion}},
		{"inconsistent continuation answered 410", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 6, After: 6,
			First: ptr(goneWith(prefix + "a")), Result: gone}, []spec.Property{spec.Expired}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.call.Prefix = prefix
			require.Equal(t, tc.want, props(k8s.CheckList(h, tc.call)), "%v", k8s.CheckList(h, tc.call))
		})
	}
}

// SPEC §4.5 Expired: a 410 recorded without the compaction in force (one
// ran while the list was answered) is judged by the latest compaction at or
// below the revision committed when it returned — any of the history's
// compactions, not only its last. Regression: the model's history kept only
// the last compaction, so a continuation answered 410 while a compaction
// to 14 ran, in a history later compacted to 24, was called a 410 "which
// needs no compacted history" (an impl/informer TestInformerContract run,
// seed 1274556160059890209, under load).
func TestCheckListGoneByAnEarlierCompaction(t *testing.T) {
	s := steps(t,
		kv.Request{Put: &kv.PutRequest{Key: prefix + "a", Value: "a1"}}, // 2
		kv.Request{Put: &kv.PutRequest{Key: prefix + "b", Value: "b1"}}, // 3
		kv.Request{Put: &kv.PutRequest{Key: prefix + "a", Value: "a2"}}, // 4
		kv.Request{Compact: &kv.CompactRequest{Revision: 3}},
		kv.Request{Put: &kv.PutRequest{Key: prefix + "c", Value: "c1"}}, // 5
		kv.Request{Put: &kv.PutRequest{Key: prefix + "c", Value: "c2"}}, // 6
		kv.Request{Compact: &kv.CompactRequest{Revision: 6}},
	)
	h, err := k8s.NewHistory(s.History())
	require.NoError(t, err)
	gone := k8s.ListResult{Status: &k8s.Status{Code: k8s.StatusGone, Reason: "Expired"}}
	exact := func(rv string) k8s.ListOptions {
		return k8s.ListOptions{ResourceVersion: rv, ResourceVersionMatch: "Exact"}
	}
	for _, tc := range []struct {
		name string
		call k8s.ListCall
		want []spec.Property
	}{
		{"gone below the compaction then in force", k8s.ListCall{Options: exact("2"), Before: 4, After: 4, Result: gone}, nil},
		{"gone above the compaction then in force", k8s.ListCall{Options: exact("4"), Before: 4, After: 4, Result: gone}, []spec.Property{spec.Expired}},
		{"gone below the last compaction", k8s.ListCall{Options: exact("5"), Before: 6, After: 6, Result: gone}, nil},
		{"continuation gone below the compaction then in force", k8s.ListCall{Options: k8s.ListOptions{Continue: prefix + "a", Limit: 1}, Before: 4, After: 5,
			First: &k8s.ListResult{ResourceVersion: 2}, Result: gone}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.call.Prefix = prefix
			require.Equal(t, tc.want, props(k8s.CheckList(h, tc.call)), "%v", k8s.CheckList(h, tc.call))
		})
	}
}

// goneWith is a 410 that hands out the inconsistent continuation after key.
func goneWith(key string) k8s.ListResult {
	return k8s.ListResult{Status: &k8s.Status{Code: k8s.StatusGone, Reason: "Expired", Continue: key}}
}

func added(o k8s.Object) k8s.WatchEvent    { return k8s.WatchEvent{Type: k8s.Added, Object: o} }
func modified(o k8s.Object) k8s.WatchEvent { return k8s.WatchEvent{Type: k8s.Modified, Object: o} }
func bookmark(rv int64, end bool) k8s.WatchEvent {
	return k8s.WatchEvent{Type: k8s.Bookmark, Object: k8s.Object{ResourceVersion: rv}, InitialEventsEnd: end}
}

// SPEC §4.3 WatchStart, §4.4 InitialEventsEnd, §4.5 Expired; regression
// for kubernetes#73845 (the watch cache went back in time).
func TestCheckWatch(t *testing.T) {
	h, s := store(t)
	at := func(key string, rev int64) k8s.Object {
		kv, _ := s.Get(prefix+key, rev)
		return k8s.FromKV(kv)
	}
	deleted := k8s.WatchEvent{Type: k8s.Deleted, Object: k8s.Object{Key: prefix + "b", Value: "b1", ResourceVersion: 6, UID: 3}}
	yes, no := true, false
	watchList := k8s.WatchOptions{SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan", AllowWatchBookmarks: true}
	for _, tc := range []struct {
		name string
		call k8s.WatchCall
		want []spec.Property
	}{
		{"from a revision", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "4"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("c", 5)), deleted}}, nil},
		{"skips a change", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "4"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{deleted}}, []spec.Property{spec.Resumable}},
		{"goes back in time", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "4"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("c", 5)), deleted, added(at("c", 5))}}, []spec.Property{spec.Ordered}},
		{"MODIFIED for a creation", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "4"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{modified(at("c", 5))}}, []spec.Property{spec.IsCreate}},
		{"state at any revision", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 4)), added(at("b", 4)), added(at("c", 5)), deleted}}, nil},
		{"a state that never was", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 2)), added(at("c", 5))}}, []spec.Property{spec.WatchStart}},
		{"watch list", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 6)), added(at("c", 6)), bookmark(6, true)}}, nil},
		{"watch list stale", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 5)), added(at("b", 5)), added(at("c", 5)), bookmark(5, true)}}, []spec.Property{spec.WatchStart}},
		{"watch list unsorted", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("c", 6)), added(at("a", 6)), bookmark(6, true)}}, []spec.Property{spec.InitialEventsEnd}},
		{"watch list without its bookmark", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 6)), added(at("c", 6)), bookmark(6, false)}}, []spec.Property{spec.InitialEventsEnd}},
		// A watch at "" or "0" without sendInitialEvents, which the apiserver
		// defaults to a WatchList (SetListOptionsDefaults, WatchList gate on):
		// judged as the WatchList it became when its stream shows the
		// annotated end bookmark; as the legacy watch otherwise.
		{"defaulted to a watch list", k8s.WatchCall{Options: k8s.WatchOptions{AllowWatchBookmarks: true}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 6)), added(at("c", 6)), bookmark(6, true)}}, nil},
		{"defaulted to a watch list, stale", k8s.WatchCall{Options: k8s.WatchOptions{AllowWatchBookmarks: true}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 5)), added(at("b", 5)), added(at("c", 5)), bookmark(5, true)}}, []spec.Property{spec.WatchStart}},
		{"defaulted at 0 to a watch list", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0", AllowWatchBookmarks: true}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 5)), added(at("b", 5)), added(at("c", 5)), bookmark(5, true), deleted}}, nil},
		{"legacy state watch, annotation without bookmarks asked", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 5)), added(at("b", 5)), added(at("c", 5)), bookmark(5, true)}}, []spec.Property{spec.InitialEventsEnd}},
		// An Any watch answered before the compaction at 4 may open with
		// the state at 2 when the recording knows the compaction in force.
		{"state before a later compaction", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 2, After: 6, CompactRevision: -1,
			Events: []k8s.WatchEvent{added(at("a", 2)), added(at("b", 3))}}, nil},
		{"state before a compaction not known", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 2, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 2)), added(at("b", 3))}}, []spec.Property{spec.WatchStart}},
		{"state below the compaction in force", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6, CompactRevision: 4,
			Events: []k8s.WatchEvent{added(at("a", 2))}}, []spec.Property{spec.WatchStart}},
		// sendInitialEvents=false at "0": no state, starting where the stream starts.
		{"no state from now", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0", SendInitialEvents: &no, ResourceVersionMatch: "NotOlderThan"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("c", 5)), deleted}}, nil},
		{"no state from now, then a gap", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0", SendInitialEvents: &no, ResourceVersionMatch: "NotOlderThan"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{modified(at("a", 4)), deleted}}, []spec.Property{spec.Reliable}},
		{"gone for an old revision", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 6, After: 6,
			Status: &k8s.Status{Code: k8s.StatusGone}}, nil},
		{"gone for the present", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "6"}, Before: 6, After: 6,
			Status: &k8s.Status{Code: k8s.StatusGone}}, []spec.Property{spec.Expired}},
		// A watch cache that relisted at a revision after the watch was sent
		// has nothing before it: "too old resource version" without any
		// compaction (apiserver cacher GetIntervalLocked).
		{"gone after the head moved on", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "4"}, Before: 4, After: 6, CompactRevision: -1,
			Status: &k8s.Status{Code: k8s.StatusGone}}, nil},
		// Judged by when it was answered, not by the run's last compaction
		// (at 4, made later).
		{"gone for the present before a later compaction", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 2, After: 2,
			Status: &k8s.Status{Code: k8s.StatusGone}}, []spec.Property{spec.Expired}},
		{"gone as its first event, for the present", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 2, After: 2,
			Events: []k8s.WatchEvent{{Type: k8s.Error, Status: &k8s.Status{Code: k8s.StatusGone}}}}, []spec.Property{spec.Expired}},
		// A stream that ends inside its initial events delivered part of
		// a state (a legacy watch's initial events have no order; mutation
		// campaign finding K3).
		{"ends inside its initial state", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("c", 5))}}, nil},
		{"ends inside its initial state, with an error", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("c", 5)), {Type: k8s.Error, Status: &k8s.Status{Code: 500}}}}, nil},
		// One that ends before its first event delivered nothing: no
		// fault (the mutation campaign's k8s-truncate-watch cut a real
		// legacy watch of the apiserver cacher recording at 0 and the
		// checker named WatchStart).
		{"ends before its initial state", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6}, nil},
		{"ends before its initial state, consistent", k8s.WatchCall{Before: 6, After: 6}, nil},
		{"ends inside a state that never was", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 2)), added(at("c", 5))}}, []spec.Property{spec.WatchStart}},
		// A watch that silently skips history compacted when it was
		// answered should have been answered 410: §3.11 CompactedCancel.
		{"skips compacted history", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 6, After: 6, CompactRevision: 4,
			Events: []k8s.WatchEvent{added(at("c", 5)), deleted}}, []spec.Property{spec.CompactedCancel}},
		{"skips compacted history, compaction not recorded", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("c", 5)), deleted}}, []spec.Property{spec.CompactedCancel}},
		{"skips history never compacted", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 6, After: 6, CompactRevision: -1,
			Events: []k8s.WatchEvent{added(at("c", 5)), deleted}}, []spec.Property{spec.Resumable}},
		{"compacted history served whole", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "2"}, Before: 6, After: 6, CompactRevision: 4,
			Events: []k8s.WatchEvent{added(at("b", 3)), modified(at("a", 4)), added(at("c", 5)), deleted}}, nil},
		// KEP-3157 step 2b: changes may come between the initial events and
		// the end bookmark, while the state catches up with the revision asked.
		{"watch list catching up", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 4)), added(at("b", 4)), added(at("c", 5)), deleted, bookmark(6, true)}}, nil},
		{"watch list catching up, a creation first", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 3)), added(at("b", 3)), modified(at("a", 4)), added(at("c", 5)), deleted, bookmark(6, true)}}, nil},
		{"watch list catching up skips a change", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 4)), added(at("b", 4)), deleted, bookmark(6, true)}}, []spec.Property{spec.Resumable}},
		{"watch list catching up, bookmark short of the changes", k8s.WatchCall{Options: watchList, Before: 5, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 4)), added(at("b", 4)), added(at("c", 5)), deleted, bookmark(5, true)}}, []spec.Property{spec.InitialEventsEnd}},
		{"watch list catching up to a stale revision", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 4)), added(at("b", 4)), added(at("c", 5)), bookmark(5, true)}}, []spec.Property{spec.WatchStart}},
		{"watch list, a plain bookmark before the end", k8s.WatchCall{Options: watchList, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 4)), added(at("b", 4)), bookmark(4, false), added(at("c", 5)), deleted, bookmark(6, true)}}, []spec.Property{spec.InitialEventsEnd}},
		{"defaulted to a watch list, catching up", k8s.WatchCall{Options: k8s.WatchOptions{AllowWatchBookmarks: true}, Before: 6, After: 6,
			Events: []k8s.WatchEvent{added(at("a", 4)), added(at("b", 4)), added(at("c", 5)), deleted, bookmark(6, true)}}, nil},
		// One object left out of the initial events is §4.3's fault: an
		// ADDED event that is not a creation (b, created at 3) belongs to
		// the state, so the stream is not read as an empty old state
		// followed by changes that skip history (mutation campaign:
		// k8s-watch-drop-initial was named CompactedCancel, IsCreate,
		// Bookmarkable).
		{"watch list missing an initial object", k8s.WatchCall{Options: watchList, Before: 5, After: 5,
			Events: []k8s.WatchEvent{added(at("a", 5)), added(at("c", 5)), bookmark(5, true)}}, []spec.Property{spec.WatchStart}},
		{"state missing an initial object", k8s.WatchCall{Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 5, After: 5, CompactRevision: -1,
			Events: []k8s.WatchEvent{added(at("a", 5)), added(at("c", 5)), bookmark(5, false)}}, []spec.Property{spec.WatchStart}},
		// Left out of a state that really was, one object is a creation
		// the stream skipped: the state at 4, then the bookmark at 5.
		{"watch list missing its newest object", k8s.WatchCall{Options: watchList, Before: 5, After: 5,
			Events: []k8s.WatchEvent{added(at("a", 5)), added(at("b", 5)), bookmark(5, true)}}, []spec.Property{spec.Bookmarkable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.call.Prefix = prefix
			require.Equal(t, tc.want, props(k8s.CheckWatch(h, tc.call)), "%v", k8s.CheckWatch(h, tc.call))
		})
	}
}

// SPEC §4.4 InitialEventsEnd: a WatchList whose state is caught up by
// the creation of a key that sorts before the state's last one is legal —
// the creation is a change before the end bookmark — although read as the
// state the same ADDED events are out of key order. (Found by the informer
// adversary, adversary/listwatch, seed 2: the checker named it
// InitialEventsEnd.) Out of order with no such reading, it is not.
func TestWatchListCatchUpCreationSortsFirst(t *testing.T) {
	var s kv.State
	for _, r := range []kv.Request{
		{Put: &kv.PutRequest{Key: prefix + "b", Value: "b1"}}, // 2
		{Put: &kv.PutRequest{Key: prefix + "a", Value: "a1"}}, // 3: sorts before b
		{Put: &kv.PutRequest{Key: prefix + "b", Value: "b2"}}, // 4
	} {
		var resp kv.Response
		s, resp = kv.Step(s, r)
		require.NoError(t, resp.Err)
	}
	h, err := k8s.NewHistory(s.History())
	require.NoError(t, err)
	at := func(key string, rev int64) k8s.Object {
		kv, _ := s.Get(prefix+key, rev)
		return k8s.FromKV(kv)
	}
	yes := true
	watchList := k8s.WatchOptions{SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan", AllowWatchBookmarks: true}
	for _, tc := range []struct {
		name   string
		events []k8s.WatchEvent
		want   []spec.Property
	}{
		{"the state at 2, then the creation of a", []k8s.WatchEvent{added(at("b", 2)), added(at("a", 3)), bookmark(3, true)}, nil},
		{"the state at 4 out of order", []k8s.WatchEvent{added(at("b", 4)), added(at("a", 4)), bookmark(4, true)}, []spec.Property{spec.InitialEventsEnd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := k8s.WatchCall{Prefix: prefix, Options: watchList, Before: 3, After: 4, CompactRevision: -1, Events: tc.events}
			require.Equal(t, tc.want, props(k8s.CheckWatch(h, c)), "%v", k8s.CheckWatch(h, c))
		})
	}
	// Creations that, read as changes, would go back in revision order
	// are not a better reading: z at 2, then c at 4 before a at 3 is a
	// state out of order (mutation campaign, k8s-watch-unsorted-initial).
	var s2 kv.State
	for _, key := range []string{"z", "a", "c"} { // 2, 3, 4
		var resp kv.Response
		s2, resp = kv.Step(s2, kv.Request{Put: &kv.PutRequest{Key: prefix + key, Value: key + "1"}})
		require.NoError(t, resp.Err)
	}
	h2, err := k8s.NewHistory(s2.History())
	require.NoError(t, err)
	at2 := func(key string, rev int64) k8s.Object {
		kv, _ := s2.Get(prefix+key, rev)
		return k8s.FromKV(kv)
	}
	c := k8s.WatchCall{Prefix: prefix, Options: watchList, Before: 4, After: 4, CompactRevision: -1,
		Events: []k8s.WatchEvent{added(at2("z", 4)), added(at2("c", 4)), added(at2("a", 4)), bookmark(4, true)}}
	require.Equal(t, []spec.Property{spec.InitialEventsEnd}, props(k8s.CheckWatch(h2, c)), "%v", k8s.CheckWatch(h2, c))
}

// SPEC §4.3 WatchStart: a watch's opening state that recurs later (a key
// created and deleted after it) is read at the revision the rest of the
// stream follows, not at the later one.
func TestCheckWatchRecurringState(t *testing.T) {
	var s kv.State
	for _, r := range []kv.Request{
		{Put: &kv.PutRequest{Key: prefix + "a", Value: "a1"}},
		{Put: &kv.PutRequest{Key: prefix + "b", Value: "b1"}},
		{Delete: &kv.DeleteRequest{Key: prefix + "b"}},
	} {
		s, _ = kv.Step(s, r)
	}
	h, err := k8s.NewHistory(s.History())
	require.NoError(t, err)
	a, _ := s.Get(prefix+"a", 2)
	b, _ := s.Get(prefix+"b", 3)
	gone := k8s.FromKV(b)
	gone.ResourceVersion = 4
	call := k8s.WatchCall{Prefix: prefix, Options: k8s.WatchOptions{ResourceVersion: "0", AllowWatchBookmarks: true}, Before: 2, After: 4,
		Events: []k8s.WatchEvent{added(k8s.FromKV(a)), bookmark(2, false), added(k8s.FromKV(b)), {Type: k8s.Deleted, Object: gone}}}
	require.Empty(t, k8s.CheckWatch(h, call))
}

func ptr[T any](v T) *T { return &v }

// validRun is an informer run over store(t): started at revision 6, a first
// list at 6, one handler from the start and one added later, a watch
// delivering nothing, then quiescence.
func validRun(h k8s.History) k8s.Run {
	a, c := objs(h, 6)[0], objs(h, 6)[1]
	run := k8s.Run{Prefix: prefix, Cache: []k8s.Object{a, c},
		Lists: []k8s.ListCall{{Prefix: prefix, Before: 6, After: 6, Result: k8s.ListResult{ResourceVersion: 6, Items: []k8s.Object{a, c}}}}}
	run.Entries = []k8s.Entry{
		{HandlerAdded: ptr(0)},
		{Start: &k8s.StartEntry{Revision: 6}},
		{List: ptr(0)},
		{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnAdd, New: &a, InInitialList: true}},
		{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnAdd, New: &c, InInitialList: true}},
		{HasSynced: ptr(0)},
		{SyncedRV: ptr(int64(6))},
		{HandlerAdded: ptr(1)},
		{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnAdd, New: &a, InInitialList: true}},
		{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnAdd, New: &c, InInitialList: true}},
		{HasSynced: ptr(1)},
		{Quiesced: true},
	}
	return run
}

// SPEC §5.7 SameRVUpdate: a resync's snapshot of the cache is taken after
// its mark ("Forcing resync") and before the next, so the last mark may
// explain a same-resourceVersion update of a state the informer received
// after it — once per handler and key. Regression: client-go v0.37.2 under
// load delivered states received after the mark (traces/corpus
// informer-client-go-0.37.2-resync-snapshot-after-mark.ndjson).
func TestCheckInformerResyncSnapshotAfterMark(t *testing.T) {
	h, _ := store(t)
	a := objs(h, 6)[0]
	same := func(handler int) k8s.Entry {
		return k8s.Entry{Notification: &k8s.Notification{Handler: handler, Type: k8s.OnUpdate, Old: &a, New: &a}}
	}
	// The mark before the list that brought a's state (entry 2).
	marked := validRun(h)
	marked.Entries = slices.Insert(slices.Clone(marked.Entries), 2, k8s.Entry{Resync: true})
	at := len(marked.Entries) - 1 // before quiescence
	with := func(es ...k8s.Entry) k8s.Run {
		r := marked
		r.Entries = slices.Insert(slices.Clone(marked.Entries), at, es...)
		return r
	}
	require.Empty(t, k8s.CheckInformer(h, with(same(0))), "the resync's snapshot may follow the list")
	require.Empty(t, k8s.CheckInformer(h, with(same(0), same(1))), "each handler gets the key once")
	require.Equal(t, []spec.Property{spec.SameRVUpdate}, props(k8s.CheckInformer(h, with(same(0), same(0)))),
		"a resync delivers a key once to a handler")
	unmarked := validRun(h)
	unmarked.Entries = slices.Insert(slices.Clone(unmarked.Entries), len(unmarked.Entries)-1, same(0))
	require.Equal(t, []spec.Property{spec.SameRVUpdate}, props(k8s.CheckInformer(h, unmarked)), "no resync at all")
}

// SPEC §5: a valid informer run passes; each mutated run is rejected naming
// exactly its rule.
func TestCheckInformer(t *testing.T) {
	h, s := store(t)
	h0 := h
	require.Empty(t, k8s.CheckInformer(h, validRun(h)))
	b3 := func() k8s.Object { kv, _ := s.Get(prefix+"b", 3); return k8s.FromKV(kv) }()
	a2 := func() k8s.Object { kv, _ := s.Get(prefix+"a", 2); return k8s.FromKV(kv) }()
	insert := func(run k8s.Run, at int, es ...k8s.Entry) k8s.Run {
		run.Entries = slices.Insert(slices.Clone(run.Entries), at, es...)
		return run
	}
	for _, tc := range []struct {
		name string
		run  func(k8s.Run) k8s.Run
		want spec.Property
	}{
		{"a state that never was", func(r k8s.Run) k8s.Run {
			bad := k8s.Object{Key: prefix + "a", Value: "forged", ResourceVersion: 4, UID: 2}
			return insert(r, 11, k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &bad, New: &bad}})
		}, spec.InformerSubsequence},
		{"back in time", func(r k8s.Run) k8s.Run {
			return insert(r, 11, k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, New: &a2}})
		}, spec.InformerSubsequence},
		{"missed add (kubernetes#83810)", func(r k8s.Run) k8s.Run {
			r.Cache = r.Cache[:1]
			r.Entries = slices.Delete(slices.Clone(r.Entries), 4, 5)
			r.Entries = slices.Delete(r.Entries, 8, 9)
			return r
		}, spec.InformerConverges},
		{"no tombstone on relist (kubernetes#115620)", func(r k8s.Run) k8s.Run {
			r.Lists = append(slices.Clone(r.Lists), k8s.ListCall{Prefix: prefix, Before: 6, After: 6, Result: r.Lists[0].Result})
			return insert(r, 11,
				k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnAdd, New: &b3}},
				k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnAdd, New: &b3}},
				k8s.Entry{List: ptr(1)})
		}, spec.RelistDeletes},
		{"late handler misses the cache", func(r k8s.Run) k8s.Run {
			r.Entries = slices.Delete(slices.Clone(r.Entries), 9, 10)
			return r
		}, spec.LateHandler},
		{"synced before its initial adds", func(r k8s.Run) k8s.Run {
			e := slices.Clone(r.Entries)
			e[4], e[5] = e[5], e[4]
			r.Entries = e
			return r
		}, spec.HasSyncedDelivered},
		{"resourceVersion from a synthetic ADDED (kubernetes#136583)", func(r k8s.Run) k8s.Run {
			r.Watches = []k8s.WatchCall{{Prefix: prefix, Options: k8s.WatchOptions{ResourceVersion: "0"}, Before: 6, After: 6,
				Events: []k8s.WatchEvent{added(objs(h, 5)[0]), added(objs(h, 5)[1]), added(objs(h, 5)[2])}}}
			return insert(r, 7, k8s.Entry{SyncedRV: ptr(int64(3))})
		}, spec.SyncedRVMonotonic},
		{"same resourceVersion without resync", func(r k8s.Run) k8s.Run {
			a := objs(h, 6)[0]
			return insert(r, 11, k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &a, New: &a}})
		}, spec.SameRVUpdate},
		{"stale first list (kubernetes#59848)", func(r k8s.Run) k8s.Run {
			r.Entries = slices.Clone(r.Entries)
			r.Entries[1] = k8s.Entry{Start: &k8s.StartEntry{Revision: 7}}
			return r
		}, spec.FreshStart},
		{"first list from an old resourceVersion", func(r k8s.Run) k8s.Run {
			r.Lists = slices.Clone(r.Lists)
			r.Lists[0].Options.ResourceVersion = "5"
			r.Entries = slices.Clone(r.Entries)
			r.Entries[1] = k8s.Entry{Start: &k8s.StartEntry{Revision: 7}}
			return r
		}, spec.FreshStart},
		// §5.1: OnUpdate's old object is the state the handler was last told of.
		{"fabricated old object", func(r k8s.Run) k8s.Run {
			a, bad := objs(h, 6)[0], objs(h, 6)[0]
			bad.Value = "forged"
			return insert(r, 11, k8s.Entry{Resync: true}, k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &bad, New: &a}})
		}, spec.InformerSubsequence},
		{"stale old object", func(r k8s.Run) k8s.Run {
			a := objs(h, 6)[0]
			return insert(r, 11, k8s.Entry{Resync: true}, k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &a2, New: &a}})
		}, spec.InformerSubsequence},
		{"update of a key never added", func(r k8s.Run) k8s.Run {
			return insert(r, 11, k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &b3, New: &b3}})
		}, spec.InformerSubsequence},
		// §5.1: a handler told a key was deleted is not told so again before
		// the key is added back (client-go v0.37.2 reconcileReplacement: "if
		// we've already got the item marked as deleted, no need to add
		// another delete"). The run stops before quiescence: c stays stored.
		{"second OnDelete", func(r k8s.Run) k8s.Run {
			c := objs(h, 6)[1]
			r.Entries = slices.Clone(r.Entries[:11])
			return insert(r, 11,
				k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnDelete, Old: &c, Tombstone: true}},
				k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnDelete, Old: &c, Tombstone: true}},
				k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnDelete, Old: &c, Tombstone: true}})
		}, spec.InformerSubsequence},
		// A late handler's gap that its own notifications show is named by
		// §5.1 alone, not by §5.4 as well (the mutation campaign's
		// informer-late-handler-gap: a dropped OnAdd of a re-created key).
		{"late handler's second OnDelete", func(r k8s.Run) k8s.Run {
			c := objs(h, 6)[1]
			r.Entries = slices.Clone(r.Entries[:11])
			return insert(r, 11,
				k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnDelete, Old: &c, Tombstone: true}},
				k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnDelete, Old: &c, Tombstone: true}},
				k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnDelete, Old: &c, Tombstone: true}})
		}, spec.InformerSubsequence},
		// §5.4: with resync on, handlers get different syncs, but the same changes.
		{"late handler gets other changes, with resync", func(r k8s.Run) k8s.Run {
			a, c := objs(h, 6)[0], objs(h, 6)[1]
			return insert(r, 11, k8s.Entry{Resync: true},
				k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &a, New: &a}},
				k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnDelete, Old: &c, Tombstone: true}},
				k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnAdd, New: &c}})
		}, spec.LateHandler},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := k8s.CheckInformer(h, tc.run(validRun(h)))
			require.Equal(t, []spec.Property{tc.want}, props(vs), "%v", vs)
		})
	}
	// A resync makes a same-resourceVersion update legal.
	a := objs(h, 6)[0]
	run := validRun(h)
	run.Entries = slices.Insert(run.Entries, 11, k8s.Entry{Resync: true},
		k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &a, New: &a}},
		k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnUpdate, Old: &a, New: &a}})
	require.Empty(t, k8s.CheckInformer(h, run))

	// With resync on, a sync goes only to the handlers whose resync is due
	// (client-go, kubernetes#87957): the late handler's stream differs from
	// the first's by syncs alone, which §5.4 does not compare.
	for _, h := range []int{0, 1} {
		run = validRun(h0)
		run.Entries = slices.Insert(run.Entries, 11, k8s.Entry{Resync: true},
			k8s.Entry{Notification: &k8s.Notification{Handler: h, Type: k8s.OnUpdate, Old: &a, New: &a}})
		require.Empty(t, k8s.CheckInformer(h0, run), "only handler %d resynced", h)
	}

	// A WatchList's state is a relist (client-go's Reflector replaces its
	// store with it): it makes a same-resourceVersion update legal (§5.7),
	// and it is the informer's first sync when it comes first (§5.8).
	yes := true
	c := objs(h, 6)[1]
	watchList := func(rev int64, items ...k8s.Object) k8s.WatchCall {
		w := k8s.WatchCall{Prefix: prefix, Before: 6, After: 6,
			Options: k8s.WatchOptions{SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan", AllowWatchBookmarks: true}}
		for _, o := range items {
			w.Events = append(w.Events, added(o))
		}
		w.Events = append(w.Events, bookmark(rev, true))
		return w
	}
	relisted := func(run k8s.Run, at int) k8s.Run {
		run.Watches = []k8s.WatchCall{watchList(6, a, c)}
		var es []k8s.Entry
		for _, e := range run.Watches[0].Events {
			es = append(es, k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: 0, Event: e}})
		}
		run.Entries = slices.Insert(slices.Clone(run.Entries), at, es...)
		return run
	}
	run = relisted(validRun(h), 11)
	run.Entries = slices.Insert(run.Entries, 14,
		k8s.Entry{Notification: &k8s.Notification{Handler: 0, Type: k8s.OnUpdate, Old: &a, New: &a}},
		k8s.Entry{Notification: &k8s.Notification{Handler: 1, Type: k8s.OnUpdate, Old: &a, New: &a}})
	require.Empty(t, k8s.CheckInformer(h, run))
	run = validRun(h)
	run.Lists, run.Entries = nil, slices.Delete(slices.Clone(run.Entries), 2, 3)
	run = relisted(run, 2)
	run.Entries[1] = k8s.Entry{Start: &k8s.StartEntry{Revision: 7}}
	vs := k8s.CheckInformer(h, run)
	require.Equal(t, []spec.Property{spec.FreshStart}, props(vs), "%v", vs)
}

// SPEC §5.8 FreshStart: a first list at resourceVersion "0" may be served by
// a stale cache (the API allows it; client-go's first list is at "0" when
// WatchList is off, before 1.35 and after any WatchList failure;
// kubernetes#59848 is open): not a violation by default, a violation under
// the StrictFreshStart expectation. A first list at an old resourceVersion N
// is the informer's own choice, and a violation either way.
func TestFreshStart(t *testing.T) {
	h, _ := store(t)
	stale := func(rv string, resultRV int64) k8s.Run {
		run := validRun(h)
		run.Lists = slices.Clone(run.Lists)
		run.Lists[0].Options.ResourceVersion = rv
		run.Lists[0].Result = k8s.ListResult{ResourceVersion: resultRV, Items: objs(h, resultRV)}
		run.Entries = slices.Clone(run.Entries)
		run.Entries[1] = k8s.Entry{Start: &k8s.StartEntry{Revision: 7}}
		run.Entries[6] = k8s.Entry{SyncedRV: ptr(resultRV)}
		return run
	}
	strict := k8s.Expectations{StrictFreshStart: true}
	for _, tc := range []struct {
		name           string
		run            k8s.Run
		byDefault, all []spec.Property
	}{
		{"fresh", validRun(h), nil, nil},
		{"at 0, stale", stale("0", 5), nil, []spec.Property{spec.FreshStart}},
		{"at an old resourceVersion", stale("5", 5), []spec.Property{spec.FreshStart}, []spec.Property{spec.FreshStart}},
		// A consistent list older than its Before is the server's fault,
		// named once: §4.1.
		{"consistent, served stale", func() k8s.Run {
			r := stale("", 5)
			r.Lists[0].Before, r.Lists[0].After = 6, 6
			return r
		}(), []spec.Property{spec.ListResourceVersion}, []spec.Property{spec.ListResourceVersion}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := k8s.CheckInformer(h, tc.run)
			require.Equal(t, tc.byDefault, props(vs), "default: %v", vs)
			vs = k8s.CheckInformerWith(h, tc.run, strict)
			require.Equal(t, tc.all, props(vs), "StrictFreshStart: %v", vs)
		})
	}
}
