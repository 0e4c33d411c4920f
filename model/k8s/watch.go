package k8s

import (
	"fmt"
	"sort"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
)

// EventType is the type of a Kubernetes watch event.
type EventType string

const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// InitialEventsEndAnnotation marks the bookmark that ends a WatchList's
// initial events.
const InitialEventsEndAnnotation = "k8s.io/initial-events-end"

// WatchEvent is one event of a Kubernetes watch stream. A DELETED event
// carries the object's last state with the resourceVersion of the deletion;
// a BOOKMARK only a resourceVersion.
type WatchEvent struct {
	Type   EventType
	Object Object
	// InitialEventsEnd is set on a bookmark annotated k8s.io/initial-events-end.
	InitialEventsEnd bool
	// Status is the error of an ERROR event.
	Status *Status
}

// WatchCall is one watch request and the events it delivered, in order.
type WatchCall struct {
	Prefix  string
	Options WatchOptions
	// Before and After bound the revision committed when the watch was sent
	// and when its last event arrived.
	Before, After int64
	// CompactRevision is the store's compaction revision when the watch was
	// answered: −1 when it was never compacted, 0 when unknown (then the
	// history's latest compaction bounds the state an Any watch may open
	// with, which is stricter).
	CompactRevision int64
	// Status is set when the watch was refused outright.
	Status *Status
	Events []WatchEvent
}

