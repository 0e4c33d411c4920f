package k8s

import (
	"fmt"
	"sort"

	"github.com/watchspec/watchspec/model/spec"
)

// NotificationType is the event handler method called.
type NotificationType string

const (
	OnAdd    NotificationType = "OnAdd"
	OnUpdate NotificationType = "OnUpdate"
	OnDelete NotificationType = "OnDelete"
)

// Notification is one call of an event handler.
type Notification struct {
	Handler int
	Type    NotificationType
	// Old is the previous object of OnUpdate, and the last known state of
	// OnDelete (nil when a tombstone carries none).
	Old *Object
	// New is the object of OnAdd and OnUpdate.
	New           *Object
	InInitialList bool
	// Tombstone: OnDelete received a DeletedFinalStateUnknown (a deletion
	// missed while disconnected, found by a relist).
	Tombstone bool
}

// Key returns the key the notification is about.
func (n Notification) Key() string {
	if n.New != nil {
		return n.New.Key
	}
	if n.Old != nil {
		return n.Old.Key
	}
	return ""
}

// Entry is one thing that happened in an informer run. Exactly one field is set.
type Entry struct {
	// Start: the informer started; Revision is the highest revision known
	// committed at that moment.
	Start *StartEntry
	// HandlerAdded: a handler was registered.
	HandlerAdded *int
	// Notification: a handler was called.
	Notification *Notification
	// HasSynced: handler's HasSynced (−1: the informer's) was observed true.
	HasSynced *int
	// SyncedRV: the informer's last-synced resourceVersion was observed.
	SyncedRV *int64
	// List: the informer's ListWatch returned a list (index into Run.Lists).
	List *int
	// WatchEvent: the informer's ListWatch delivered a watch event.
	WatchEvent *WatchEventEntry
	// Resync: a periodic resync fired.
	Resync bool
	// Quiesced: writes stopped and the run waited; from here the informer
	// must agree with the store.
	Quiesced bool
}

// StartEntry marks the informer's start.
type StartEntry struct{ Revision int64 }

// WatchEventEntry is one event of watch Watch (an index into Run.Watches).
type WatchEventEntry struct {
	Watch int
	Event WatchEvent
}

// Run is a recorded informer run: the lists and watches its ListWatch made,
// and the log of everything that happened, in order.
type Run struct {
	// Prefix is the key prefix the informer watches.
	Prefix  string
	Lists   []ListCall
	Watches []WatchCall
	Entries []Entry
	// Cache is the informer's store at the end of the run.
	Cache []Object
}

// CheckInformer decides the informer contract, docs/SPEC.md §5, for a run
// against the store's history h; it also checks every list and watch of the
// run with [CheckList] and [CheckWatch]. It gives the default verdict: what
// Kubernetes and client-go guarantee. [CheckInformerWith] adds the
// stronger expectations watchspec recommends.
func CheckInformer(h History, run Run) []spec.Violation {
	return CheckInformerWith(h, run, Expectations{})
}

// Expectations are rules stronger than what Kubernetes guarantees, which
// watchspec recommends and a strict profile turns on (docs/SPEC.md names
// each where it states the rule it strengthens). A violated expectation is
// reported under the property it strengthens. The zero value expects
// nothing beyond the default verdict.
type Expectations struct {
	// StrictFreshStart (§5.8): the informer's first sync is not older than
	// what was committed before it started, even when it was read at
	// resourceVersion "0" — which the API lets a cache answer from any
	// revision, and client-go's first list uses when WatchList is off or
	// failed (kubernetes#59848, open).
	StrictFreshStart bool
}

// The names of the expectations, as docs/SPEC.md spells them.
const ExpectStrictFreshStart = "StrictFreshStart"

// CheckInformerWith is [CheckInformer] holding the run to the expectations
// e as well.
func CheckInformerWith(h History, run Run, e Expectations) []spec.Violation {
	c := &informerCheck{h: h, run: run, expect: e, views: map[int]map[string]*seen{}}
	for _, l := range run.Lists {
		c.out = append(c.out, CheckList(h, l)...)
	}
	for _, w := range run.Watches {
		c.out = append(c.out, CheckWatch(h, w)...)
	}
	c.walk()
	return c.out
}

// seen is what one handler last learnt of one key.
type seen struct {
	obj     Object
	present bool
	at      int // the entry index of the notification
	initial bool
}

