package mutate

import (
	"fmt"
	"math/rand"
	"slices"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
)

// The semantic operators on informer runs (docs/SPEC.md §5). They apply to
// clean runs with an informer log.

func informerSubject(s *Subject) bool { return s.k8sClean && s.informer }

// informerView is what the operators read off an informer log.
type informerView struct {
	run     *k8s.Run
	started int           // entry index of the start, −1
	joined  map[int]int   // handler → entry index it was added at
	order   []int         // handlers, first registered first
	notes   map[int][]int // handler → entry indexes of its notifications
	quiet   int           // entry index of the quiescence mark, −1
}

func viewOf(run *k8s.Run) *informerView {
	v := &informerView{run: run, started: -1, quiet: -1, joined: map[int]int{}, notes: map[int][]int{}}
	for i, e := range run.Entries {
		switch {
		case e.Start != nil:
			v.started = i
		case e.HandlerAdded != nil:
			v.joined[*e.HandlerAdded] = i
			v.order = append(v.order, *e.HandlerAdded)
		case e.Notification != nil:
			h := e.Notification.Handler
			if _, ok := v.joined[h]; !ok && len(v.notes[h]) == 0 {
				v.order = append(v.order, h)
			}
			v.notes[h] = append(v.notes[h], i)
		case e.Quiesced:
			v.quiet = i
		}
	}
	return v
}

// late reports whether handler h was added after the informer started.
func (v *informerView) late(h int) bool {
	j, ok := v.joined[h]
	return ok && v.started >= 0 && j > v.started
}

func (v *informerView) note(i int) k8s.Notification { return *v.run.Entries[i].Notification }

// relists returns, per relist (a list, or a WatchList's initial-events-end
// bookmark), its entry index and the keys it held.
func (v *informerView) relists() []relistAt {
	var out []relistAt
	for i, e := range v.run.Entries {
		switch {
		case e.List != nil && v.run.Lists[*e.List].Result.Status == nil:
			keys := map[string]bool{}
			for _, o := range v.run.Lists[*e.List].Result.Items {
				keys[o.Key] = true
			}
			out = append(out, relistAt{i, keys})
		case e.WatchEvent != nil && e.WatchEvent.Event.Type == k8s.Bookmark && e.WatchEvent.Event.InitialEventsEnd:
			keys := map[string]bool{}
			for _, ev := range v.run.Watches[e.WatchEvent.Watch].Events {
				if ev.Type != k8s.Added {
					break
				}
				keys[ev.Object.Key] = true
			}
			out = append(out, relistAt{i, keys})
		}
	}
	return out
}

type relistAt struct {
	at   int
	keys map[string]bool
}

