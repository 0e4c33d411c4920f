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
// BOOKMARK as a progress notification).
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
		// A watch from the past may expire (the server's window may be
		// shorter than the store's), and so may one that compaction
		// overtook before it delivered anything; a watch from the present
		// or the future that compaction did not overtake may not.
		expired := start.Semantic == Exact && (start.From < c.Before || start.From+1 < h.oldest())
		if refused.Code == StatusGone && !expired {
			fail(spec.Expired, []int64{start.From, c.Before}, nil, "410 Gone for a %s watch from revision %d, which is not older than the revision %d committed before it was sent, and no compaction overtook it",
				start.Semantic, start.From, c.Before)
		}
		return out
	}
	events := c.Events
	from := start.From
	if start.InitialState {
		var rest []WatchEvent
		var ok bool
		from, rest, ok = checkInitialState(h, c, start, fail)
		if !ok {
			return out
		}
		events = rest
	}
	// The rest is a watch of the prefix from revision from+1.
	full := h.State.History()
	req := watch.Request{Key: c.Prefix, RangeEnd: kv.PrefixEnd(c.Prefix), StartRevision: from + 1}
	if !start.InitialState && start.Semantic == Any {
		// sendInitialEvents=false at resourceVersion "" or "0": no state
		// and no revision; the watch starts "from ~now" (the cacher: at
		// its current revision), where its stream starts.
		req.StartRevision = 0
	}
	v := watch.NewValidator(full, req)
	for _, e := range events {
		var r watch.Response
		switch e.Type {
		case Error:
			return out // the stream ends (a later 410 is the server's right)
		case Bookmark:
			if e.InitialEventsEnd {
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

// defaulted reports whether the server defaulted sendInitialEvents on
// watch c (see CheckWatch): a watch at resourceVersion "" or "0" that set
// neither sendInitialEvents nor resourceVersionMatch, with bookmarks, whose
// initial ADDED events end with a bookmark annotated k8s.io/initial-events-end.
func defaulted(c WatchCall, start WatchStart) bool {
	if !start.InitialState || c.Options.SendInitialEvents != nil || !c.Options.AllowWatchBookmarks {
		return false
	}
	for _, e := range c.Events {
		if e.Type != Added {
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

// checkInitialState checks the synthetic ADDED events a watch opens with and
// returns the revision of their state and the events after them.
func checkInitialState(h History, c WatchCall, start WatchStart,
	fail func(spec.Property, []int64, []string, string, ...any)) (int64, []WatchEvent, bool) {
	n := 0
	for n < len(c.Events) && c.Events[n].Type == Added {
		n++
	}
	initial := c.Events[:n]
	if start.EndBookmark {
		switch {
		case n == len(c.Events):
			return 0, nil, false // the end bookmark has not come (yet): nothing to judge
		case c.Events[n].Type != Bookmark || !c.Events[n].InitialEventsEnd:
			fail(spec.InitialEventsEnd, nil, []string{c.Events[n].Object.Key}, "the initial events end with a %s event, not a bookmark annotated %s", c.Events[n].Type, InitialEventsEndAnnotation)
			return 0, nil, false
		}
		rev := c.Events[n].Object.ResourceVersion
		if !sort.SliceIsSorted(initial, func(i, j int) bool { return initial[i].Object.Key < initial[j].Object.Key }) {
			fail(spec.InitialEventsEnd, []int64{rev}, nil, "the initial events of a WatchList are not sorted by key")
		}
		checkState(h, c, start, rev, initial, fail)
		return rev, c.Events[n+1:], true
	}
	// Without an end bookmark the state's revision is not stated: find a
	// revision whose state the leading ADDED events are (the longest prefix
	// that is one), within what the semantic allows.
	lo, hi := max(start.From, 1), c.After
	if start.Semantic == MostRecent {
		lo = max(lo, c.Before)
	}
	if start.Semantic == Any {
		// Any revision still available when the watch was answered: not
		// below the compaction then in force (when the recording knows it;
		// else the history's last, which is stricter).
		lo = max(h.oldest(), h.State.History().Base())
		if c.CompactRevision != 0 {
			lo = max(c.CompactRevision, h.State.History().Base())
		}
	}
	for k := n; k >= 0; k-- {
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
				return rev, c.Events[k:], true
			}
		}
	}
	fail(spec.WatchStart, []int64{lo, hi}, nil, "the %d ADDED events a %s watch opens with are not the objects of any revision from %d to %d", n, start.Semantic, lo, hi)
	return 0, nil, false
}

func sortedObjects(evs []WatchEvent) []Object {
	out := make([]Object, len(evs))
	for i, e := range evs {
		out[i] = e.Object
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// checkState checks that initial is the state at rev, and rev what the
// semantic allows.
func checkState(h History, c WatchCall, start WatchStart, rev int64, initial []WatchEvent,
	fail func(spec.Property, []int64, []string, string, ...any)) {
	switch {
	case start.Semantic == MostRecent && rev < c.Before:
		fail(spec.WatchStart, []int64{rev, c.Before}, nil, "a consistent WatchList synced to revision %d, older than revision %d committed before it was sent", rev, c.Before)
	case start.Semantic == NotOlderThan && rev < start.From:
		fail(spec.WatchStart, []int64{rev, start.From}, nil, "a WatchList from resourceVersion %d synced to the older revision %d", start.From, rev)
	case c.After > 0 && rev > c.After:
		fail(spec.WatchStart, []int64{rev, c.After}, nil, "initial events at revision %d, beyond the committed revision %d", rev, c.After)
	}
	if d := diffObjects(h.Objects(c.Prefix, rev), sortedObjects(initial)); d != "" {
		fail(spec.WatchStart, []int64{rev}, nil, "the initial events are not the stored objects at revision %d: %s", rev, d)
	}
}
