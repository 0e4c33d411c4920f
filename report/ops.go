package report

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/traces"
)

// opRow is one operation in a table of operations.
type opRow struct {
	Line         int
	Client       int
	Call, Return string
	Request      string
	Response     string
	Violating    bool
	ID           string
}

// opView shows the operation at line and those around it in time on the
// same keys, and — when the committed history is known — the history in
// the window of revisions they answered, with each operation laid against it.
func opView(t *traces.Trace, h *kv.History, line int, focus []int64, focusKeys []string, panel string) (*timeline, []opRow) {
	ci := sort.Search(len(t.Ops), func(i int) bool { return t.Ops[i].Line >= line })
	if ci >= len(t.Ops) || t.Ops[ci].Line != line {
		return nil, nil
	}
	culprit := t.Ops[ci]
	keys := focusKeys
	if len(keys) == 0 {
		keys = opKeys(culprit.Request)
	}
	ret := func(o traces.Op) int64 {
		if o.Unknown() {
			return math.MaxInt64
		}
		return o.Return
	}
	type near struct {
		i    int
		dist int64
	}
	var cands []near
	for i, o := range t.Ops {
		if i == ci || !touches(o.Request, keys) {
			continue
		}
		d := int64(0)
		switch {
		case ret(o) < culprit.Call:
			d = culprit.Call - ret(o)
		case o.Call > ret(culprit):
			d = o.Call - ret(culprit)
		}
		cands = append(cands, near{i, d})
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].dist < cands[b].dist })
	idx := []int{ci}
	for _, c := range cands {
		if len(idx) > opRows {
			break
		}
		idx = append(idx, c.i)
	}
	sort.Ints(idx)
	var rows []opRow
	revs := append([]int64{}, focus...)
	for _, i := range idx {
		o := t.Ops[i]
		r := opRow{Line: o.Line, Client: o.Client, Call: nanos(o.Call), Request: describeRequest(o.Request, o.Serializable), Violating: i == ci}
		if o.Unknown() {
			r.Return, r.Response = "—", "unknown outcome: "+o.Error
		} else {
			r.Return, r.Response = nanos(o.Return), describeKVResponse(*o.Response)
			if o.Response.Err == nil && o.Response.Revision > 0 && i == ci {
				revs = append(revs, o.Response.Revision)
			}
		}
		if r.Violating {
			r.ID = panel + "-op"
		}
		rows = append(rows, r)
	}
	if h == nil {
		return nil, rows
	}
	focusSet := map[int64]bool{}
	for _, r := range focus {
		focusSet[r] = true
	}
	compacted := map[int64]bool{}
	for _, c := range h.Compactions() {
		compacted[c] = true
	}
	if len(revs) == 0 {
		revs = append(revs, h.Head())
	}
	lo, hi := h.Base(), h.Head()
	for _, r := range revs {
		lo, hi = min(lo, max(r, 1)), max(hi, r)
	}
	cols := columns(revs, lo, hi, focusSet, compacted)
	tl := &timeline{Cols: cols, Caption: "the operations above, by the revision each answered"}
	tl.Keys, tl.HiddenKeys, _ = keyHistory(h, cols, keys, func(k string) bool { return contains(keys, k) })
	for _, i := range idx {
		o := t.Ops[i]
		row := answerRow{Label: fmt.Sprintf("client %d", o.Client), Line: o.Line, Time: nanos(o.Call), Violating: i == ci, Cells: blankCells(cols)}
		if i == ci {
			row.ID = panel + "-op-row"
		}
		switch {
		case o.Unknown():
			row.Kind = "unknown outcome"
		case o.Response.Err != nil:
			row.Kind = "error"
		default:
			row.Kind = requestKind(o.Request)
			if c := colIndex(cols, o.Response.Revision); c >= 0 {
				row.Cells[c] = cell{Text: "│", Class: "hdr", Title: fmt.Sprintf("answered at revision %d", o.Response.Revision)}
			}
		}
		row.Detail = short(describeRequest(o.Request, o.Serializable), maxDetail)
		tl.Rows = append(tl.Rows, row)
	}
	return tl, rows
}

// opKeys lists the keys a request names.
func opKeys(r kv.Request) []string {
	var keys []string
	add := func(k string) {
		if !contains(keys, k) {
			keys = append(keys, k)
		}
	}
	ops := func(os []kv.Op) {
		for _, o := range os {
			switch {
			case o.Range != nil:
				add(o.Range.Key)
			case o.Put != nil:
				add(o.Put.Key)
			case o.Delete != nil:
				add(o.Delete.Key)
			}
		}
	}
	switch {
	case r.Range != nil:
		add(r.Range.Key)
	case r.Put != nil:
		add(r.Put.Key)
	case r.Delete != nil:
		add(r.Delete.Key)
	case r.Txn != nil:
		for _, c := range r.Txn.Compare {
			add(c.Key)
		}
		ops(r.Txn.Success)
		ops(r.Txn.Failure)
	}
	return keys
}