// CheckWatch decides the Kubernetes rules of one watch (docs/SPEC.md §4.3
// WatchStart, §4.4 InitialEventsEnd, §4.5 Expired) and then checks what
// follows the initial state with the watch properties of §3, the events
// read as etcd events (ADDED and MODIFIED as PUT, DELETED as DELETE,
// BOOKMARK as a progress notification). Skipped history below the
// compaction in force when the watch was answered is §3.11
// CompactedCancel: such a watch should have been answered 410.
func CheckWatch(h History, c WatchCall) []spec.Violation {
	var out []spec.Violation
	fail := func(p spec.Property, revs []int64, keys []string, format string, args ...any) {
		if len(keys) == 0 {
			keys = []string{c.Prefix}
		}
		out = append(out, spec.Violation{Property: p, Revisions: revs, Keys: keys, Message: fmt.Sprintf(format, args...)})
	}
	start, err := WatchSemantic(c.Options)
	if err != nil {
		if !rejected(c.Status) && !(len(c.Events) > 0 && rejected(c.Events[0].Status)) {
			fail(spec.WatchStart, nil, nil, "the watch options are invalid (%v) but the server did not reject them (400 or 422)", err)
		}
		return out
	}
	if defaulted(c, start) {
		// The apiserver defaults sendInitialEvents=true and
		// resourceVersionMatch=NotOlderThan on a watch at resourceVersion
		// "" or "0" that sets neither, when its WatchList feature is on
		// (the default since 1.34: apimachinery SetListOptionsDefaults);
		// the stream then ends its initial events with the annotated
		// bookmark. Judge such a watch as the request it was defaulted to.
		o := c.Options
		t := true
		o.SendInitialEvents, o.ResourceVersionMatch = &t, "NotOlderThan"
		start, _ = WatchSemantic(o)
	}
	refused := c.Status
	if refused == nil && len(c.Events) > 0 && c.Events[0].Type == Error {
		refused = c.Events[0].Status
	}
	if refused != nil {
		// A watch from a revision older than the head when it was answered
		// may expire: the server's window is its own (a watch cache keeps
		// a window of events, and after it relists it has nothing before
		// the relist — apiserver cacher GetIntervalLocked — without any
		// compaction). A watch from the head or the future may not.
		answered := c.After
		if answered == 0 {
			answered = h.head() // when it was answered is not recorded
		}
		expired := start.Semantic == Exact && start.From < max(answered, c.Before)
		if refused.Code == StatusGone && !expired {
			fail(spec.Expired, []int64{start.From, answered}, nil, "410 Gone for a %s watch from revision %d, which is not older than revision %d, the highest committed when it was answered",
				start.Semantic, start.From, answered)
		}
		return out
	}
	events := c.Events
	from := start.From
	end := -1 // the index in events of the bookmark that ended the initial events
	if start.InitialState {
		var ok bool
		from, events, end, ok = checkInitialState(h, c, start, fail)
		if !ok {
			return out
		}
	}
	// The rest is a watch of the prefix from revision from+1, over the
	// history with the compaction in force when the watch was answered.
	full := h.withCompaction(h.compactionInForce(c.CompactRevision, c.After))
	req := watch.Request{Key: c.Prefix, RangeEnd: kv.PrefixEnd(c.Prefix), StartRevision: from + 1}
	if !start.InitialState && start.Semantic == Any {
		// sendInitialEvents=false at resourceVersion "" or "0": no state
		// and no revision; the watch starts "from ~now" (the cacher: at
		// its current revision), where its stream starts.
		req.StartRevision = 0
	}
	v := watch.NewValidator(full, req)
	for i, e := range events {
		var r watch.Response
		switch e.Type {
		case Error:
			return out // the stream ends (a later 410 is the server's right)
		case Bookmark:
			if e.InitialEventsEnd && i != end {
				fail(spec.InitialEventsEnd, []int64{e.Object.ResourceVersion}, nil, "a bookmark annotated %s outside the initial events", InitialEventsEndAnnotation)
				continue
			}
			r = watch.Response{Revision: e.Object.ResourceVersion}
		case Added, Modified:
			if created := e.Object.UID == e.Object.ResourceVersion; created != (e.Type == Added) {
				fail(spec.IsCreate, []int64{e.Object.ResourceVersion}, []string{e.Object.Key}, "%s event for %q at resourceVersion %d of an object created at %d",
					e.Type, e.Object.Key, e.Object.ResourceVersion, e.Object.UID)
			}
			r = watch.Response{Revision: e.Object.ResourceVersion, Events: []kv.Event{{Type: kv.Put, KV: asKV(full, e.Object)}}}
		case Deleted:
			r = watch.Response{Revision: e.Object.ResourceVersion, Events: []kv.Event{{Type: kv.Delete, KV: kv.KeyValue{Key: e.Object.Key, ModRevision: e.Object.ResourceVersion}}}}
		default:
			fail(spec.WatchStart, nil, []string{e.Object.Key}, "event of unknown type %q", e.Type)
			continue
		}
		out = append(out, v.Observe(r)...)
	}
	return out
}

// isChange reports whether e is a change of an object (not a bookmark or an error).
func isChange(e WatchEvent) bool { return e.Type == Added || e.Type == Modified || e.Type == Deleted }

// defaulted reports whether the server defaulted sendInitialEvents on
// watch c (see CheckWatch): a watch at resourceVersion "" or "0" that set
// neither sendInitialEvents nor resourceVersionMatch, with bookmarks, whose
// initial ADDED events (and any changes after them, §4.4) end with a
// bookmark annotated k8s.io/initial-events-end.
func defaulted(c WatchCall, start WatchStart) bool {
	if !start.InitialState || c.Options.SendInitialEvents != nil || !c.Options.AllowWatchBookmarks {
		return false
	}
	for _, e := range c.Events {
		if !isChange(e) {
			return e.Type == Bookmark && e.InitialEventsEnd
		}
	}
	return false
}

// asKV turns an object back into the key-value the store committed, filling
// the Version (which Kubernetes objects do not carry) from the history.
func asKV(h *kv.History, o Object) kv.KeyValue {
	k := kv.KeyValue{Key: o.Key, Value: o.Value, ModRevision: o.ResourceVersion, CreateRevision: o.UID}
	if c, ok := h.Commit(o.ResourceVersion); ok {
		for _, e := range c.Events {
			if e.KV.Key == o.Key {
				k.Version = e.KV.Version
			}
		}
	}
	return k
}