type informerCheck struct {
	h       History
	run     Run
	expect  Expectations
	out     []spec.Violation
	views   map[int]map[string]*seen // handler → key → last seen
	order   []int                    // handlers in registration order
	joined  map[int]int              // handler → entry index it was added at
	started int                      // entry index of the start (-1 before)
	// lastRefresh is the entry index of the last relist or resync.
	lastRefresh int
	// relists holds, per entry index, the keys a relist listed.
	relists []relist
	synced  map[int]int // handler → entry index of the first HasSynced
	notes   map[int][]int
	// faulty records the handlers and keys already reported, so that the
	// consequences of one fault are not reported again under other names.
	faulty   map[int]map[string]bool
	quiesced int
	// received holds, per (key, resourceVersion), the entry index at which
	// the informer first received that state, in a list or a watch event.
	received map[state]int
	// lastResync is the entry index of the last resync mark (-1: none);
	// resyncUsed, per handler and key, the mark whose late snapshot
	// already explained a same-resourceVersion update (lateResync).
	lastResync int
	resyncUsed map[int]map[string]int
}

type state struct {
	key string
	rv  int64
}

// receive notes that the informer got o at entry i.
func (c *informerCheck) receive(o Object, i int) {
	if _, ok := c.received[state{o.Key, o.ResourceVersion}]; !ok {
		c.received[state{o.Key, o.ResourceVersion}] = i
	}
}

func (c *informerCheck) blame(h int, key string) {
	if c.faulty[h] == nil {
		c.faulty[h] = map[string]bool{}
	}
	c.faulty[h][key] = true
}

type relist struct {
	at   int
	keys map[string]bool
}

func (c *informerCheck) fail(p spec.Property, revs []int64, keys []string, format string, args ...any) {
	c.out = append(c.out, spec.Violation{Property: p, Revisions: revs, Keys: keys, Message: fmt.Sprintf(format, args...)})
}

func (c *informerCheck) walk() {
	c.started, c.lastRefresh, c.quiesced, c.lastResync = -1, -1, -1, -1
	c.resyncUsed = map[int]map[string]int{}
	c.joined, c.synced, c.notes = map[int]int{}, map[int]int{}, map[int][]int{}
	c.faulty = map[int]map[string]bool{}
	c.received = map[state]int{}
	var startRev int64
	firstList := true
	var lastRV int64
	legit := c.legitimateRVs()
	for i, e := range c.run.Entries {
		switch {
		case e.Start != nil:
			c.started, startRev = i, e.Start.Revision
		case e.HandlerAdded != nil:
			h := *e.HandlerAdded
			c.joined[h] = i
			c.order = append(c.order, h)
			c.views[h] = map[string]*seen{}
		case e.List != nil:
			l := c.run.Lists[*e.List]
			if l.Result.Status != nil {
				break
			}
			if firstList && l.Options.Continue == "" {
				firstList = false
				sem, _, _ := ListSemantic(l.Options)
				c.freshStart("list", l.Options.ResourceVersion, sem, l.Result.ResourceVersion, startRev, len(CheckList(c.h, l)) > 0)
			}
			keys := map[string]bool{}
			for _, o := range l.Result.Items {
				keys[o.Key] = true
				c.receive(o, i)
			}
			c.relists = append(c.relists, relist{at: i, keys: keys})
			c.lastRefresh = i
		case e.WatchEvent != nil && (e.WatchEvent.Event.Type == Added || e.WatchEvent.Event.Type == Modified):
			c.receive(e.WatchEvent.Event.Object, i)
		case e.WatchEvent != nil && e.WatchEvent.Event.Type == Bookmark && e.WatchEvent.Event.InitialEventsEnd:
			// A WatchList's state is a relist too: the informer replaces its
			// store with it (client-go's Reflector.watchList).
			rev := e.WatchEvent.Event.Object.ResourceVersion
			if firstList {
				firstList = false
				w := c.run.Watches[e.WatchEvent.Watch]
				start, _ := WatchSemantic(w.Options)
				c.freshStart("WatchList state", w.Options.ResourceVersion, start.Semantic, rev, startRev, len(CheckWatch(c.h, w)) > 0)
			}
			keys := map[string]bool{}
			for _, ev := range c.run.Watches[e.WatchEvent.Watch].Events {
				if ev.Type != Added {
					break
				}
				keys[ev.Object.Key] = true
			}
			c.relists = append(c.relists, relist{at: i, keys: keys})
			c.lastRefresh = i
		case e.Resync:
			c.lastRefresh, c.lastResync = i, i
		case e.SyncedRV != nil:
			rv := *e.SyncedRV
			// §5.6 SyncedRVMonotonic.
			if rv < lastRV {
				c.fail(spec.SyncedRVMonotonic, []int64{rv, lastRV}, nil, "the informer's last-synced resourceVersion went back from %d to %d", lastRV, rv)
			} else if rv > lastRV && !legit[rv] {
				c.fail(spec.SyncedRVMonotonic, []int64{rv}, nil,
					"the informer's last-synced resourceVersion %d was taken from a synthetic ADDED event, not from a list, a bookmark or a change (kubernetes#136583)", rv)
			}
			lastRV = max(lastRV, rv)
		case e.HasSynced != nil:
			if _, ok := c.synced[*e.HasSynced]; !ok {
				c.synced[*e.HasSynced] = i
			}
		case e.Notification != nil:
			c.notify(i, *e.Notification)
		case e.Quiesced:
			c.quiesced = i
		}
	}
	c.hasSynced()
	c.lateHandlers()
	if c.quiesced >= 0 {
		c.converges()
	}
}

