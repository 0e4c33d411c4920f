package mutate

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
)

// The semantic operators on Kubernetes lists and watches (docs/SPEC.md §4,
// and §3 through §4.3). Operators marked listwatch apply only to runs that
// are lists and watches alone (no informer log), where a changed list or
// watch changes nothing else.

// k8sSubject reports whether s has a clean Kubernetes run; listwatch
// demands that it has no informer entries.
func k8sSubject(s *Subject, listwatch bool) bool {
	return s.k8sClean && (!listwatch || !s.informer)
}

// watchStart returns how k8s watch w starts, after the apiserver's
// defaulting (k8s.CheckWatch), and the index of its first event after the
// initial state (the ADDED run, and the end bookmark). ok is false for a
// refused or invalid watch.
func watchStart(c k8s.WatchCall) (start k8s.WatchStart, changes int, ok bool) {
	start, err := k8s.WatchSemantic(c.Options)
	if err != nil || c.Status != nil || (len(c.Events) > 0 && c.Events[0].Type == k8s.Error) {
		return start, 0, false
	}
	if start.InitialState && c.Options.SendInitialEvents == nil && c.Options.AllowWatchBookmarks {
		for _, e := range c.Events {
			if e.Type != k8s.Added {
				if e.Type == k8s.Bookmark && e.InitialEventsEnd {
					start.EndBookmark = true
				}
				break
			}
		}
	}
	if start.InitialState {
		for changes < len(c.Events) && c.Events[changes].Type == k8s.Added {
			changes++
		}
		if start.EndBookmark {
			if changes == len(c.Events) {
				return start, 0, false // the state never ended
			}
			changes++
		}
	}
	return start, changes, true
}

// watchEntries returns the indexes in run.Entries of watch w's events.
func watchEntries(run *k8s.Run, w int) []int {
	var out []int
	for i, e := range run.Entries {
		if e.WatchEvent != nil && e.WatchEvent.Watch == w {
			out = append(out, i)
		}
	}
	return out
}

func isChange(e k8s.WatchEvent) bool {
	return e.Type == k8s.Added || e.Type == k8s.Modified || e.Type == k8s.Deleted
}

// setEvent replaces the event of entry i (a watch event).
func setEvent(run *k8s.Run, i int, ev k8s.WatchEvent) {
	we := *run.Entries[i].WatchEvent
	we.Event = ev
	run.Entries[i].WatchEvent = &we
}

// k8sWatchSite picks a k8s watch of a list-and-watch run that accepts.
func k8sWatchSite(m *Mutant, r *rand.Rand, accept func(c k8s.WatchCall, start k8s.WatchStart, changes int) bool) (int, k8s.WatchStart, int, bool) {
	s := m.Subject
	if !k8sSubject(s, true) {
		return 0, k8s.WatchStart{}, 0, false
	}
	var ws []int
	for i, c := range s.Trace.K8s.Watches {
		if start, changes, ok := watchStart(c); ok && accept(c, start, changes) {
			ws = append(ws, i)
		}
	}
	if len(ws) == 0 {
		return 0, k8s.WatchStart{}, 0, false
	}
	w := pickOne(r, ws)
	start, changes, _ := watchStart(s.Trace.K8s.Watches[w])
	return w, start, changes, true
}

// compactionMayHide returns the alternative §3.11 name for a skip of
// revision rev in a Kubernetes watch: the records have no times (format
// version 1), so when some compaction above rev was asked for, it may have
// been in force when the skip showed, and the skip is then CompactedCancel.
func compactionMayHide(s *Subject, rev int64, names [][]spec.Property) [][]spec.Property {
	if rev < s.maxCompact() {
		return append(names, []spec.Property{spec.CompactedCancel})
	}
	return names
}

func k8sWhere(w, x int) string { return fmt.Sprintf("k8s watch %d, event %d", w, x) }

// pageAt returns what list l's page holds when served at revision rev: the
// objects after its start key, as many as the recorded page when a continue
// token follows, all of them on the last page.
func pageAt(s *Subject, l k8s.ListCall, sem k8s.Semantic, rev int64) []k8s.Object {
	want := s.KH.Objects(l.Prefix, rev)
	after := l.Result.ContinueAfter
	if sem == k8s.Continuation {
		after = l.Options.Continue
	}
	if after != "" {
		want = want[sort.Search(len(want), func(i int) bool { return want[i].Key > after }):]
	}
	if l.Result.Continue != "" {
		want = want[:min(len(l.Result.Items), len(want))]
	}
	return want
}

