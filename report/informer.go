package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// informerView reads an informer run's log: what each entry says, the
// revision the informer had reached at it, and what the store held then.
type informerView struct {
	t   *traces.Trace
	run *k8s.Run
	h   *kv.History
	// reached[i] is the highest revision the informer had seen by entry i:
	// its start, lists, watch events and the objects it handed its handlers.
	reached []int64
	// byKey is the committed history of each key, in revision order.
	byKey map[string][]kv.Event
}

func newInformerView(t *traces.Trace, h *kv.History) *informerView {
	iv := &informerView{t: t, run: t.K8s, h: h, byKey: map[string][]kv.Event{}}
	var r int64
	for _, e := range iv.run.Entries {
		switch {
		case e.Start != nil:
			r = max(r, e.Start.Revision)
		case e.List != nil && iv.run.Lists[*e.List].Result.Status == nil:
			r = max(r, iv.run.Lists[*e.List].Result.ResourceVersion)
		case e.WatchEvent != nil && e.WatchEvent.Event.Status == nil:
			r = max(r, e.WatchEvent.Event.Object.ResourceVersion)
		case e.Notification != nil && e.Notification.New != nil:
			// A handler was given it: the informer had seen it.
			r = max(r, e.Notification.New.ResourceVersion)
		}
		iv.reached = append(iv.reached, r)
	}
	if h != nil {
		for _, c := range h.Commits() {
			for _, e := range c.Events {
				iv.byKey[e.KV.Key] = append(iv.byKey[e.KV.Key], e)
			}
		}
	}
	return iv
}

// line is the trace line of entry i (0 when not recorded).
func (iv *informerView) line(i int) int {
	if iv.t.K8sInfo == nil || i >= len(iv.t.K8sInfo.Entries) {
		return 0
	}
	return iv.t.K8sInfo.Entries[i].Line
}

// time is when entry i happened, or "" when the trace does not say.
func (iv *informerView) time(i int) string {
	if iv.t.K8sInfo == nil || iv.t.K8sInfo.Untimed || i >= len(iv.t.K8sInfo.Entries) {
		return ""
	}
	return nanos(iv.t.K8sInfo.Entries[i].Time)
}

// objects returns the objects entry i carries.
func (iv *informerView) objects(i int) []k8s.Object {
	e := iv.run.Entries[i]
	switch {
	case e.Notification != nil:
		var out []k8s.Object
		if e.Notification.Old != nil {
			out = append(out, *e.Notification.Old)
		}
		if e.Notification.New != nil {
			out = append(out, *e.Notification.New)
		}
		return out
	case e.List != nil:
		return iv.run.Lists[*e.List].Result.Items
	case e.WatchEvent != nil:
		return []k8s.Object{e.WatchEvent.Event.Object}
	}
	return nil
}

// keysOf expands the violation's keys: a key that names no object but is
// a prefix of some stands for them (at most 4).
func (iv *informerView) keysOf(v spec.Violation) []string {
	known := map[string]bool{}
	for k := range iv.byKey {
		known[k] = true
	}
	for i := range iv.run.Entries {
		for _, o := range iv.objects(i) {
			known[o.Key] = true
		}
	}
	var out []string
	for _, k := range v.Keys {
		if known[k] {
			out = append(out, k)
			continue
		}
		var under []string
		for o := range known {
			if strings.HasPrefix(o, k) {
				under = append(under, o)
			}
		}
		sort.Strings(under)
		if len(under) > 4 {
			under = under[:4]
		}
		out = append(out, under...)
	}
	return out
}