// freshStart decides §5.8 FreshStart for the informer's first sync, at
// revision rev, read with resourceVersion asked (semantic sem), for an
// informer started when startRev was committed. A sync at resourceVersion
// "0" may be stale (the API lets a cache serve any revision, and
// client-go's first list uses "0": kubernetes#59848) unless the
// StrictFreshStart expectation is on. A stale sync read consistently
// breaks the server's rule (§4.1, §4.3), which the request's own check
// reports (serverFault): it is not reported again.
func (c *informerCheck) freshStart(what, asked string, sem Semantic, rev, startRev int64, serverFault bool) {
	if rev >= startRev || serverFault {
		return
	}
	if sem == Any && !c.expect.StrictFreshStart {
		return
	}
	why := fmt.Sprintf("the informer asked for resourceVersion %q, which does not promise a state as fresh as its start", asked)
	switch sem {
	case MostRecent:
		why = "a consistent read (resourceVersion unset) is not older than what was committed before it was sent"
	case Any:
		why = "a first list at resourceVersion \"0\" may be served by a stale cache (kubernetes#59848); the StrictFreshStart expectation forbids it"
	}
	c.fail(spec.FreshStart, []int64{rev, startRev}, []string{c.run.Prefix},
		"the informer's first %s is at revision %d, older than revision %d committed before it started: %s", what, rev, startRev, why)
}

// legitimateRVs lists the revisions an informer may adopt: those of lists,
// of bookmarks and of watch events other than a watch's synthetic initial
// ADDED events.
func (c *informerCheck) legitimateRVs() map[int64]bool {
	ok := map[int64]bool{0: true}
	for _, l := range c.run.Lists {
		ok[l.Result.ResourceVersion] = true
	}
	for _, w := range c.run.Watches {
		start, err := WatchSemantic(w.Options)
		initial := err == nil && start.InitialState
		for _, e := range w.Events {
			if e.Type != Added {
				initial = false
			}
			if !initial {
				ok[e.Object.ResourceVersion] = true
			}
		}
	}
	return ok
}

// real reports whether o is a state the store held: the key had exactly
// this value and resourceVersion at o's resourceVersion.
func (c *informerCheck) real(o Object) bool {
	objs := c.h.Objects(o.Key, o.ResourceVersion)
	for _, x := range objs {
		if x.Key == o.Key {
			return x == o
		}
	}
	return false
}