// listSite picks a successful list of a clean run that accepts.
func listSite(m *Mutant, r *rand.Rand, listwatch bool, accept func(i int, l k8s.ListCall, sem k8s.Semantic, rv int64) bool) (int, k8s.Semantic, int64, bool) {
	s := m.Subject
	if !k8sSubject(s, listwatch) {
		return 0, "", 0, false
	}
	var ls []int
	for i, l := range s.Trace.K8s.Lists {
		sem, rv, err := k8s.ListSemantic(l.Options)
		if err == nil && l.Result.Status == nil && accept(i, l, sem, rv) {
			ls = append(ls, i)
		}
	}
	if len(ls) == 0 {
		return 0, "", 0, false
	}
	i := pickOne(r, ls)
	sem, rv, _ := k8s.ListSemantic(s.Trace.K8s.Lists[i].Options)
	return i, sem, rv, true
}

// continuationsOf returns the lists whose first page is list i.
func continuationsOf(run *k8s.Run, i int) []int {
	if run.Lists[i].Result.Continue == "" {
		return nil // a last page is no first page of anything
	}
	var out []int
	for j := i + 1; j < len(run.Lists); j++ {
		if f := run.Lists[j].First; f != nil && reflect.DeepEqual(*f, run.Lists[i].Result) {
			out = append(out, j)
		}
	}
	return out
}

// continueAfter returns the continue key of a page like r whose last item
// is last: the recorded token's relation to its page's last item kept (the
// apiserver's token encodes the last key and "\x00", PrepareContinueToken).
func continueAfter(r k8s.ListResult, last string) string {
	if n := len(r.Items); n > 0 && strings.HasPrefix(r.Continue, r.Items[n-1].Key) {
		return last + strings.TrimPrefix(r.Continue, r.Items[n-1].Key)
	}
	return last
}

// setResult replaces list i's result, and the first page of its continuations.
func setResult(run *k8s.Run, i int, res k8s.ListResult) {
	conts := continuationsOf(run, i)
	run.Lists[i].Result = res
	for _, j := range conts {
		f := res
		run.Lists[j].First = &f
	}
}

func listWhere(i int) string { return fmt.Sprintf("k8s list %d", i) }