// refreshes returns the entry indexes of relists and resyncs.
func (v *informerView) refreshes() []int {
	var out []int
	for _, r := range v.relists() {
		out = append(out, r.at)
	}
	for i, e := range v.run.Entries {
		if e.Resync {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// received returns the entry index at which the informer first got state
// o, in a list or an ADDED or MODIFIED watch event, or −1.
func (v *informerView) received(o k8s.Object) int {
	for i, e := range v.run.Entries {
		switch {
		case e.List != nil:
			if slices.ContainsFunc(v.run.Lists[*e.List].Result.Items, func(x k8s.Object) bool { return x.Key == o.Key && x.ResourceVersion == o.ResourceVersion }) {
				return i
			}
		case e.WatchEvent != nil && (e.WatchEvent.Event.Type == k8s.Added || e.WatchEvent.Event.Type == k8s.Modified):
			if x := e.WatchEvent.Event.Object; x.Key == o.Key && x.ResourceVersion == o.ResourceVersion {
				return i
			}
		}
	}
	return -1
}

// noteSite picks a notification entry that accepts.
func noteSite(m *Mutant, r *rand.Rand, accept func(v *informerView, i int, n k8s.Notification) bool) (*informerView, int, bool) {
	if !informerSubject(m.Subject) {
		return nil, 0, false
	}
	v := viewOf(m.Subject.Trace.K8s)
	var is []int
	for _, ns := range v.notes {
		for _, i := range ns {
			if accept(v, i, v.note(i)) {
				is = append(is, i)
			}
		}
	}
	if len(is) == 0 {
		return nil, 0, false
	}
	slices.Sort(is)
	return v, pickOne(r, is), true
}

func setNote(run *k8s.Run, i int, n k8s.Notification) { run.Entries[i].Notification = &n }

func entryWhere(i int) string { return fmt.Sprintf("informer entry %d", i) }

var informerOperators = []*Operator{
	{
		Name: "informer-fabricated-old", Kind: Semantic,
		Doc:        "gives an OnUpdate an old object the store never held (§5.1 InformerSubsequence: what a handler receives is real)",
		Properties: []spec.Property{spec.InformerSubsequence},
		apply: func(m *Mutant, r *rand.Rand) bool {
			_, i, ok := noteSite(m, r, func(_ *informerView, _ int, n k8s.Notification) bool { return n.Type == k8s.OnUpdate && n.Old != nil })
			if !ok {
				return false
			}
			n := *m.tr().K8s.Entries[i].Notification
			old := *n.Old
			old.Value = fresh(r)
			n.Old = &old
			setNote(m.tr().K8s, i, n)
			m.Expect = one(spec.InformerSubsequence)
			m.whatf("%s: handler %d's OnUpdate of %q has old value %q, never stored", entryWhere(i), n.Handler, old.Key, old.Value)
			return true
		},
	},
	{
		Name: "informer-stale-old", Kind: Semantic,
		Doc: "gives an OnUpdate, as its old object, an older real state of the key than the handler last saw " +
			"(§5.1 InformerSubsequence: per handler and key, states in order)",
		Properties: []spec.Property{spec.InformerSubsequence},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			var older []k8s.Object
			_, i, ok := noteSite(m, r, func(_ *informerView, _ int, n k8s.Notification) bool {
				if n.Type != k8s.OnUpdate || n.Old == nil {
					return false
				}
				older = s.olderStates(*n.Old)
				return len(older) > 0
			})
			if !ok {
				return false
			}
			n := *m.tr().K8s.Entries[i].Notification
			older = s.olderStates(*n.Old)
			o := pickOne(r, older)
			n.Old = &o
			setNote(m.tr().K8s, i, n)
			m.Expect = one(spec.InformerSubsequence)
			m.whatf("%s: handler %d's OnUpdate of %q has as old object its state at %d, older than the %d it had", entryWhere(i), n.Handler, o.Key, o.ResourceVersion, m.Subject.Trace.K8s.Entries[i].Notification.Old.ResourceVersion)
			return true
		},
	},
	{
		Name: "informer-fabricated-new", Kind: Semantic,
		Doc:        "gives an OnAdd or OnUpdate an object the store never held (§5.1 InformerSubsequence)",
		Properties: []spec.Property{spec.InformerSubsequence},
		apply: func(m *Mutant, r *rand.Rand) bool {
			_, i, ok := noteSite(m, r, func(_ *informerView, _ int, n k8s.Notification) bool { return n.New != nil })
			if !ok {
				return false
			}
			n := *m.tr().K8s.Entries[i].Notification
			o := *n.New
			o.Value = fresh(r)
			n.New = &o
			setNote(m.tr().K8s, i, n)
			m.Expect = one(spec.InformerSubsequence)
			m.whatf("%s: handler %d's %s of %q carries value %q, never stored", entryWhere(i), n.Handler, n.Type, o.Key, o.Value)
			return true
		},
	},
	{
		Name: "informer-out-of-order", Kind: Semantic,
		Doc:        "swaps two successive notifications of one handler about one key: its states go back in time (§5.1 InformerSubsequence)",
		Properties: []spec.Property{spec.InformerSubsequence},
		apply: func(m *Mutant, r *rand.Rand) bool {
			var later int
			v, i, ok := noteSite(m, r, func(v *informerView, i int, n k8s.Notification) bool {
				later = v.nextAbout(i)
				if n.New == nil || n.InInitialList || later < 0 {
					return false
				}
				o := v.note(later)
				return o.New != nil && !o.InInitialList && o.New.ResourceVersion > n.New.ResourceVersion
			})
			if !ok {
				return false
			}
			later = v.nextAbout(i)
			run := m.tr().K8s
			run.Entries[i], run.Entries[later] = run.Entries[later], run.Entries[i]
			m.Expect = one(spec.InformerSubsequence)
			n := v.note(i)
			m.whatf("%s and %d: handler %d's notifications of %q swapped", entryWhere(i), later, n.Handler, n.Key())
			return true
		},
	},
	{
		Name: "informer-lost-delete", Kind: Semantic,
		Doc: "drops a handler's last OnDelete of a key the store no longer holds: its view keeps the object " +
			"(§5.2 InformerConverges, §5.3 RelistDeletes when a later relist did not list it, §5.4 LateHandler " +
			"for a handler added late, whose notifications must be the first handler's)",
		Properties: []spec.Property{spec.InformerConverges, spec.RelistDeletes, spec.LateHandler},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !informerSubject(s) {
				return false
			}
			head := map[string]bool{}
			for _, o := range s.KH.Objects(s.Trace.K8s.Prefix, s.head()) {
				head[o.Key] = true
			}
			v, i, ok := noteSite(m, r, func(v *informerView, i int, n k8s.Notification) bool {
				return n.Type == k8s.OnDelete && v.quiet > i && v.nextAbout(i) < 0 && !head[n.Key()]
			})
			if !ok {
				return false
			}
			n := v.note(i)
			m.Expect = v.lostName(i, n)
			m.spliceEntries(i, 1)
			m.whatf("%s: handler %d's OnDelete of %q dropped", entryWhere(i), n.Handler, n.Key())
			return true
		},
	},
	{
		Name: "informer-lost-update", Kind: Semantic,
		Doc: "drops a handler's last OnAdd or OnUpdate of an object the store still holds in that state: its view " +
			"keeps an older state or none (§5.2 InformerConverges; §5.4 LateHandler for a handler added late)",
		Properties: []spec.Property{spec.InformerConverges, spec.LateHandler},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !informerSubject(s) {
				return false
			}
			head := map[string]int64{}
			for _, o := range s.KH.Objects(s.Trace.K8s.Prefix, s.head()) {
				head[o.Key] = o.ResourceVersion
			}
			v, i, ok := noteSite(m, r, func(v *informerView, i int, n k8s.Notification) bool {
				return n.New != nil && v.quiet > i && v.nextAbout(i) < 0 && head[n.Key()] == n.New.ResourceVersion && !v.repeats(i)
			})
			if !ok {
				return false
			}
			n := v.note(i)
			m.Expect = one(spec.InformerConverges)
			if v.late(n.Handler) {
				m.Expect = one(spec.LateHandler)
			} else if v.order[0] == n.Handler && slices.ContainsFunc(v.order[1:], v.late) {
				m.Expect = [][]spec.Property{{spec.InformerConverges}, {spec.InformerConverges, spec.LateHandler}}
			}
			m.spliceEntries(i, 1)
			m.whatf("%s: handler %d's last %s of %q (at %d, the stored state) dropped", entryWhere(i), n.Handler, n.Type, n.Key(), n.New.ResourceVersion)
			return true
		},
	},
	{
		Name: "informer-duplicate-notification", Kind: Semantic,
		Doc: "repeats an OnAdd or OnUpdate right after itself (twice after a resync mark, whose snapshot may explain one), " +
			"with no resync or relist since the informer received that state (§5.7 SameRVUpdate)",
		Properties: []spec.Property{spec.SameRVUpdate},
		apply: func(m *Mutant, r *rand.Rand) bool {
			_, i, ok := noteSite(m, r, func(v *informerView, i int, n k8s.Notification) bool {
				if n.New == nil || n.InInitialList {
					return false
				}
				since := v.received(*n.New)
				if since < 0 {
					since = i
				}
				for _, f := range v.refreshes() {
					if f > since && f <= i {
						return false
					}
				}
				return true
			})
			if !ok {
				return false
			}
			run := m.tr().K8s
			n := *run.Entries[i].Notification
			// A repeat has a resync's shape: an OnUpdate's old object is
			// the state itself (so §5.7 alone names it). The last resync
			// mark may explain one repeat per handler and key (its snapshot
			// follows the mark, §5.7): after a mark, two repeats.
			rep := n
			if rep.Type == k8s.OnUpdate {
				rep.Old = rep.New
			}
			copies := []k8s.Entry{{Notification: &rep}}
			if slices.ContainsFunc(run.Entries[:i], func(e k8s.Entry) bool { return e.Resync }) {
				copies = append(copies, k8s.Entry{Notification: &rep})
			}
			m.spliceEntries(i+1, 0, copies...)
			m.Expect = one(spec.SameRVUpdate)
			m.whatf("%s: handler %d's %s of %q at %d repeated %d time(s)", entryWhere(i), n.Handler, n.Type, n.Key(), n.New.ResourceVersion, len(copies))
			return true
		},
	},
	{
		Name: "informer-hassynced-early", Kind: Semantic,
		Doc:        "reports a handler's HasSynced before its last initial-list OnAdd (§5.5 HasSyncedDelivered)",
		Properties: []spec.Property{spec.HasSyncedDelivered},
		apply: func(m *Mutant, r *rand.Rand) bool {
			if !informerSubject(m.Subject) {
				return false
			}
			v := viewOf(m.Subject.Trace.K8s)
			type site struct{ synced, initial int }
			var sites []site
			var hs []int
			for h := range v.notes {
				hs = append(hs, h)
			}
			slices.Sort(hs)
			for _, h := range hs {
				ns := v.notes[h]
				synced := -1
				for i, e := range v.run.Entries {
					if e.HasSynced != nil && *e.HasSynced == h {
						synced = i
						break
					}
				}
				last := -1
				for _, i := range ns {
					if v.note(i).InInitialList && i < synced {
						last = i
					}
				}
				if synced >= 0 && last >= 0 {
					sites = append(sites, site{synced, last})
				}
			}
			if len(sites) == 0 {
				return false
			}
			st := pickOne(r, sites)
			run := m.tr().K8s
			e := run.Entries[st.synced]
			m.moveEntry(st.synced, st.initial)
			m.Expect = one(spec.HasSyncedDelivered)
			m.whatf("%s: handler %d's HasSynced moved before its initial-list notification at entry %d", entryWhere(st.synced), *e.HasSynced, st.initial)
			return true
		},
	},
	{
		Name: "informer-synced-rv-back", Kind: Semantic,
		Doc:        "lowers an observed last-synced resourceVersion below an earlier one (§5.6 SyncedRVMonotonic)",
		Properties: []spec.Property{spec.SyncedRVMonotonic},
		apply: func(m *Mutant, r *rand.Rand) bool {
			if !informerSubject(m.Subject) {
				return false
			}
			run := m.tr().K8s
			var sites [][2]int64 // entry, the highest earlier value
			top := int64(0)
			for i, e := range run.Entries {
				if e.SyncedRV != nil {
					if top > 0 {
						sites = append(sites, [2]int64{int64(i), top})
					}
					top = max(top, *e.SyncedRV)
				}
			}
			if len(sites) == 0 {
				return false
			}
			st := pickOne(r, sites)
			rv := r.Int63n(st[1])
			run.Entries[st[0]].SyncedRV = &rv
			m.Expect = one(spec.SyncedRVMonotonic)
			m.whatf("%s: last-synced resourceVersion %d, below the %d observed before", entryWhere(int(st[0])), rv, st[1])
			return true
		},
	},
	{
		Name: "informer-synced-rv-synthetic", Kind: Semantic,
		Doc: "raises an observed last-synced resourceVersion to one no list, bookmark or change carried (such as a " +
			"synthetic initial ADDED's) (§5.6 SyncedRVMonotonic; kubernetes#136583)",
		Properties: []spec.Property{spec.SyncedRVMonotonic},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !informerSubject(s) {
				return false
			}
			run := m.tr().K8s
			legit := legitimateRVs(run)
			var sites []int
			top := int64(0)
			var tops []int64
			for i, e := range run.Entries {
				if e.SyncedRV != nil {
					sites = append(sites, i)
					tops = append(tops, top)
					top = max(top, *e.SyncedRV)
				}
			}
			if len(sites) == 0 {
				return false
			}
			x := r.Intn(len(sites))
			var cands []int64
			for rv := tops[x] + 1; rv <= s.head(); rv++ {
				if !legit[rv] {
					cands = append(cands, rv)
				}
			}
			if len(cands) == 0 {
				return false
			}
			rv := pickOne(r, cands)
			run.Entries[sites[x]].SyncedRV = &rv
			m.Expect = one(spec.SyncedRVMonotonic)
			m.whatf("%s: last-synced resourceVersion %d, which no list, bookmark or change carried", entryWhere(sites[x]), rv)
			return true
		},
	},
	{
		Name: "informer-fresh-start", Kind: Semantic,
		Doc: "records the informer's start after a revision newer than its first sync, when that sync asked for a " +
			"state as fresh as its start (a consistent read, or N, not \"0\"): its first list (or WatchList state) " +
			"is older than what was committed before it started (§5.8 FreshStart; kubernetes#59848)",
		Properties: []spec.Property{spec.FreshStart},
		apply: func(m *Mutant, r *rand.Rand) bool {
			return freshStart(m, r, informerSubject(m.Subject), false)
		},
	},
	{
		Name: "informer-fresh-start-strict", Kind: Strict,
		Doc: "records the informer's start after a revision newer than its first sync read at resourceVersion \"0\": " +
			"the API lets a cache serve \"0\" stale (§5.8, allowed by default), the strict profile's " +
			"StrictFreshStart forbids it (§9.3; kubernetes#59848)",
		Properties: []spec.Property{spec.FreshStart},
		apply: func(m *Mutant, r *rand.Rand) bool {
			if !informerSubject(m.Subject) {
				return false
			}
			sb := m.Subject.strict()
			return sb != nil && sb.k8sClean && freshStart(m, r, true, true)
		},
	},
	{
		Name: "informer-late-handler-gap", Kind: Semantic,
		Doc: "drops a notification after the initial list of a handler added late (§5.4 LateHandler); when the " +
			"handler's next notification of the key shows the gap itself — an OnUpdate whose old object is no " +
			"longer the state the handler was last told of, an OnDelete of a key it was last told was deleted " +
			"(the dropped OnAdd re-created it) — §5.1 InformerSubsequence names it first",
		Properties: []spec.Property{spec.LateHandler, spec.InformerSubsequence},
		apply: func(m *Mutant, r *rand.Rand) bool {
			v, i, ok := noteSite(m, r, func(v *informerView, i int, n k8s.Notification) bool {
				return v.late(n.Handler) && !n.InInitialList && !v.repeats(i)
			})
			if !ok {
				return false
			}
			n := *m.tr().K8s.Entries[i].Notification
			m.Expect = one(spec.LateHandler)
			if j := v.nextAbout(i); j >= 0 {
				next := v.note(j)
				switch {
				case next.Type == k8s.OnUpdate && next.Old != nil:
					m.Expect = one(spec.InformerSubsequence)
				case next.Type == k8s.OnDelete:
					// The handler was last told the key was deleted: a
					// second OnDelete with no add between (§5.1).
					if p := v.prevAbout(i); p >= 0 && v.note(p).Type == k8s.OnDelete {
						m.Expect = one(spec.InformerSubsequence)
					}
				}
			}
			m.spliceEntries(i, 1)
			m.whatf("%s: late handler %d's %s of %q dropped", entryWhere(i), n.Handler, n.Type, n.Key())
			return true
		},
	},
}