// notify decides §5.1 InformerSubsequence and §5.7 SameRVUpdate for one
// notification, and updates the handler's view.
func (c *informerCheck) notify(i int, n Notification) {
	view, ok := c.views[n.Handler]
	if !ok {
		view = map[string]*seen{}
		c.views[n.Handler] = view
		c.order = append(c.order, n.Handler)
	}
	c.notes[n.Handler] = append(c.notes[n.Handler], i)
	key := n.Key()
	last := view[key]
	switch n.Type {
	case OnAdd, OnUpdate:
		obj := *n.New
		switch {
		case !c.real(obj):
			c.blame(n.Handler, key)
			c.fail(spec.InformerSubsequence, []int64{obj.ResourceVersion}, []string{key},
				"handler %d got %s of %q at resourceVersion %d with a value the store never held there", n.Handler, n.Type, key, obj.ResourceVersion)
		case last == nil:
		case obj.ResourceVersion < last.obj.ResourceVersion:
			c.blame(n.Handler, key)
			c.fail(spec.InformerSubsequence, []int64{obj.ResourceVersion, last.obj.ResourceVersion}, []string{key},
				"handler %d got %q at resourceVersion %d after resourceVersion %d: back in time", n.Handler, key, obj.ResourceVersion, last.obj.ResourceVersion)
		case obj.ResourceVersion == last.obj.ResourceVersion && !n.InInitialList && !c.refreshedSince(obj, last.at) && !c.lateResync(n.Handler, key):
			c.blame(n.Handler, key)
			c.fail(spec.SameRVUpdate, []int64{obj.ResourceVersion}, []string{key},
				"handler %d got %s of %q at the same resourceVersion %d again, with no resync or relist in between", n.Handler, n.Type, key, obj.ResourceVersion)
		case n.Type == OnUpdate && n.Old != nil && (!last.present || *n.Old != last.obj):
			// OnUpdate's old object is the state the informer's cache held
			// before (client-go processDeltas: clientState.Get), which is
			// the state this handler was last told of.
			c.blame(n.Handler, key)
			had := "it had been told the key was deleted"
			if last.present {
				had = fmt.Sprintf("it was last told of resourceVersion %d %q", last.obj.ResourceVersion, last.obj.Value)
			}
			c.fail(spec.InformerSubsequence, []int64{n.Old.ResourceVersion, last.obj.ResourceVersion}, []string{key},
				"handler %d got OnUpdate of %q whose old object is resourceVersion %d %q, but %s", n.Handler, key, n.Old.ResourceVersion, n.Old.Value, had)
		}
		if n.Type == OnUpdate && n.Old != nil && last == nil && !c.faulty[n.Handler][key] {
			c.blame(n.Handler, key)
			c.fail(spec.InformerSubsequence, []int64{n.Old.ResourceVersion}, []string{key},
				"handler %d got OnUpdate of %q (old resourceVersion %d) without having been told of the key before", n.Handler, key, n.Old.ResourceVersion)
		}
		view[key] = &seen{obj: obj, present: true, at: i, initial: n.InInitialList}
	case OnDelete:
		if last != nil && !last.present {
			c.blame(n.Handler, key)
			c.fail(spec.InformerSubsequence, nil, []string{key}, "handler %d got a second OnDelete of %q", n.Handler, key)
		}
		if n.Old != nil && !n.Tombstone {
			// A delete from a watch carries the resourceVersion of the deletion.
			if objs := c.h.Objects(key, n.Old.ResourceVersion); len(objs) > 0 && objs[0].Key == key {
				c.blame(n.Handler, key)
				c.fail(spec.InformerSubsequence, []int64{n.Old.ResourceVersion}, []string{key},
					"handler %d got OnDelete of %q at resourceVersion %d, where the key still exists", n.Handler, key, n.Old.ResourceVersion)
			}
		}
		rv := int64(0)
		if last != nil {
			rv = last.obj.ResourceVersion
		}
		if n.Old != nil {
			rv = max(rv, n.Old.ResourceVersion)
		}
		view[key] = &seen{obj: Object{Key: key, ResourceVersion: rv}, present: false, at: i}
	}
}

// refreshedSince reports whether a relist or a resync came after the
// informer first received state o (or, when that is not recorded, after the
// handler's notification at entry at): only a refresh can deliver a state
// again. (Handlers are told through buffers, so the refresh may well be
// logged before the handler's previous notification of o.)
func (c *informerCheck) refreshedSince(o Object, at int) bool {
	if i, ok := c.received[state{o.Key, o.ResourceVersion}]; ok {
		return c.lastRefresh > i
	}
	return c.lastRefresh > at
}

// lateResync reports whether the last resync mark may explain a
// same-resourceVersion update of key to handler h although the informer
// received that state after the mark — once per mark, handler and key.
// The mark is when client-go logs "Forcing resync"; the resync's snapshot
// of the cache is taken after it (Reflector.startResync then calls
// store.Resync, which reads the indexer), and before the next mark, by the
// same goroutine: on a loaded machine the watch events of several
// revisions went into the cache in between, and the resync delivered their
// states (a recording: traces/corpus
// informer-client-go-0.37.2-resync-snapshot-after-mark.ndjson). A resync
// delivers each key at most once to a handler, so a second same-version
// update of the key under the same mark is still a fault.
func (c *informerCheck) lateResync(h int, key string) bool {
	if c.lastResync < 0 {
		return false
	}
	used := c.resyncUsed[h]
	if used == nil {
		used = map[string]int{}
		c.resyncUsed[h] = used
	}
	if m, ok := used[key]; ok && m == c.lastResync {
		return false
	}
	used[key] = c.lastResync
	return true
}