var k8sOperators = []*Operator{
	{
		Name: "k8s-list-stale", Kind: Semantic,
		Doc: "serves a list (state and resourceVersion) at a revision its semantic forbids: a consistent list " +
			"older than what was committed before it, NotOlderThan N below N, Exact N elsewhere, a continuation " +
			"off its first page's revision (§4.1 ListResourceVersion)",
		Properties: []spec.Property{spec.ListResourceVersion},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			i, sem, rv, ok := listSite(m, r, true, func(_ int, l k8s.ListCall, sem k8s.Semantic, _ int64) bool { return sem != k8s.Any })
			if !ok {
				return false
			}
			l := s.Trace.K8s.Lists[i]
			lo, hi := max(s.H.Base(), 1), l.Result.ResourceVersion
			inconsistent := sem == k8s.Continuation && l.First != nil && l.First.Status != nil
			bad := func(S int64) bool {
				switch {
				case sem == k8s.MostRecent, inconsistent:
					// The inconsistent continuation (the token of a 410)
					// reads the latest revision: a consistent read (§4.5).
					return S < l.Before
				case sem == k8s.NotOlderThan:
					return S < rv
				case sem == k8s.Exact:
					return S != rv
				case sem == k8s.Continuation:
					return l.First != nil && S != l.First.ResourceVersion
				}
				return false
			}
			for range tries {
				S := lo + r.Int63n(max(hi-lo, 1))
				items := pageAt(s, l, sem, S)
				if !bad(S) || (l.Result.Continue == "" && l.Options.Limit > 0 && int64(len(items)) > l.Options.Limit) ||
					(l.Result.Continue != "" && len(items) == 0) {
					continue
				}
				res := l.Result
				res.ResourceVersion, res.Items = S, items
				if res.Continue != "" {
					// A stale page's token still starts the next page right
					// after its last item (§4.2), as the recorded one did.
					res.Continue = continueAfter(l.Result, items[len(items)-1].Key)
				}
				setResult(m.tr().K8s, i, res)
				m.Expect = one(spec.ListResourceVersion)
				m.whatf("%s (%s%s): served at revision %d instead of %d", listWhere(i), sem, rvString(rv), S, l.Result.ResourceVersion)
				return true
			}
			return false
		},
	},
	{
		Name: "k8s-list-drop-item", Kind: Semantic,
		Doc:        "leaves an object out of a list page (not the last of a page a continue token follows) (§4.2 ListSnapshot)",
		Properties: []spec.Property{spec.ListSnapshot},
		apply: func(m *Mutant, r *rand.Rand) bool {
			i, _, _, ok := listSite(m, r, false, func(_ int, l k8s.ListCall, _ k8s.Semantic, _ int64) bool {
				n := len(l.Result.Items)
				return n > 1 || (n == 1 && l.Result.Continue == "")
			})
			if !ok {
				return false
			}
			l := &m.tr().K8s.Lists[i]
			n := len(l.Result.Items)
			if l.Result.Continue != "" {
				n--
			}
			x := r.Intn(n)
			res := l.Result
			res.Items = slices.Delete(slices.Clone(res.Items), x, x+1)
			m.whatf("%s: %q left out", listWhere(i), l.Result.Items[x].Key)
			setResult(m.tr().K8s, i, res)
			m.Expect = one(spec.ListSnapshot)
			return true
		},
	},
	{
		Name: "k8s-list-extra-item", Kind: Semantic,
		Doc:        "adds an object no write stored, right after a listed one (§4.2 ListSnapshot)",
		Properties: []spec.Property{spec.ListSnapshot},
		apply: func(m *Mutant, r *rand.Rand) bool {
			i, _, _, ok := listSite(m, r, false, func(_ int, l k8s.ListCall, _ k8s.Semantic, _ int64) bool { return len(l.Result.Items) > 0 })
			if !ok {
				return false
			}
			l := &m.tr().K8s.Lists[i]
			x := r.Intn(len(l.Result.Items))
			o := l.Result.Items[x]
			o.Key += "\x00mutant"
			res := l.Result
			res.Items = slices.Insert(slices.Clone(res.Items), x+1, o)
			setResult(m.tr().K8s, i, res)
			m.Expect = one(spec.ListSnapshot)
			m.whatf("%s: %q added", listWhere(i), o.Key)
			return true
		},
	},
	{
		Name: "k8s-list-corrupt-item", Kind: Semantic,
		Doc:        "changes a listed object's value, resourceVersion or uid (§4.2 ListSnapshot)",
		Properties: []spec.Property{spec.ListSnapshot},
		apply: func(m *Mutant, r *rand.Rand) bool {
			i, _, _, ok := listSite(m, r, false, func(_ int, l k8s.ListCall, _ k8s.Semantic, _ int64) bool { return len(l.Result.Items) > 0 })
			if !ok {
				return false
			}
			l := &m.tr().K8s.Lists[i]
			res := l.Result
			res.Items = slices.Clone(res.Items)
			x := r.Intn(len(res.Items))
			field := corruptObject(&res.Items[x], r)
			setResult(m.tr().K8s, i, res)
			m.Expect = one(spec.ListSnapshot)
			m.whatf("%s: %q has %s", listWhere(i), res.Items[x].Key, field)
			return true
		},
	},
	{
		Name: "k8s-list-unsorted", Kind: Semantic,
		Doc:        "swaps two adjacent objects of a list page: not in key order (§4.2 ListSnapshot)",
		Properties: []spec.Property{spec.ListSnapshot},
		apply: func(m *Mutant, r *rand.Rand) bool {
			i, _, _, ok := listSite(m, r, false, func(_ int, l k8s.ListCall, _ k8s.Semantic, _ int64) bool { return len(l.Result.Items) > 1 })
			if !ok {
				return false
			}
			l := &m.tr().K8s.Lists[i]
			res := l.Result
			res.Items = slices.Clone(res.Items)
			x := r.Intn(len(res.Items) - 1)
			res.Items[x], res.Items[x+1] = res.Items[x+1], res.Items[x]
			setResult(m.tr().K8s, i, res)
			m.Expect = one(spec.ListSnapshot)
			m.whatf("%s: items %d and %d swapped", listWhere(i), x, x+1)
			return true
		},
	},
	{
		Name: "k8s-list-bad-continue", Kind: Semantic,
		Doc: "moves a page's continue token: before the page's last item (the next page repeats items) or past the " +
			"next object at the page's revision (the next page skips it) (§4.2 ListSnapshot: a token starts the next " +
			"page right after the page's last item)",
		Properties: []spec.Property{spec.ListSnapshot},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			i, _, _, ok := listSite(m, r, false, func(_ int, l k8s.ListCall, _ k8s.Semantic, _ int64) bool {
				return l.Result.Continue != "" && len(l.Result.Items) > 0
			})
			if !ok {
				return false
			}
			l := s.Trace.K8s.Lists[i]
			res := l.Result
			last := res.Items[len(res.Items)-1].Key
			var next []k8s.Object
			for _, o := range s.KH.Objects(l.Prefix, res.ResourceVersion) {
				if o.Key > res.Continue {
					next = append(next, o)
				}
			}
			if len(next) > 0 && r.Intn(2) == 0 {
				res.Continue = next[0].Key
				m.whatf("%s: continue token after %q, past the next object %q at revision %d (the page ends at %q)", listWhere(i), res.Continue, next[0].Key, res.ResourceVersion, last)
			} else if len(last) > 1 {
				res.Continue = last[:len(last)-1]
				m.whatf("%s: continue token after %q, before the page's last item %q", listWhere(i), res.Continue, last)
			} else {
				return false
			}
			setResult(m.tr().K8s, i, res)
			m.Expect = one(spec.ListSnapshot)
			return true
		},
	},
	{
		Name: "k8s-list-false-token", Kind: Semantic,
		Doc: "makes a refused list hand out a continue token it may not: a 410 to a continuation whose token does not " +
			"continue where the expired page would have started, or a refusal of a list that is not a continuation " +
			"that hands one out (§4.5 Expired: only a 410 to a continuation hands out the inconsistent continuation's token)",
		Properties: []spec.Property{spec.Expired},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !k8sSubject(s, false) {
				return false
			}
			var ls []int
			for i, l := range s.Trace.K8s.Lists {
				if l.Result.Status != nil && l.Result.Status.Code != k8s.StatusBadRequest && l.Result.Status.Code != k8s.StatusInvalid {
					ls = append(ls, i)
				}
			}
			if len(ls) == 0 {
				return false
			}
			i := pickOne(r, ls)
			l := s.Trace.K8s.Lists[i]
			sem, _, err := k8s.ListSemantic(l.Options)
			if err != nil {
				return false
			}
			st := *l.Result.Status
			switch {
			case sem == k8s.Continuation && st.Code == k8s.StatusGone:
				st.Continue = l.Options.Continue + "\x00mutant"
				m.whatf("%s (%s, 410): hands out a token continuing after %q, not after %q", listWhere(i), sem, st.Continue, l.Options.Continue)
			case sem != k8s.Continuation:
				st.Continue = l.Prefix
				m.whatf("%s (%s, %d): hands out a continue token (after %q)", listWhere(i), sem, st.Code, st.Continue)
			default:
				return false
			}
			res := l.Result
			res.Status = &st
			run := m.tr().K8s
			for j := i + 1; j < len(run.Lists); j++ {
				if f := run.Lists[j].First; f != nil && reflect.DeepEqual(*f, l.Result) {
					c := res
					run.Lists[j].First = &c
				}
			}
			run.Lists[i].Result = res
			m.Expect = one(spec.Expired)
			return true
		},
	},
	{
		Name: "k8s-list-false-410", Kind: Semantic,
		Doc: "answers 410 Gone to a list that may not expire: not Exact, a continuation or NotOlderThan with a " +
			"limit (an inconsistent continuation, with the token of a 410, never), or reading a revision no " +
			"compaction reached (§4.5 Expired)",
		Properties: []spec.Property{spec.Expired},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			i, sem, rv, ok := listSite(m, r, true, func(i int, l k8s.ListCall, sem k8s.Semantic, rv int64) bool {
				if s.firstPage[i] {
					return false
				}
				inconsistent := sem == k8s.Continuation && l.First != nil && l.First.Status != nil
				asked := rv
				if sem == k8s.Continuation && l.First != nil {
					asked = l.First.ResourceVersion
				}
				mayExpire := sem == k8s.Exact || (sem == k8s.Continuation && !inconsistent) || (sem == k8s.NotOlderThan && l.Options.Limit > 0)
				return !mayExpire || asked >= s.maxCompact()
			})
			if !ok {
				return false
			}
			m.tr().K8s.Lists[i].Result = k8s.ListResult{Status: &k8s.Status{Code: k8s.StatusGone, Reason: "Expired", Message: "too old resource version (mutation)"}}
			m.Expect = one(spec.Expired)
			m.whatf("%s (%s%s): answered 410 Gone; the highest compaction asked for is %d", listWhere(i), sem, rvString(rv), s.maxCompact())
			return true
		},
	},
	{
		Name: "k8s-watch-false-410", Kind: Semantic,
		Doc: "refuses with 410 Gone a watch that may not expire: one that opens with a state, or one from N not " +
			"older than the head when it was answered (§4.5 Expired: a server's window is its own, judged by the head " +
			"then, the final head when the recording does not say)",
		Properties: []spec.Property{spec.Expired},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			w, start, _, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, start k8s.WatchStart, _ int) bool {
				answered := c.After
				if answered == 0 {
					answered = s.head()
				}
				return start.Semantic != k8s.Exact || start.From >= max(c.Before, answered)
			})
			if !ok {
				return false
			}
			run := m.tr().K8s
			run.Watches[w].Status = &k8s.Status{Code: k8s.StatusGone, Reason: "Expired", Message: "too old resource version (mutation)"}
			m.deleteEntries(func(_ int, e k8s.Entry) bool { return e.WatchEvent != nil && e.WatchEvent.Watch == w })
			rebuildWatchEvents(run)
			m.Expect = one(spec.Expired)
			m.whatf("k8s watch %d (%s from %d): refused with 410 Gone", w, start.Semantic, start.From)
			return true
		},
	},
	{
		Name: "k8s-watch-drop-event", Kind: Semantic,
		Doc: "drops a change a later change or bookmark shows missing, after the watch's first change " +
			"(§4.3 through §3.3 Reliable, §3.6 Bookmarkable; §3.11 when a compaction may have hidden it)",
		Properties: []spec.Property{spec.Reliable, spec.Bookmarkable, spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			w, _, changes, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, _ k8s.WatchStart, changes int) bool { return len(c.Events) > changes+2 })
			if !ok {
				return false
			}
			run := m.tr().K8s
			evs := run.Watches[w].Events
			var sites [][2]int // event, the one revealing it
			for x := changes + 1; x < len(evs); x++ {
				if !isChange(evs[x]) || !slices.ContainsFunc(evs[changes:x], isChange) {
					continue
				}
				for y := x + 1; y < len(evs); y++ {
					if e := evs[y]; e.Type == k8s.Error || (e.Type == k8s.Bookmark && e.Object.ResourceVersion < evs[x].Object.ResourceVersion) {
						break
					}
					if isChange(evs[y]) || evs[y].Type == k8s.Bookmark {
						sites = append(sites, [2]int{x, y})
						break
					}
				}
			}
			if len(sites) == 0 {
				return false
			}
			st := pickOne(r, sites)
			x := st[0]
			name := spec.Reliable
			if evs[st[1]].Type == k8s.Bookmark {
				name = spec.Bookmarkable
			}
			m.Expect = compactionMayHide(m.Subject, evs[x].Object.ResourceVersion, one(name))
			idx := watchEntries(run, w)
			m.spliceEntries(idx[x], 1)
			rebuildWatchEvents(run)
			m.whatf("%s: the %s of %q at %d dropped", k8sWhere(w, x), evs[x].Type, evs[x].Object.Key, evs[x].Object.ResourceVersion)
			return true
		},
	},
	{
		Name: "k8s-watch-duplicate-event", Kind: Semantic,
		Doc:        "repeats a change right after itself (§4.3 through §3.2 Unique)",
		Properties: []spec.Property{spec.Unique},
		apply: func(m *Mutant, r *rand.Rand) bool {
			w, _, changes, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, _ k8s.WatchStart, changes int) bool {
				return slices.ContainsFunc(c.Events[changes:], isChange)
			})
			if !ok {
				return false
			}
			run := m.tr().K8s
			evs := run.Watches[w].Events
			var xs []int
			for x := changes; x < len(evs); x++ {
				if isChange(evs[x]) {
					xs = append(xs, x)
				}
			}
			x := pickOne(r, xs)
			idx := watchEntries(run, w)
			m.spliceEntries(idx[x]+1, 0, run.Entries[idx[x]])
			rebuildWatchEvents(run)
			m.Expect = one(spec.Unique)
			m.whatf("%s: the %s of %q at %d sent twice", k8sWhere(w, x), evs[x].Type, evs[x].Object.Key, evs[x].Object.ResourceVersion)
			return true
		},
	},
	{
		Name: "k8s-watch-swap-events", Kind: Semantic,
		Doc: "swaps two consecutive changes of different revisions after the watch's first change: the earlier " +
			"one is skipped, then late (§4.3 through §3.3 Reliable; §3.1 Ordered describes it as well)",
		Properties: []spec.Property{spec.Reliable, spec.Ordered, spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			w, _, changes, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, _ k8s.WatchStart, changes int) bool { return len(c.Events) > changes+2 })
			if !ok {
				return false
			}
			run := m.tr().K8s
			evs := run.Watches[w].Events
			var xs []int
			for x := changes + 1; x+1 < len(evs); x++ {
				if isChange(evs[x]) && isChange(evs[x+1]) && evs[x].Object.ResourceVersion < evs[x+1].Object.ResourceVersion &&
					slices.ContainsFunc(evs[changes:x], isChange) {
					xs = append(xs, x)
				}
			}
			if len(xs) == 0 {
				return false
			}
			x := pickOne(r, xs)
			idx := watchEntries(run, w)
			setEvent(run, idx[x], evs[x+1])
			setEvent(run, idx[x+1], evs[x])
			rebuildWatchEvents(run)
			m.Expect = compactionMayHide(m.Subject, evs[x].Object.ResourceVersion, [][]spec.Property{{spec.Reliable}, {spec.Ordered}})
			m.whatf("%s: swapped with the next (revisions %d and %d)", k8sWhere(w, x), evs[x].Object.ResourceVersion, evs[x+1].Object.ResourceVersion)
			return true
		},
	},
	{
		Name: "k8s-watch-corrupt-object", Kind: Semantic,
		Doc:        "gives an ADDED or MODIFIED change a value no write stored (§4.3 through §3.3 Reliable)",
		Properties: []spec.Property{spec.Reliable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			return k8sChangeSite(m, r, func(e k8s.WatchEvent) bool { return e.Type == k8s.Added || e.Type == k8s.Modified },
				func(e *k8s.WatchEvent) string {
					old := e.Object.Value
					e.Object.Value = fresh(r)
					return fmt.Sprintf("value %q, not %q", e.Object.Value, old)
				}, spec.Reliable)
		},
	},
	{
		Name: "k8s-watch-wrong-type", Kind: Semantic,
		Doc: "sends an update as ADDED, or a creation as MODIFIED (§4.3: ADDED exactly for a creation, §3.9 IsCreate); " +
			"an update sent as ADDED right after the ADDED events a watch without an end bookmark opens with is read " +
			"as part of its state (§4.3), which then holds its key twice: §4.3 WatchStart",
		Properties: []spec.Property{spec.IsCreate, spec.WatchStart},
		apply: func(m *Mutant, r *rand.Rand) bool {
			return k8sChangeSite(m, r, func(e k8s.WatchEvent) bool { return e.Type == k8s.Added || e.Type == k8s.Modified },
				func(e *k8s.WatchEvent) string {
					old := e.Type
					if e.Type == k8s.Added {
						e.Type = k8s.Modified
					} else {
						e.Type = k8s.Added
					}
					return fmt.Sprintf("%s instead of %s", e.Type, old)
				}, spec.IsCreate)
		},
	},
	{
		Name: "k8s-watch-drop-initial", Kind: Semantic,
		Doc:        "leaves an object out of a WatchList's initial events (§4.3 WatchStart)",
		Properties: []spec.Property{spec.WatchStart},
		apply: func(m *Mutant, r *rand.Rand) bool {
			w, _, changes, ok := k8sWatchSite(m, r, func(_ k8s.WatchCall, start k8s.WatchStart, changes int) bool {
				return start.EndBookmark && changes >= 2
			})
			if !ok {
				return false
			}
			run := m.tr().K8s
			x := r.Intn(changes - 1)
			evs := run.Watches[w].Events
			if m.Subject.wasAState(run.Watches[w].Prefix, slices.Delete(slices.Clone(evs[:changes-1]), x, x+1), evs[changes-1].Object.ResourceVersion) {
				// What is left is a state that really was, followed by
				// changes it skipped (§3's names): another fault.
				return false
			}
			idx := watchEntries(run, w)
			o := evs[x].Object
			m.spliceEntries(idx[x], 1)
			rebuildWatchEvents(run)
			m.Expect = one(spec.WatchStart)
			m.whatf("%s: the initial ADDED of %q left out", k8sWhere(w, x), o.Key)
			return true
		},
	},
	{
		Name: "k8s-watch-unsorted-initial", Kind: Semantic,
		Doc:        "swaps two adjacent initial events of a WatchList: not sorted by key (§4.4 InitialEventsEnd)",
		Properties: []spec.Property{spec.InitialEventsEnd},
		apply: func(m *Mutant, r *rand.Rand) bool {
			w, _, changes, ok := k8sWatchSite(m, r, func(_ k8s.WatchCall, start k8s.WatchStart, changes int) bool {
				return start.EndBookmark && changes >= 3
			})
			if !ok {
				return false
			}
			run := m.tr().K8s
			evs := run.Watches[w].Events
			x := r.Intn(changes - 2)
			idx := watchEntries(run, w)
			setEvent(run, idx[x], evs[x+1])
			setEvent(run, idx[x+1], evs[x])
			rebuildWatchEvents(run)
			m.Expect = one(spec.InitialEventsEnd)
			m.whatf("%s: initial events %d and %d swapped", k8sWhere(w, x), x, x+1)
			return true
		},
	},
	{
		Name: "k8s-watch-misplaced-end", Kind: Semantic,
		Doc: "removes the k8s.io/initial-events-end annotation from the bookmark that ends a requested WatchList's " +
			"initial events, or puts it on a later bookmark (§4.4 InitialEventsEnd)",
		Properties: []spec.Property{spec.InitialEventsEnd},
		apply: func(m *Mutant, r *rand.Rand) bool {
			w, _, changes, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, start k8s.WatchStart, changes int) bool {
				return start.EndBookmark
			})
			if !ok {
				return false
			}
			run := m.tr().K8s
			c := run.Watches[w]
			idx := watchEntries(run, w)
			var later []int
			for x := changes; x < len(c.Events); x++ {
				if c.Events[x].Type == k8s.Bookmark {
					later = append(later, x)
				}
			}
			explicit := c.Options.SendInitialEvents != nil
			switch {
			case len(later) > 0 && (!explicit || r.Intn(2) == 0):
				x := pickOne(r, later)
				e := c.Events[x]
				e.InitialEventsEnd = true
				setEvent(run, idx[x], e)
				m.whatf("%s: a later bookmark (at %d) annotated initial-events-end", k8sWhere(w, x), e.Object.ResourceVersion)
			case explicit:
				e := c.Events[changes-1]
				e.InitialEventsEnd = false
				setEvent(run, idx[changes-1], e)
				m.whatf("%s: the bookmark ending the initial events not annotated", k8sWhere(w, changes-1))
			default:
				return false
			}
			rebuildWatchEvents(run)
			m.Expect = one(spec.InitialEventsEnd)
			return true
		},
	},
	{
		Name: "k8s-watch-skip-compacted", Kind: Semantic,
		Doc: "moves the resourceVersion of a watch from N down, below the compaction in force when it was answered, " +
			"over matching changes, keeping its events: compacted history skipped silently instead of 410 " +
			"(§4.3 through §3.11 CompactedCancel)",
		Properties: []spec.Property{spec.CompactedCancel},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			var revs []int64
			w, start, _, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, start k8s.WatchStart, changes int) bool {
				if start.InitialState || start.Semantic != k8s.Exact || c.CompactRevision < 2 ||
					!slices.ContainsFunc(c.Events, func(e k8s.WatchEvent) bool { return isChange(e) || e.Type == k8s.Bookmark }) {
					return false
				}
				return len(s.prefixRevisions(c.Prefix, 2, min(c.CompactRevision-1, start.From))) > 0
			})
			if !ok {
				return false
			}
			c := m.tr().K8s.Watches[w]
			revs = s.prefixRevisions(c.Prefix, 2, min(c.CompactRevision-1, start.From))
			rev := pickOne(r, revs)
			n := 1 + r.Int63n(rev-1)
			m.tr().K8s.Watches[w].Options.ResourceVersion = rvOf(n)
			m.Expect = one(spec.CompactedCancel)
			m.whatf("k8s watch %d: from %s instead of %d; compacted at %d when answered, its change at %d is skipped", w, rvOf(n), start.From, c.CompactRevision, rev)
			return true
		},
	},
	{
		Name: "k8s-bookmark-beyond-head", Kind: Semantic,
		Doc:        "appends a bookmark at a revision no write reached to a watch that has all changes up to the head (§4.3 through §3.6 Bookmarkable)",
		Properties: []spec.Property{spec.Bookmarkable},
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			w, _, _, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, start k8s.WatchStart, changes int) bool {
				last := int64(0)
				for _, e := range c.Events[max(changes-1, 0):] {
					if e.Type == k8s.Error {
						return false
					}
					if isChange(e) || e.Type == k8s.Bookmark {
						last = max(last, e.Object.ResourceVersion)
					}
				}
				if start.InitialState && !start.EndBookmark && changes == len(c.Events) {
					return false
				}
				return last > 0 && len(s.prefixRevisions(c.Prefix, last+1, s.head())) == 0
			})
			if !ok {
				return false
			}
			run := m.tr().K8s
			R := s.head() + 1 + int64(r.Intn(5))
			idx := watchEntries(run, w)
			e := k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: w, Event: k8s.WatchEvent{Type: k8s.Bookmark, Object: k8s.Object{ResourceVersion: R}}}}
			m.spliceEntries(idx[len(idx)-1]+1, 0, e)
			rebuildWatchEvents(run)
			m.Expect = one(spec.Bookmarkable)
			m.whatf("k8s watch %d: a bookmark at %d appended; the head is %d", w, R, s.head())
			return true
		},
	},
}