// repeats reports whether the notification at entry i tells its handler a
// state of the key it already had (a resync's update, same resourceVersion):
// dropping it changes nothing the handler knows, and §5.4 does not compare
// such updates.
func (v *informerView) repeats(i int) bool {
	n := v.note(i)
	if n.New == nil {
		return false
	}
	prev := v.prevAbout(i)
	if prev < 0 {
		return false
	}
	p := v.note(prev)
	return p.New != nil && p.New.ResourceVersion == n.New.ResourceVersion
}

// nextAbout returns the entry index of the handler's next notification
// about the same key after entry i, or −1.
func (v *informerView) nextAbout(i int) int {
	n := v.note(i)
	for _, j := range v.notes[n.Handler] {
		if j > i && v.note(j).Key() == n.Key() {
			return j
		}
	}
	return -1
}

// prevAbout returns the entry index of the handler's previous notification
// about the same key before entry i, or −1.
func (v *informerView) prevAbout(i int) int {
	n := v.note(i)
	prev := -1
	for _, j := range v.notes[n.Handler] {
		if j < i && v.note(j).Key() == n.Key() {
			prev = j
		}
	}
	return prev
}

// lostName names the loss of the handler's last notification (an OnDelete)
// at entry i: the handler added late breaks §5.4; otherwise its view keeps
// the key, §5.3 if a relist after its previous notification of the key did
// not list it, §5.2 if not. When the first handler loses it, every handler
// added late that got it no longer follows the first handler (§5.4 compares
// them), which may be named as well.
func (v *informerView) lostName(i int, n k8s.Notification) [][]spec.Property {
	if v.late(n.Handler) {
		return one(spec.LateHandler)
	}
	prev := v.prevAbout(i)
	name := spec.InformerConverges
	for _, rl := range v.relists() {
		if rl.at > prev && rl.at != i && !rl.keys[n.Key()] {
			name = spec.RelistDeletes
		}
	}
	if len(v.order) > 0 && v.order[0] == n.Handler {
		for _, h := range v.order[1:] {
			if v.late(h) {
				return [][]spec.Property{{name}, {name, spec.LateHandler}}
			}
		}
	}
	return one(name)
}