// converges decides §5.2 InformerConverges (and names §5.3 RelistDeletes)
// once writes stopped: the cache and every handler's view equal the store.
// Keys of a handler already blamed for another fault are not compared again.
func (c *informerCheck) converges() {
	head := c.h.head()
	want := map[string]Object{}
	for _, o := range c.h.Objects(c.run.Prefix, head) {
		want[o.Key] = o
	}
	cache := map[string]Object{}
	for _, o := range c.run.Cache {
		cache[o.Key] = o
	}
	leaked := map[string]bool{} // keys a relist should have deleted, already reported
	defer func() {
		// The cache's leaks are the handlers' leaks: report them once.
		for k, o := range cache {
			if _, ok := want[k]; ok || leaked[k] {
				continue
			}
			if r := c.relistWithout(k, c.lastSeen(k)); r >= 0 {
				c.fail(spec.RelistDeletes, []int64{o.ResourceVersion}, []string{k},
					"the informer's cache still holds %q: the relist at entry %d did not list it, yet it was not deleted (kubernetes#115620)", k, r)
				leaked[k] = true
			}
		}
		for k := range leaked {
			delete(cache, k)
		}
		if d := diffObjects(sortedMap(want), sortedMap(cache)); d != "" {
			c.fail(spec.InformerConverges, []int64{head}, []string{c.run.Prefix}, "after writes stopped the informer's cache differs from the store at revision %d: %s", head, d)
		}
	}()
	for _, h := range c.order {
		if c.faulty[h][""] {
			continue // the whole handler is already blamed
		}
		got := map[string]Object{}
		expect := map[string]Object{}
		for k, o := range want {
			if !c.faulty[h][k] {
				expect[k] = o
			}
		}
		for k, s := range c.views[h] {
			if s.present && !c.faulty[h][k] {
				got[k] = s.obj
			}
		}
		for k, o := range got {
			if _, ok := expect[k]; ok {
				continue
			}
			if r := c.relistWithout(k, c.views[h][k].at); r >= 0 {
				c.fail(spec.RelistDeletes, []int64{o.ResourceVersion}, []string{k},
					"handler %d still holds %q: the relist at entry %d did not list it, yet no OnDelete followed (kubernetes#115620)", h, k, r)
				delete(got, k)
				leaked[k] = true
			}
		}
		if d := diffObjects(sortedMap(expect), sortedMap(got)); d != "" {
			c.fail(spec.InformerConverges, []int64{head}, []string{c.run.Prefix}, "after writes stopped handler %d's view differs from the store at revision %d: %s", h, head, d)
		}
	}
}

// lastSeen returns the entry index of the last notification about key.
func (c *informerCheck) lastSeen(key string) int {
	last := -1
	for _, ns := range c.notes {
		for _, i := range ns {
			if c.run.Entries[i].Notification.Key() == key {
				last = max(last, i)
			}
		}
	}
	return last
}

// relistWithout returns the entry index of a relist after entry at that
// did not list key, or −1.
func (c *informerCheck) relistWithout(key string, at int) int {
	for _, r := range c.relists {
		if r.at > at && !r.keys[key] {
			return r.at
		}
	}
	return -1
}