// k8sChangeSite picks a change after a watch's initial state that accepts,
// changes it and expects p.
func k8sChangeSite(m *Mutant, r *rand.Rand, accept func(k8s.WatchEvent) bool, change func(*k8s.WatchEvent) string, p spec.Property) bool {
	w, _, changes, ok := k8sWatchSite(m, r, func(c k8s.WatchCall, _ k8s.WatchStart, changes int) bool {
		return slices.ContainsFunc(c.Events[changes:], accept)
	})
	if !ok {
		return false
	}
	run := m.tr().K8s
	evs := run.Watches[w].Events
	var xs []int
	for x := changes; x < len(evs); x++ {
		if accept(evs[x]) {
			xs = append(xs, x)
		}
	}
	x := pickOne(r, xs)
	e := evs[x]
	what := change(&e)
	setEvent(run, watchEntries(run, w)[x], e)
	rebuildWatchEvents(run)
	m.Expect = one(p)
	if _, after, ok := watchStart(run.Watches[w]); ok && after > changes {
		// The changed event is now an ADDED right after the ADDED events
		// the watch opens with (no end bookmark closes them): §4.3 reads
		// an ADDED that is not a creation as part of the state, and the
		// state so read holds the changed event's key twice (a change
		// right after a state is of a key the state holds) — no
		// revision's objects (§4.3 WatchStart), whatever p says of it
		// as a change.
		m.Expect = one(spec.WatchStart)
		m.tag("joins the state")
	}
	m.whatf("%s: the %s of %q at %d: %s", k8sWhere(w, x), evs[x].Type, evs[x].Object.Key, evs[x].Object.ResourceVersion, what)
	return true
}

