package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// The sizes that keep a page readable, whatever the size of the trace: the
// page shows the neighbourhood of each violation, never everything.
const (
	revisionPad    = 2  // revisions shown either side of each revision involved
	maxColumns     = 48 // revisions in one timeline
	maxKeyRows     = 20 // keys in one timeline
	responseRadius = 6  // responses shown either side of the violating one
	maxExtraRows   = 8  // other responses shown that deliver a revision involved
	opRows         = 16 // operations shown beside the one that shows a violation
	logRadius      = 6  // informer log entries shown either side of one involved
	maxLogRows     = 60 // informer log entries in one table
	maxDetail      = 160
)

// timeline is the committed history (revisions by keys) in a window of
// revisions, with the answers of one watch (or of operations) laid against
// it, one row each.
type timeline struct {
	Caption string
	Cols    []column
	Keys    []keyRow
	// HiddenKeys counts keys with commits in the window that are not shown.
	HiddenKeys int
	Rows       []answerRow
}

type column struct {
	Rev       int64
	Gap       bool // stands for revisions left out
	Focus     bool // a revision the violation names
	Compacted bool // a compaction at this revision
}

type keyRow struct {
	Key   string // as shown
	Focus bool
	Cells []cell
	raw   string
}

type cell struct {
	Text, Class, Title string
}

// answerRow is one watch response or operation against the timeline.
type answerRow struct {
	ID        string
	Label     string
	Line      int
	Time      string
	Kind      string
	Violating bool
	// Gap marks a row that stands for Hidden rows left out.
	Gap    bool
	Hidden int
	Cells  []cell
	Detail string
}

// columns lays out the revisions around revs: each ±revisionPad, within
// [lo, hi], with gap columns where revisions are left out.
func columns(revs []int64, lo, hi int64, focus map[int64]bool, compacted map[int64]bool) []column {
	pad := int64(revisionPad)
	for {
		set := map[int64]bool{}
		for _, r := range revs {
			for x := r - pad; x <= r+pad; x++ {
				if x >= lo && x <= hi {
					set[x] = true
				}
			}
		}
		var sorted []int64
		for r := range set {
			sorted = append(sorted, r)
		}
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		if len(sorted) > maxColumns && pad > 0 {
			pad--
			continue
		}
		if len(sorted) > maxColumns {
			sorted = sorted[:maxColumns]
		}
		var cols []column
		for i, r := range sorted {
			if i > 0 && r > sorted[i-1]+1 {
				cols = append(cols, column{Gap: true})
			}
			cols = append(cols, column{Rev: r, Focus: focus[r], Compacted: compacted[r]})
		}
		return cols
	}
}

// colIndex returns the column of rev, or -1.
func colIndex(cols []column, rev int64) int {
	for i, c := range cols {
		if !c.Gap && c.Rev == rev {
			return i
		}
	}
	return -1
}

// keyHistory lays the commits of h in cols out by key: the keys inRange
// admits, the focus keys first.
func keyHistory(h *kv.History, cols []column, focusKeys []string, inRange func(string) bool) (rows []keyRow, hidden int, events map[string]map[int64]kv.Event) {
	events = map[string]map[int64]kv.Event{}
	var keys []string
	for _, c := range cols {
		if c.Gap || h == nil {
			continue
		}
		cm, ok := h.Commit(c.Rev)
		if !ok {
			continue
		}
		for _, e := range cm.Events {
			k := e.KV.Key
			if !inRange(k) && !contains(focusKeys, k) {
				continue
			}
			if events[k] == nil {
				events[k] = map[int64]kv.Event{}
				keys = append(keys, k)
			}
			events[k][c.Rev] = e
		}
	}
	for _, k := range focusKeys {
		if events[k] == nil {
			events[k] = map[int64]kv.Event{}
			keys = append(keys, k)
		}
	}
	sort.SliceStable(keys, func(i, j int) bool {
		fi, fj := contains(focusKeys, keys[i]), contains(focusKeys, keys[j])
		if fi != fj {
			return fi
		}
		return keys[i] < keys[j]
	})
	if len(keys) > maxKeyRows {
		hidden = len(keys) - maxKeyRows
		keys = keys[:maxKeyRows]
	}
	for _, k := range keys {
		row := keyRow{Key: displayKey(k), Focus: contains(focusKeys, k), raw: k}
		for _, c := range cols {
			if c.Gap {
				row.Cells = append(row.Cells, cell{Class: "gap"})
				continue
			}
			e, ok := events[k][c.Rev]
			if !ok {
				row.Cells = append(row.Cells, cell{})
				continue
			}
			row.Cells = append(row.Cells, eventCell(e))
		}
		rows = append(rows, row)
	}
	return rows, hidden, events
}