// touches reports whether r reads or writes one of keys (ranges included).
func touches(r kv.Request, keys []string) bool {
	in := func(key, end string) bool {
		for _, k := range keys {
			if kv.InRange(key, end, k) {
				return true
			}
		}
		return false
	}
	ops := func(os []kv.Op) bool {
		for _, o := range os {
			switch {
			case o.Range != nil && in(o.Range.Key, o.Range.RangeEnd),
				o.Put != nil && in(o.Put.Key, ""),
				o.Delete != nil && in(o.Delete.Key, o.Delete.RangeEnd):
				return true
			}
		}
		return false
	}
	switch {
	case r.Range != nil:
		return in(r.Range.Key, r.Range.RangeEnd)
	case r.Put != nil:
		return in(r.Put.Key, "")
	case r.Delete != nil:
		return in(r.Delete.Key, r.Delete.RangeEnd)
	case r.Txn != nil:
		for _, c := range r.Txn.Compare {
			if in(c.Key, "") {
				return true
			}
		}
		return ops(r.Txn.Success) || ops(r.Txn.Failure)
	case r.Compact != nil:
		return true
	}
	return false
}

func requestKind(r kv.Request) string {
	switch {
	case r.Range != nil:
		return "range"
	case r.Put != nil:
		return "put"
	case r.Delete != nil:
		return "delete"
	case r.Txn != nil:
		return "txn"
	case r.Compact != nil:
		return "compact"
	}
	return "?"
}

func describeRequest(r kv.Request, serializable bool) string {
	var s string
	switch {
	case r.Range != nil:
		s = "range " + describeRange(r.Range.Key, r.Range.RangeEnd)
		if r.Range.Revision > 0 {
			s += fmt.Sprintf(" at %d", r.Range.Revision)
		}
		if serializable {
			s += " (serializable)"
		}
	case r.Put != nil:
		s = fmt.Sprintf("put %s=%s", displayKey(r.Put.Key), showValue(r.Put.Value))
	case r.Delete != nil:
		s = "delete " + describeRange(r.Delete.Key, r.Delete.RangeEnd)
	case r.Txn != nil:
		var cmp []string
		for _, c := range r.Txn.Compare {
			cmp = append(cmp, describeCompare(c))
		}
		s = fmt.Sprintf("txn if %s then [%s] else [%s]", strings.Join(cmp, " && "), describeOps(r.Txn.Success), describeOps(r.Txn.Failure))
	case r.Compact != nil:
		s = fmt.Sprintf("compact %d", r.Compact.Revision)
	default:
		s = "?"
	}
	return s
}

func describeCompare(c kv.Compare) string {
	target := [...]string{"value", "version", "create", "mod"}[min(int(c.Target), 3)]
	rel := [...]string{"=", "!=", "<", ">"}[min(int(c.Result), 3)]
	if c.Target == kv.TargetValue {
		return fmt.Sprintf("%s(%s)%s%s", target, displayKey(c.Key), rel, showValue(c.Value))
	}
	return fmt.Sprintf("%s(%s)%s%d", target, displayKey(c.Key), rel, c.Number)
}

func describeOps(os []kv.Op) string {
	var parts []string
	for _, o := range os {
		parts = append(parts, describeRequest(kv.Request{Range: o.Range, Put: o.Put, Delete: o.Delete}, false))
	}
	return strings.Join(parts, ", ")
}

func describeKVResponse(r kv.Response) string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	s := fmt.Sprintf("revision %d", r.Revision)
	switch {
	case r.Range != nil:
		s += ": " + describeKVs(r.Range.KVs)
	case r.Delete != nil:
		s += fmt.Sprintf(": deleted %d", r.Delete.Deleted)
	case r.Txn != nil:
		if r.Txn.Succeeded {
			s += ": succeeded"
		} else {
			s += ": failed"
		}
		for _, or := range r.Txn.Responses {
			if or.Range != nil {
				s += " " + describeKVs(or.Range.KVs)
			}
		}
	}
	return short(s, maxDetail)
}

func describeKVs(kvs []kv.KeyValue) string {
	var parts []string
	for _, k := range kvs {
		parts = append(parts, fmt.Sprintf("%s=%s@%d", displayKey(k.Key), showValue(k.Value), k.ModRevision))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