// wasAState reports whether some leading run of the ADDED events added —
// all of them, or fewer, leaving as changes only ADDED events that are
// creations (§4.3) — is the state under prefix at a revision up to top:
// a reading of the stream in which it opens with a real state.
func (s *Subject) wasAState(prefix string, added []k8s.WatchEvent, top int64) bool {
	lowest := len(added)
	for lowest > 0 && added[lowest-1].Object.UID == added[lowest-1].Object.ResourceVersion {
		lowest--
	}
	for k := len(added); k >= lowest; k-- {
		objs := make([]k8s.Object, k)
		for i, e := range added[:k] {
			objs[i] = e.Object
		}
		sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
		for rev := top; rev >= s.H.Base(); rev-- {
			if slices.Equal(objs, s.KH.Objects(prefix, rev)) {
				return true
			}
		}
	}
	return false
}

// prefixRevisions returns the revisions in [lo, hi] with an event under prefix.
func (s *Subject) prefixRevisions(prefix string, lo, hi int64) []int64 {
	var out []int64
	for _, c := range s.H.Between(lo, hi) {
		for _, e := range c.Events {
			if strings.HasPrefix(e.KV.Key, prefix) {
				out = append(out, c.Revision)
				break
			}
		}
	}
	return out
}

func rvOf(n int64) string { return k8s.RV(n) }