func eventCell(e kv.Event) cell {
	if e.Type == kv.Delete {
		return cell{Text: "D", Class: "del", Title: "committed " + describeEvent(e)}
	}
	return cell{Text: "P", Class: "put", Title: "committed " + describeEvent(e)}
}

// watchFacts is what a watch delivered — by key and revision, the
// responses (by index) that delivered each event —, where it started, and
// how far it got: its last event or progress notification.
type watchFacts struct {
	delivered      map[string]map[int64][]int
	start, reached int64
}

func watchFactsOf(w *traces.Watch) *watchFacts {
	f := &watchFacts{delivered: map[string]map[int64][]int{}, start: w.Request.StartRevision}
	for i, r := range w.Responses {
		if r.Response.Created && f.start == 0 && !r.RevisionUnknown {
			f.start = r.Response.Revision + 1
		}
		for _, e := range r.Response.Events {
			k := e.KV.Key
			if f.delivered[k] == nil {
				f.delivered[k] = map[int64][]int{}
			}
			f.delivered[k][e.Revision()] = append(f.delivered[k][e.Revision()], i)
			f.reached = max(f.reached, e.Revision())
		}
		if r.Response.IsProgressNotify() && !r.RevisionUnknown {
			f.reached = max(f.reached, r.Response.Revision)
		}
	}
	return f
}