func sortedMap(m map[string]Object) []Object {
	out := make([]Object, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// hasSynced decides §5.5 HasSyncedDelivered: once a handler's HasSynced
// was observed true, no initial-list notification reaches it any more.
func (c *informerCheck) hasSynced() {
	for h, at := range c.synced {
		if h < 0 {
			continue
		}
		for _, i := range c.notes[h] {
			if n := c.run.Entries[i].Notification; i > at && n.InInitialList {
				c.fail(spec.HasSyncedDelivered, nil, []string{n.Key()},
					"handler %d reported HasSynced at entry %d, but its initial-list OnAdd of %q came later, at entry %d", h, at, n.Key(), i)
				break
			}
		}
	}
}

// lateHandlers decides §5.4 LateHandler: a handler added after the start
// first gets the cache's contents as initial-list adds, then exactly the
// changes the first handler got from that point on. Same-resourceVersion
// updates (a resync's or a relist's) are not compared: client-go sends them
// only to the handlers whose resync is due (sharedProcessor.distribute with
// sync, kubernetes#87957), so handlers with different resync periods get
// different ones; §5.7 judges them.
func (c *informerCheck) lateHandlers() {
	if len(c.order) == 0 {
		return
	}
	ref := c.order[0]
	refNotes := changes(c.notifications(ref), nil)
	for _, h := range c.order[1:] {
		if c.joined[h] < c.started || c.started < 0 || len(c.faulty[ref]) > 0 || len(c.faulty[h]) > 0 {
			continue // before the start, or its notifications are already blamed
		}
		notes := c.notifications(h)
		k := 0
		initial := map[string]Object{}
		for k < len(notes) && notes[k].InInitialList {
			initial[notes[k].New.Key] = *notes[k].New
			k++
		}
		if !c.suffixMatches(refNotes, initial, changes(notes[k:], initial)) {
			c.blame(h, "")
			c.fail(spec.LateHandler, nil, nil,
				"handler %d, added after the start, did not get the cache's contents followed by the same notifications as handler %d", h, ref)
		}
	}
}

// changes returns notes without the same-resourceVersion updates: those
// whose new object is the one the handler already held for the key (view,
// which changes does not modify, is what it held before notes).
func changes(notes []Notification, view map[string]Object) []Notification {
	held := make(map[string]Object, len(view))
	for k, o := range view {
		held[k] = o
	}
	var out []Notification
	for _, n := range notes {
		if n.Type == OnDelete {
			delete(held, n.Key())
			out = append(out, n)
			continue
		}
		if o, ok := held[n.Key()]; ok && n.Type == OnUpdate && o == *n.New {
			continue
		}
		held[n.Key()] = *n.New
		out = append(out, n)
	}
	return out
}

func (c *informerCheck) notifications(h int) []Notification {
	var out []Notification
	for _, i := range c.notes[h] {
		out = append(out, *c.run.Entries[i].Notification)
	}
	return out
}

// suffixMatches reports whether some prefix of ref leaves a view equal to
// initial, and the rest of ref equals rest (by type, key and resourceVersion).
func (c *informerCheck) suffixMatches(ref []Notification, initial map[string]Object, rest []Notification) bool {
	view := map[string]Object{}
	for k := 0; k <= len(ref); k++ {
		if k > 0 {
			n := ref[k-1]
			if n.Type == OnDelete {
				delete(view, n.Key())
			} else {
				view[n.Key()] = *n.New
			}
		}
		if len(view) != len(initial) || diffObjects(sortedMap(view), sortedMap(initial)) != "" {
			continue
		}
		if sameNotifications(ref[k:], rest) {
			return true
		}
	}
	return false
}

func sameNotifications(a, b []Notification) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Key() != b[i].Key() {
			return false
		}
		if (a[i].New == nil) != (b[i].New == nil) || a[i].New != nil && *a[i].New != *b[i].New {
			return false
		}
	}
	return true
}

// Checks counts how many times CheckInformer checks each property on run.
func Checks(run Run) map[spec.Property]int {
	c := map[spec.Property]int{
		spec.ListResourceVersion: len(run.Lists), spec.ListSnapshot: len(run.Lists), spec.Expired: len(run.Lists) + len(run.Watches),
		spec.WatchStart: len(run.Watches),
	}
	started := false
	for _, e := range run.Entries {
		switch {
		case e.Start != nil:
			started = true
		case e.Notification != nil:
			c[spec.InformerSubsequence]++
			c[spec.SameRVUpdate]++
		case e.HasSynced != nil:
			c[spec.HasSyncedDelivered]++
		case e.SyncedRV != nil:
			c[spec.SyncedRVMonotonic]++
		case e.Quiesced:
			c[spec.InformerConverges]++
			c[spec.RelistDeletes]++
		case e.HandlerAdded != nil && started:
			c[spec.LateHandler]++
		case e.List != nil && started && c[spec.FreshStart] == 0:
			c[spec.FreshStart]++
		case e.WatchEvent != nil && e.WatchEvent.Event.InitialEventsEnd && started && c[spec.FreshStart] == 0:
			c[spec.FreshStart]++
		}
	}
	for _, w := range run.Watches {
		if s, err := WatchSemantic(w.Options); err == nil && s.EndBookmark {
			c[spec.InitialEventsEnd]++
		}
	}
	return c
}