func rvString(rv int64) string {
	if rv == 0 {
		return ""
	}
	return fmt.Sprintf(" %d", rv)
}

// corruptObject changes one field of o and says which.
func corruptObject(o *k8s.Object, r *rand.Rand) string {
	switch r.Intn(3) {
	case 0:
		old := o.Value
		o.Value = fresh(r)
		return fmt.Sprintf("value %q, not %q", o.Value, old)
	case 1:
		old := o.ResourceVersion
		o.ResourceVersion = bump(old, r)
		return fmt.Sprintf("resourceVersion %d, not %d", o.ResourceVersion, old)
	default:
		old := o.UID
		o.UID = bump(old, r)
		return fmt.Sprintf("uid %d, not %d", o.UID, old)
	}
}

// The equivalence and weakening operators on Kubernetes watches.
var k8sEquivalenceOperators = []*Operator{
	{
		Name: "k8s-add-bookmark", Kind: Equivalence,
		Doc: "inserts a truthful bookmark into a watch that allows them, after its initial state: at a revision at " +
			"or above what it delivered, below the next change under its prefix, not above a later bookmark (§4.3, §3.6)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if !s.k8sClean {
				return false
			}
			run := m.tr().K8s
			var ws []int
			for i, c := range run.Watches {
				if start, _, ok := watchStart(c); ok && c.Options.AllowWatchBookmarks && (!start.InitialState || start.EndBookmark) {
					ws = append(ws, i)
				}
			}
			if len(ws) == 0 {
				return false
			}
			w := pickOne(r, ws)
			c := run.Watches[w]
			start, changes, _ := watchStart(c)
			end := len(c.Events)
			if x := slices.IndexFunc(c.Events, func(e k8s.WatchEvent) bool { return e.Type == k8s.Error }); x >= 0 {
				end = x
			}
			first := changes - 1 // after the end bookmark; −1: before everything
			if first >= end {
				return false
			}
			x := first + r.Intn(end-first)
			last := start.From
			for _, e := range c.Events[max(first, 0) : x+1] {
				if isChange(e) || e.Type == k8s.Bookmark {
					last = max(last, e.Object.ResourceVersion)
				}
			}
			hi := s.head()
			if next := s.prefixRevisions(c.Prefix, last+1, s.head()); len(next) > 0 {
				hi = next[0] - 1
			}
			for _, e := range c.Events[x+1 : end] {
				if isChange(e) || e.Type == k8s.Bookmark {
					hi = min(hi, e.Object.ResourceVersion) // later revisions do not go back
				}
			}
			if last < 1 || hi < last {
				return false
			}
			R := last + r.Int63n(hi-last+1)
			e := k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: w, Event: k8s.WatchEvent{Type: k8s.Bookmark, Object: k8s.Object{ResourceVersion: R}}}}
			idx := watchEntries(run, w)
			at := 0
			if x >= 0 {
				at = idx[x] + 1
			} else if len(idx) > 0 {
				at = idx[0]
			} else {
				return false
			}
			m.spliceEntries(at, 0, e)
			rebuildWatchEvents(run)
			m.whatf("k8s watch %d: a bookmark at %d after event %d", w, R, x)
			return true
		},
	},
	{
		Name: "k8s-truncate-watch", Kind: Weakening,
		Doc: "drops the tail of a Kubernetes watch's events, anywhere, even inside its initial state (a stream may end at any time, §6)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			if m.Subject.Trace.K8s == nil || m.Subject.informer {
				return false
			}
			run := m.tr().K8s
			var ws []int
			for i, c := range run.Watches {
				if len(c.Events) > 0 {
					ws = append(ws, i)
				}
			}
			if len(ws) == 0 {
				return false
			}
			w := pickOne(r, ws)
			k := r.Intn(len(run.Watches[w].Events))
			idx := watchEntries(run, w)
			drop := map[int]bool{}
			for _, i := range idx[k:] {
				drop[i] = true
			}
			m.deleteEntries(func(i int, _ k8s.Entry) bool { return drop[i] })
			rebuildWatchEvents(run)
			if start, changes, ok := watchStart(m.Subject.Trace.K8s.Watches[w]); ok && start.InitialState && k < changes {
				m.tag("inside-initial-state")
			}
			m.whatf("k8s watch %d: its events from %d on (of %d) dropped", w, k, len(idx))
			return true
		},
	},
}