// focus returns the entries that show v: those at one of its revisions, on
// one of its keys when it names keys; else the entry where writes stopped
// (a convergence is judged there), else the last entry on its keys.
func (iv *informerView) focus(v spec.Violation) []int {
	revs := map[int64]bool{}
	for _, r := range v.Revisions {
		revs[r] = true
	}
	keys := iv.keysOf(v)
	onKey := func(o k8s.Object) bool { return len(keys) == 0 || contains(keys, o.Key) }
	var out []int
	for i, e := range iv.run.Entries {
		hit := false
		switch {
		case e.Start != nil:
			hit = revs[e.Start.Revision] && len(keys) == 0
		case e.SyncedRV != nil:
			hit = revs[*e.SyncedRV]
		case e.List != nil:
			l := iv.run.Lists[*e.List]
			hit = l.Result.Status == nil && revs[l.Result.ResourceVersion] && (len(v.Keys) == 0 || !contains(keys, v.Keys[0]))
		}
		for _, o := range iv.objects(i) {
			if onKey(o) && revs[o.ResourceVersion] {
				hit = true
			}
		}
		if hit {
			out = append(out, i)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i, e := range iv.run.Entries {
		if e.Quiesced {
			out = append(out, i)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := len(iv.run.Entries) - 1; i >= 0; i-- {
		for _, o := range iv.objects(i) {
			if onKey(o) {
				return []int{i}
			}
		}
	}
	return nil
}

// storeAt says what the store held under key at revision rev.
func (iv *informerView) storeAt(key string, rev int64) string {
	if iv.h == nil {
		return "?"
	}
	evs := iv.byKey[key]
	i := sort.Search(len(evs), func(i int) bool { return evs[i].Revision() > rev })
	if i == 0 {
		return "—"
	}
	e := evs[i-1]
	if e.Type == kv.Delete {
		return fmt.Sprintf("deleted@%d", e.Revision())
	}
	return fmt.Sprintf("%s@%d", showValue(e.KV.Value), e.Revision())
}

// logRow is one entry of the informer's log in a per-key table.
type logRow struct {
	Entry   int
	Line    int
	Time    string
	What    string
	Reached string
	Store   string
	// Views are the handlers' views of the key after the entry, in the
	// order of the table's handlers.
	Views []cell
	Focus bool
	Gap   bool
	// Hidden counts the entries a gap row stands for.
	Hidden int
	ID     string
}

// informerTable is one key's story: the informer's log entries on it,
// with the store's state at the revision the informer had reached, and
// each handler's view.
type informerTable struct {
	Key string
	// Timed says the trace recorded when each entry happened.
	Timed    bool
	Handlers []int
	Rows     []logRow
	// End is the store's state at its head, against the handlers' last views.
	End   string
	Ended []cell
}

// Span is the number of columns of the table.
func (t informerTable) Span() int {
	if t.Timed {
		return 6 + len(t.Handlers)
	}
	return 5 + len(t.Handlers)
}

// informerTables draws the informer's story for each key of v (or, when v
// names none, the log around the entries that show it).
func informerTables(t *traces.Trace, h *kv.History, v spec.Violation, panel string) []informerTable {
	if t.K8s == nil {
		return nil
	}
	iv := newInformerView(t, h)
	focus := map[int]bool{}
	for _, i := range iv.focus(v) {
		focus[i] = true
	}
	keys := iv.keysOf(v)
	if len(keys) == 0 {
		keys = []string{""}
	}
	if len(keys) > 4 {
		keys = keys[:4]
	}
	var tables []informerTable
	for ti, key := range keys {
		tables = append(tables, iv.table(key, focus, fmt.Sprintf("%s-log%d", panel, ti)))
	}
	return tables
}

func (iv *informerView) table(key string, focus map[int]bool, id string) informerTable {
	tab := informerTable{Key: displayKey(key), Timed: iv.t.K8sInfo != nil && !iv.t.K8sInfo.Untimed}
	if key == "" {
		tab.Key = "(every key)"
	}
	handlers := map[int]bool{}
	for _, e := range iv.run.Entries {
		switch {
		case e.HandlerAdded != nil:
			handlers[*e.HandlerAdded] = true
		case e.Notification != nil:
			handlers[e.Notification.Handler] = true
		}
	}
	for h := range handlers {
		tab.Handlers = append(tab.Handlers, h)
	}
	sort.Ints(tab.Handlers)
	views := map[int]*k8s.Object{}
	relevant := func(i int) bool {
		e := iv.run.Entries[i]
		if key == "" || e.Start != nil || e.HandlerAdded != nil || e.Quiesced || e.Resync || focus[i] {
			return true
		}
		if e.List != nil {
			return true // present or absent, a list says something of every key
		}
		for _, o := range iv.objects(i) {
			if o.Key == key {
				return true
			}
		}
		return false
	}
	var all []logRow
	var focusRows []int
	for i, e := range iv.run.Entries {
		if n := e.Notification; n != nil && n.Key() == key {
			switch n.Type {
			case k8s.OnDelete:
				views[n.Handler] = nil
			default:
				views[n.Handler] = n.New
			}
		}
		if !relevant(i) {
			continue
		}
		row := logRow{Entry: i, Line: iv.line(i), Time: iv.time(i), What: iv.describe(i, key), Focus: focus[i]}
		r := iv.reached[i]
		row.Reached = strconv.FormatInt(r, 10)
		if key != "" {
			row.Store = iv.storeAt(key, r)
		}
		for _, h := range tab.Handlers {
			c := viewCell(views[h], key)
			if key != "" && iv.h != nil && c.Text != endState(row.Store) {
				c.Class += " stale"
				c.Title += fmt.Sprintf("; the store held %s at revision %d", row.Store, r)
			}
			row.Views = append(row.Views, c)
		}
		if row.Focus {
			focusRows = append(focusRows, len(all))
		}
		all = append(all, row)
	}
	// The neighbourhood of the focus rows, with gaps for the rest.
	show := map[int]bool{}
	if len(all) <= maxLogRows {
		for i := range all {
			show[i] = true
		}
	}
	for _, f := range focusRows {
		for i := max(0, f-logRadius); i <= min(len(all)-1, f+logRadius); i++ {
			show[i] = true
		}
	}
	if len(focusRows) == 0 {
		for i := max(0, len(all)-2*logRadius); i < len(all); i++ {
			show[i] = true
		}
	}
	prev := -1
	first := true
	for i, row := range all {
		if !show[i] || len(tab.Rows) >= maxLogRows {
			continue
		}
		if i > prev+1 {
			tab.Rows = append(tab.Rows, logRow{Gap: true, Hidden: i - prev - 1})
		}
		prev = i
		if row.Focus && first {
			row.ID, first = id, false
		}
		tab.Rows = append(tab.Rows, row)
	}
	if prev < len(all)-1 {
		tab.Rows = append(tab.Rows, logRow{Gap: true, Hidden: len(all) - 1 - prev})
	}
	if key != "" && iv.h != nil {
		tab.End = fmt.Sprintf("store at its head (revision %d): %s", iv.h.Head(), iv.storeAt(key, iv.h.Head()))
		for _, h := range tab.Handlers {
			c := viewCell(views[h], key)
			if c.Text != endState(iv.storeAt(key, iv.h.Head())) {
				c.Class += " differs"
				c.Title = "differs from the store at its head"
			}
			tab.Ended = append(tab.Ended, c)
		}
	}
	return tab
}

// endState turns the store's "deleted@R" into what a handler shows for an
// object it does not hold.
func endState(s string) string {
	if strings.HasPrefix(s, "deleted@") {
		return "—"
	}
	return s
}

func viewCell(o *k8s.Object, key string) cell {
	if key == "" {
		return cell{}
	}
	if o == nil {
		return cell{Text: "—", Title: "not held"}
	}
	return cell{Text: fmt.Sprintf("%s@%d", showValue(o.Value), o.ResourceVersion), Class: "held", Title: fmt.Sprintf("holds %s at resourceVersion %d (uid %d)", displayKey(o.Key), o.ResourceVersion, o.UID)}
}

// describe says what entry i did, as it concerns key ("" for every key).
func (iv *informerView) describe(i int, key string) string {
	e := iv.run.Entries[i]
	obj := func(o *k8s.Object) string {
		if o == nil {
			return "(none)"
		}
		return fmt.Sprintf("%s=%s@%d", displayKey(o.Key), showValue(o.Value), o.ResourceVersion)
	}
	switch {
	case e.Start != nil:
		return fmt.Sprintf("informer started (revision %d committed)", e.Start.Revision)
	case e.HandlerAdded != nil:
		return fmt.Sprintf("handler %d added", *e.HandlerAdded)
	case e.Notification != nil:
		n := e.Notification
		s := fmt.Sprintf("handler %d: %s ", n.Handler, n.Type)
		switch n.Type {
		case k8s.OnUpdate:
			s += obj(n.Old) + " → " + obj(n.New)
		case k8s.OnDelete:
			s += obj(n.Old)
			if n.Tombstone {
				s += " (tombstone)"
			}
		default:
			s += obj(n.New)
		}
		if n.InInitialList {
			s += " (initial list)"
		}
		return s
	case e.HasSynced != nil:
		if *e.HasSynced < 0 {
			return "informer HasSynced"
		}
		return fmt.Sprintf("handler %d HasSynced", *e.HasSynced)
	case e.SyncedRV != nil:
		return fmt.Sprintf("last-synced resourceVersion %d", *e.SyncedRV)
	case e.List != nil:
		l := iv.run.Lists[*e.List]
		s := fmt.Sprintf("list %s (resourceVersion %q", displayKey(l.Prefix), l.Options.ResourceVersion)
		if l.Options.ResourceVersionMatch != "" {
			s += ", " + l.Options.ResourceVersionMatch
		}
		s += ")"
		if l.Result.Status != nil {
			return s + fmt.Sprintf(": %d %s", l.Result.Status.Code, l.Result.Status.Reason)
		}
		s += fmt.Sprintf(" at %d: %d items", l.Result.ResourceVersion, len(l.Result.Items))
		if key != "" {
			found := "absent"
			for _, o := range l.Result.Items {
				if o.Key == key {
					found = obj(&o)
				}
			}
			s += "; " + found
		}
		return s
	case e.WatchEvent != nil:
		ev := e.WatchEvent.Event
		s := fmt.Sprintf("watch %d: %s", e.WatchEvent.Watch, ev.Type)
		switch {
		case ev.Status != nil:
			s += fmt.Sprintf(" %d %s", ev.Status.Code, ev.Status.Reason)
		case ev.Type == k8s.Bookmark:
			s += fmt.Sprintf(" at %d", ev.Object.ResourceVersion)
			if ev.InitialEventsEnd {
				s += " (initial events end)"
			}
		default:
			s += " " + obj(&ev.Object)
		}
		return s
	case e.Resync:
		return "resync"
	case e.Quiesced:
		return "writes stopped: from here the informer must agree with the store"
	}
	return "?"
}

// EndSpan is the number of columns before the store's in the table.
func (t informerTable) EndSpan() int { return t.Span() - 1 - len(t.Handlers) }