// checkInitialState checks the synthetic ADDED events a watch opens with.
// It returns the revision of their state, the events after them, and the
// index among those of the bookmark that ended the initial events (−1 when
// there is none), or false when there is nothing more to judge.
func checkInitialState(h History, c WatchCall, start WatchStart,
	fail func(spec.Property, []int64, []string, string, ...any)) (int64, []WatchEvent, int, bool) {
	n := 0
	for n < len(c.Events) && c.Events[n].Type == Added {
		n++
	}
	// The state is the leading ADDED events up to some k ≤ n; those after
	// k are changes, and an ADDED change is a creation (§4.3, §3.9). So an
	// ADDED event that is not a creation belongs to the state: k is at
	// least past the last such event. (Without this bound a stream missing
	// one object of its state reads as a state from long ago followed by
	// changes that skip history, and its one fault gets §3's names.)
	lowest := n
	for lowest > 0 && c.Events[lowest-1].Object.UID == c.Events[lowest-1].Object.ResourceVersion {
		lowest--
	}
	base := h.commits().Base()
	if start.EndBookmark {
		// ADDED… (a state at some revision S₀), then maybe changes after
		// S₀ (KEP-3157 step 2b: the cache catching up), then the bookmark
		// annotated k8s.io/initial-events-end at the revision S the state
		// is synced to.
		m := n
		for m < len(c.Events) && isChange(c.Events[m]) {
			m++
		}
		switch {
		case m == len(c.Events):
			return 0, nil, -1, false // the end bookmark has not come (yet): nothing to judge
		case c.Events[m].Type != Bookmark || !c.Events[m].InitialEventsEnd:
			fail(spec.InitialEventsEnd, nil, []string{c.Events[m].Object.Key}, "the initial events end with a %s event, not a bookmark annotated %s", c.Events[m].Type, InitialEventsEndAnnotation)
			return 0, nil, -1, false
		}
		rev := c.Events[m].Object.ResourceVersion
		for _, e := range c.Events[n:m] {
			if e.Object.ResourceVersion > rev {
				fail(spec.InitialEventsEnd, []int64{rev, e.Object.ResourceVersion}, []string{e.Object.Key}, "the bookmark that ends the initial events is at revision %d, below the change at revision %d before it: the state is not synced to its revision", rev, e.Object.ResourceVersion)
				return 0, nil, -1, false
			}
		}
		switch {
		case start.Semantic == MostRecent && rev < c.Before:
			fail(spec.WatchStart, []int64{rev, c.Before}, nil, "a consistent WatchList synced to revision %d, older than revision %d committed before it was sent", rev, c.Before)
		case start.Semantic == NotOlderThan && rev < start.From:
			fail(spec.WatchStart, []int64{rev, start.From}, nil, "a WatchList from resourceVersion %d synced to the older revision %d", start.From, rev)
		case c.After > 0 && rev > c.After:
			fail(spec.WatchStart, []int64{rev, c.After}, nil, "initial events at revision %d, beyond the committed revision %d", rev, c.After)
		}
		// The state: the longest run of leading ADDED events that is the
		// state at a revision S₀ ≤ S below the change after it, leaving as
		// changes only ADDED events that are creations; the events up to
		// the bookmark are then the changes after S₀, which the bookmark (a
		// progress notification at S) says are complete.
		// A reading whose state is sorted by key comes first: leading
		// ADDED events that are creations may be the state or changes after
		// it, and read as the state they may be out of order (a change
		// creating a key that sorts before the state's last one) where
		// read as changes — in revision order, after the state — they are
		// legal.
		for _, sorted := range []bool{true, false} {
			for k := n; k >= lowest; k-- {
				top := rev
				if k < m {
					top = min(top, c.Events[k].Object.ResourceVersion-1)
				}
				initial := c.Events[:k]
				inOrder := sort.SliceIsSorted(initial, func(i, j int) bool { return initial[i].Object.Key < initial[j].Object.Key })
				if sorted && !inOrder {
					continue
				}
				for s0 := top; s0 >= base; s0-- {
					if diffObjects(h.Objects(c.Prefix, s0), sortedObjects(initial)) != "" {
						continue
					}
					if sorted && k < n && !changesAfter(c.Events[k:m], s0) {
						continue // read as changes they would go back: not a better reading
					}
					if !inOrder {
						fail(spec.InitialEventsEnd, []int64{rev}, nil, "the initial events of a WatchList are not sorted by key")
					}
					return s0, c.Events[k:], m - k, true
				}
			}
		}
		fail(spec.WatchStart, []int64{rev}, nil, "the initial events are not the stored objects at revision %d, nor at any revision before it that the changes up to the bookmark continue: %s",
			rev, diffObjects(h.Objects(c.Prefix, rev), sortedObjects(c.Events[:n])))
		return 0, nil, -1, false
	}
	initial := c.Events[:n]
	// Without an end bookmark the state's revision is not stated: find a
	// revision whose state the leading ADDED events are (the longest prefix
	// that is one), within what the semantic allows.
	lo, hi := max(start.From, 1), c.After
	if start.Semantic == MostRecent {
		lo = max(lo, c.Before)
	}
	if start.Semantic == Any {
		// Any revision still available when the watch was answered: not
		// below the compaction then in force.
		lo = max(h.compactionInForce(c.CompactRevision, c.After), base)
	}
	if n == len(c.Events) || c.Events[n].Type == Error {
		// The stream ended inside its initial events: they need only be
		// objects of one revision the semantic allows (a legacy watch's
		// initial events have no order, so any of them may be missing).
		// One that ended before the first delivered nothing, which every
		// stream starts with (§6: delivery may stop at any point).
		if n == 0 {
			return 0, nil, -1, false
		}
		for rev := hi; rev >= lo; rev-- {
			if subsetOf(initial, h.Objects(c.Prefix, rev)) {
				return 0, nil, -1, false // nothing more to judge
			}
		}
	}
	for k := n; k >= lowest; k-- {
		// The state is not newer than what follows it: a bookmark's
		// revision, or the revision before the first change.
		top := hi
		if k < len(c.Events) {
			switch e := c.Events[k]; e.Type {
			case Bookmark:
				top = min(top, e.Object.ResourceVersion)
			case Added, Modified, Deleted:
				top = min(top, e.Object.ResourceVersion-1)
			}
		}
		for rev := top; rev >= lo; rev-- {
			if diffObjects(h.Objects(c.Prefix, rev), sortedObjects(initial[:k])) == "" {
				return rev, c.Events[k:], -1, true
			}
		}
	}
	fail(spec.WatchStart, []int64{lo, hi}, nil, "the %d ADDED events a %s watch opens with are not the objects of any revision from %d to %d", n, start.Semantic, lo, hi)
	return 0, nil, -1, false
}

// changesAfter reports whether evs can be changes after revision s0:
// their resourceVersions are above s0 and never decrease.
func changesAfter(evs []WatchEvent, s0 int64) bool {
	last := s0 + 1
	for _, e := range evs {
		if e.Object.ResourceVersion < last {
			return false
		}
		last = e.Object.ResourceVersion
	}
	return true
}

// subsetOf reports whether every object of evs is one of objs.
func subsetOf(evs []WatchEvent, objs []Object) bool {
	by := make(map[string]Object, len(objs))
	for _, o := range objs {
		by[o.Key] = o
	}
	for _, e := range evs {
		if o, ok := by[e.Object.Key]; !ok || o != e.Object {
			return false
		}
	}
	return true
}

func sortedObjects(evs []WatchEvent) []Object {
	out := make([]Object, len(evs))
	for i, e := range evs {
		out[i] = e.Object
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