// olderStates returns the real states of o's key (this life of it) older
// than o.
func (s *Subject) olderStates(o k8s.Object) []k8s.Object {
	var out []k8s.Object
	seen := map[int64]bool{}
	for rev := o.UID; rev < o.ResourceVersion; rev++ {
		for _, x := range s.KH.Objects(o.Key, rev) {
			if x.Key == o.Key && x.UID == o.UID && x.ResourceVersion < o.ResourceVersion && !seen[x.ResourceVersion] {
				seen[x.ResourceVersion] = true
				out = append(out, x)
			}
		}
	}
	return out
}

// legitimateRVs lists the resourceVersions §5.6 lets an informer adopt: a
// list's, a bookmark's, a watch event's other than the initial ADDED events.
func legitimateRVs(run *k8s.Run) map[int64]bool {
	ok := map[int64]bool{0: true}
	for _, l := range run.Lists {
		ok[l.Result.ResourceVersion] = true
	}
	for _, w := range run.Watches {
		start, err := k8s.WatchSemantic(w.Options)
		initial := err == nil && start.InitialState
		for _, e := range w.Events {
			if e.Type != k8s.Added {
				initial = false
			}
			if !initial {
				ok[e.Object.ResourceVersion] = true
			}
		}
	}
	return ok
}