// watchTimeline draws one watch against the committed history h around
// its response ri and the revisions focus names; facts gives (and caches)
// what each watch delivered.
func watchTimeline(h *kv.History, w *traces.Watch, ri int, focus []int64, focusKeys []string, panel string, facts func(*traces.Watch) *watchFacts) *timeline {
	resp := w.Responses[ri].Response
	revs := append([]int64{}, focus...)
	for _, e := range resp.Events {
		revs = append(revs, e.Revision())
	}
	if resp.Revision > 0 && !w.Responses[ri].RevisionUnknown {
		revs = append(revs, resp.Revision)
	}
	if resp.CompactRevision > 0 {
		revs = append(revs, resp.CompactRevision)
	}
	if len(revs) == 0 && h != nil {
		revs = append(revs, h.Head())
	}
	lo, hi := int64(1), int64(1)
	if h != nil {
		lo, hi = h.Base(), h.Head()
	}
	for _, r := range revs {
		hi = max(hi, r)
		lo = min(lo, max(r, 1))
	}
	focusSet := map[int64]bool{}
	for _, r := range focus {
		focusSet[r] = true
	}
	compacted := map[int64]bool{}
	if h != nil {
		for _, c := range h.Compactions() {
			compacted[c] = true
		}
	}
	cols := columns(revs, lo, hi, focusSet, compacted)
	tl := &timeline{Cols: cols}
	tl.Caption = fmt.Sprintf("watch %d of client %d (line %d): %s", w.ID, w.Client, w.Line, describeWatchRequest(w.Request))
	keys, hidden, events := keyHistory(h, cols, focusKeys, w.Request.InRange)
	tl.Keys, tl.HiddenKeys = keys, hidden

	f := facts(w)
	delivered, start, reached := f.delivered, f.start, f.reached
	for ki := range tl.Keys {
		k := tl.Keys[ki].raw
		for ci, c := range cols {
			if c.Gap {
				continue
			}
			cl := &tl.Keys[ki].Cells[ci]
			by := delivered[k][c.Rev]
			e, committed := events[k][c.Rev]
			switch {
			case len(by) > 0:
				cl.Class += " delivered"
				cl.Text += responseNumbers(by[:min(len(by), 3)])
				if len(by) > 3 {
					cl.Text += "…"
				}
				cl.Title += fmt.Sprintf("; delivered in response%s %s", plural(len(by)), responseNumbers(by))
				if !committed {
					cl.Class += " forged"
					cl.Title = "delivered, but not committed at this revision"
				}
			case committed && w.Request.Matches(e) && c.Rev >= start && c.Rev <= reached:
				cl.Class += " missed"
				cl.Title += "; matches the watch, below what it reached, never delivered on it"
			}
		}
	}

	// The responses: the neighbourhood of the violating one, and others
	// that deliver a revision the violation names.
	show := map[int]bool{}
	for i := max(0, ri-responseRadius); i <= min(len(w.Responses)-1, ri+responseRadius); i++ {
		show[i] = true
	}
	extra := 0
	for i, r := range w.Responses {
		if show[i] || extra >= maxExtraRows {
			continue
		}
		for _, e := range r.Response.Events {
			if focusSet[e.Revision()] {
				show[i] = true
				extra++
				break
			}
		}
	}
	var idx []int
	for i := range show {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	prev := -1
	for _, i := range idx {
		if i > prev+1 {
			tl.Rows = append(tl.Rows, answerRow{Gap: true, Hidden: i - prev - 1, Cells: blankCells(cols)})
		}
		prev = i
		row := responseRow(w.Responses[i], i, cols, i == ri, panel)
		markOwed(&row, w, i, cols, tl.Keys, events, start, delivered)
		tl.Rows = append(tl.Rows, row)
	}
	if prev < len(w.Responses)-1 {
		tl.Rows = append(tl.Rows, answerRow{Gap: true, Hidden: len(w.Responses) - 1 - prev, Cells: blankCells(cols)})
	}
	return tl
}

func blankCells(cols []column) []cell {
	cells := make([]cell, len(cols))
	for i, c := range cols {
		if c.Gap {
			cells[i].Class = "gap"
		}
	}
	return cells
}

func responseNumbers(idx []int) string {
	var parts []string
	for _, i := range idx {
		parts = append(parts, "#"+strconv.Itoa(i+1))
	}
	return strings.Join(parts, ",")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// responseRow draws response number i (from 0) of a watch against cols.
func responseRow(r traces.WatchResponse, i int, cols []column, violating bool, panel string) answerRow {
	resp := r.Response
	row := answerRow{Label: fmt.Sprintf("#%d", i+1), Line: r.Line, Time: nanos(r.Time), Violating: violating, Cells: blankCells(cols)}
	if violating {
		row.ID = panel + "-response"
	}
	mark := func(rev int64, text, class, title string) {
		ci := colIndex(cols, rev)
		if ci < 0 {
			// Outside the window: at the edge it lies beyond.
			switch {
			case len(cols) == 0:
				return
			case rev > cols[len(cols)-1].Rev:
				ci, text = len(cols)-1, text+"→"
			default:
				ci, text = 0, "←"+text
			}
			title += fmt.Sprintf(" (revision %d, outside the window)", rev)
		}
		c := &row.Cells[ci]
		c.Text += text
		c.Class = strings.TrimSpace(c.Class + " " + class)
		if c.Title != "" {
			c.Title += "; "
		}
		c.Title += title
	}
	var kind []string
	switch {
	case resp.Created:
		kind = append(kind, "created")
	case resp.IsProgressNotify() && !r.RevisionUnknown:
		kind = append(kind, "progress")
	}
	if resp.Canceled || resp.CompactRevision != 0 {
		kind = append(kind, "cancelled")
	}
	if r.Error != "" {
		kind = append(kind, "error")
	}
	if len(resp.Events) > 0 {
		kind = append(kind, fmt.Sprintf("%d event%s", len(resp.Events), plural(len(resp.Events))))
	}
	row.Kind = strings.Join(kind, ", ")
	byRev := map[int64][]kv.Event{}
	var order []int64
	for _, e := range resp.Events {
		if _, ok := byRev[e.Revision()]; !ok {
			order = append(order, e.Revision())
		}
		byRev[e.Revision()] = append(byRev[e.Revision()], e)
	}
	for _, rev := range order {
		var ds []string
		for _, e := range byRev[rev] {
			ds = append(ds, describeEvent(e))
		}
		text := "●"
		if n := len(byRev[rev]); n > 1 {
			text = "●" + strconv.Itoa(n)
		}
		mark(rev, text, "ev", "delivered "+strings.Join(ds, ", "))
	}
	switch {
	case r.RevisionUnknown:
	case resp.IsProgressNotify():
		mark(resp.Revision, "◆", "progress", fmt.Sprintf("progress notification at revision %d", resp.Revision))
	case resp.Revision > 0:
		mark(resp.Revision, "│", "hdr", fmt.Sprintf("header revision %d", resp.Revision))
	}
	if resp.CompactRevision != 0 {
		mark(resp.CompactRevision, "✕", "cancel", fmt.Sprintf("cancelled: compacted at %d", resp.CompactRevision))
	}
	row.Detail = describeResponse(r)
	return row
}

// displayKey shows a key as it is when it is UTF-8, and quoted (with \x
// escapes) when not, so that two keys never look alike.
func displayKey(k string) string {
	if utf8.ValidString(k) && strconv.IsPrint(firstRune(k)) && !strings.ContainsAny(k, "\x00\n\r\t") {
		return k
	}
	return strconv.Quote(k)
}

func firstRune(s string) rune {
	for _, r := range s {
		return r
	}
	return 'x'
}

func short(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

func showValue(v string) string { return short(strconv.Quote(v), 24) }

func describeEvent(e kv.Event) string {
	if e.Type == kv.Delete {
		return fmt.Sprintf("DELETE %s@%d", displayKey(e.KV.Key), e.Revision())
	}
	return fmt.Sprintf("PUT %s=%s@%d", displayKey(e.KV.Key), showValue(e.KV.Value), e.Revision())
}

func describeResponse(r traces.WatchResponse) string {
	resp := r.Response
	var parts []string
	if r.RevisionUnknown {
		parts = append(parts, "header revision not recorded")
	} else {
		parts = append(parts, fmt.Sprintf("header %d", resp.Revision))
	}
	if resp.Created {
		parts = append(parts, "created")
	}
	if resp.IsProgressNotify() && !r.RevisionUnknown {
		parts = append(parts, "progress notification")
	}
	if resp.CompactRevision != 0 {
		parts = append(parts, fmt.Sprintf("compact revision %d", resp.CompactRevision))
	}
	if resp.Canceled {
		parts = append(parts, "cancelled "+strconv.Quote(resp.CancelReason))
	}
	if r.Error != "" {
		parts = append(parts, "error "+strconv.Quote(r.Error))
	}
	var evs []string
	for _, e := range resp.Events {
		evs = append(evs, describeEvent(e))
	}
	if len(evs) > 0 {
		parts = append(parts, strings.Join(evs, ", "))
	}
	return short(strings.Join(parts, "; "), maxDetail)
}

func describeWatchRequest(r watch.Request) string {
	var b strings.Builder
	b.WriteString(describeRange(r.Key, r.RangeEnd))
	if r.StartRevision != 0 {
		fmt.Fprintf(&b, " from revision %d", r.StartRevision)
	} else {
		b.WriteString(" from now")
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{r.NoPut, "NOPUT"}, {r.NoDelete, "NODELETE"}, {r.PrevKV, "prev_kv"}, {r.ProgressNotify, "progress_notify"}, {r.Fragment, "fragment"}} {
		if f.on {
			b.WriteString(", " + f.name)
		}
	}
	return b.String()
}

func describeRange(key, end string) string {
	switch {
	case end == "":
		return displayKey(key)
	case end == "\x00":
		return displayKey(key) + " and every key after it"
	case end == kv.PrefixEnd(key):
		return "prefix " + displayKey(key)
	}
	return fmt.Sprintf("[%s, %s)", displayKey(key), displayKey(end))
}

// nanos shows a time of the trace (nanoseconds since its start) in seconds.
func nanos(t int64) string {
	return strconv.FormatFloat(float64(t)/1e9, 'f', 6, 64) + " s"
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// markOwed marks, on a progress notification's row, each matching committed
// event at or below its revision that the watch had not delivered by then:
// what the notification claims was delivered, and was not (§3.6).
func markOwed(row *answerRow, w *traces.Watch, i int, cols []column, keys []keyRow, events map[string]map[int64]kv.Event, start int64, delivered map[string]map[int64][]int) {
	r := w.Responses[i]
	if !r.Response.IsProgressNotify() || r.RevisionUnknown {
		return
	}
	gotBefore := func(key string, rev int64) bool {
		by := delivered[key][rev]
		return len(by) > 0 && by[0] < i
	}
	for ci, c := range cols {
		if c.Gap || c.Rev > r.Response.Revision || c.Rev < start {
			continue
		}
		var owed []string
		for _, k := range keys {
			e, ok := events[k.raw][c.Rev]
			if ok && w.Request.Matches(e) && !gotBefore(k.raw, c.Rev) {
				owed = append(owed, describeEvent(e))
			}
		}
		if len(owed) == 0 {
			continue
		}
		cl := &row.Cells[ci]
		cl.Text = "○" + cl.Text
		cl.Class = strings.TrimSpace(cl.Class + " owed")
		if cl.Title != "" {
			cl.Title += "; "
		}
		cl.Title += "not delivered before this notification: " + strings.Join(owed, ", ")
	}
}