// freshStart moves the informer's start after its first sync — a list, or a
// WatchList's state (the first the checker takes, k8s.CheckInformer) —
// when the sync was read at resourceVersion "0" (any) or not (!any), and
// expects FreshStart.
func freshStart(m *Mutant, r *rand.Rand, ok, any bool) bool {
	s := m.Subject
	if !ok {
		return false
	}
	run := s.Trace.K8s
	start, first := -1, int64(-1)
	var sem k8s.Semantic
	for i, e := range run.Entries {
		switch {
		case e.Start != nil && start < 0:
			start = i
		case first < 0 && e.List != nil && run.Lists[*e.List].Result.Status == nil && run.Lists[*e.List].Options.Continue == "":
			l := run.Lists[*e.List]
			first = l.Result.ResourceVersion
			sem, _, _ = k8s.ListSemantic(l.Options)
		case first < 0 && e.WatchEvent != nil && e.WatchEvent.Event.InitialEventsEnd:
			first = e.WatchEvent.Event.Object.ResourceVersion
			ws, _ := k8s.WatchSemantic(run.Watches[e.WatchEvent.Watch].Options)
			sem = ws.Semantic
		}
	}
	if start < 0 || first < 0 || first >= s.head() || (sem == k8s.Any) != any {
		return false
	}
	rev := first + 1 + r.Int63n(s.head()-first)
	m.tr().K8s.Entries[start].Start = &k8s.StartEntry{Revision: rev}
	m.Expect = one(spec.FreshStart)
	m.whatf("%s: the informer started when %d was committed; its first sync (%s) is at %d", entryWhere(start), rev, sem, first)
	return true
}
