package traces

import (
	"errors"
	"fmt"
	"reflect"
	"unicode/utf8"

	"github.com/watchspec/watchspec/model/k8s"
)

// The Kubernetes records of a trace (docs/TRACE_FORMAT.md, "Kubernetes
// records"): the lists and watches an informer's ListWatch made, the
// informer's log, and its final cache. In file order they form the
// informer run that k8s.CheckInformer checks; the trace's KV operations
// (the writers) give the store's history.
type (
	wireObject struct {
		Key             Bytes `json:"key"`
		Value           Bytes `json:"value,omitempty"`
		ResourceVersion int64 `json:"resource_version"`
		UID             int64 `json:"uid,omitempty"`
	}
	wireStatus struct {
		Code    int    `json:"code"`
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
		// Continue is the continue token a 410 to a continuation hands out
		// (the inconsistent continuation, docs/SPEC.md §4.5), as the key its
		// page continues after.
		Continue Bytes `json:"continue,omitempty"`
	}
	wireListOptions struct {
		ResourceVersion      string `json:"resource_version,omitempty"`
		ResourceVersionMatch string `json:"resource_version_match,omitempty"`
		Limit                int64  `json:"limit,omitempty"`
		// Continue is the key the list continues after, as a byte string
		// (version 1 wrote it as a plain string).
		Continue Bytes `json:"continue,omitempty"`
	}
	wireListResult struct {
		ResourceVersion int64        `json:"resource_version"`
		Items           []wireObject `json:"items,omitempty"`
		Continue        Bytes        `json:"continue,omitempty"`
		ContinueAfter   Bytes        `json:"continue_after,omitempty"`
	}
	k8sListRecord struct {
		Type    string          `json:"type"`
		Call    *int64          `json:"call"`
		Return  *int64          `json:"return"`
		Prefix  Bytes           `json:"prefix"`
		Options wireListOptions `json:"options"`
		Before  int64           `json:"before"`
		After   int64           `json:"after"`
		// CompactRevision is the store's compaction revision when the list
		// was answered: −1 never compacted, absent unknown.
		CompactRevision *int64 `json:"compact_revision,omitempty"`
		// FirstPage is the index (among k8s_list records) of a continuation's first page.
		FirstPage *int            `json:"first_page,omitempty"`
		Result    *wireListResult `json:"result,omitempty"`
		Status    *wireStatus     `json:"status,omitempty"`
	}
	wireWatchOptions struct {
		ResourceVersion      string `json:"resource_version,omitempty"`
		ResourceVersionMatch string `json:"resource_version_match,omitempty"`
		SendInitialEvents    *bool  `json:"send_initial_events,omitempty"`
		AllowWatchBookmarks  bool   `json:"allow_watch_bookmarks,omitempty"`
	}
	k8sWatchRecord struct {
		Type    string           `json:"type"`
		Watch   *int             `json:"watch"`
		Time    *int64           `json:"time"`
		Prefix  Bytes            `json:"prefix"`
		Options wireWatchOptions `json:"options"`
		Before  int64            `json:"before"`
		// CompactRevision is the store's compaction revision when the
		// watch was answered: −1 never compacted, absent unknown.
		CompactRevision *int64      `json:"compact_revision,omitempty"`
		Status          *wireStatus `json:"status,omitempty"`
	}
	wireK8sEvent struct {
		Type             string      `json:"type"`
		Object           *wireObject `json:"object,omitempty"`
		InitialEventsEnd bool        `json:"initial_events_end,omitempty"`
		Status           *wireStatus `json:"status,omitempty"`
	}
	k8sWatchEventRecord struct {
		Type  string        `json:"type"`
		Watch *int          `json:"watch"`
		Time  *int64        `json:"time"`
		Event *wireK8sEvent `json:"event"`
	}
	k8sWatchEndRecord struct {
		Type  string `json:"type"`
		Watch *int   `json:"watch"`
		Time  *int64 `json:"time"`
		After int64  `json:"after"`
	}
	wireNotification struct {
		Handler       int         `json:"handler"`
		Type          string      `json:"type"`
		Old           *wireObject `json:"old,omitempty"`
		New           *wireObject `json:"new,omitempty"`
		InInitialList bool        `json:"in_initial_list,omitempty"`
		Tombstone     bool        `json:"tombstone,omitempty"`
	}
	wireInformerEntry struct {
		Start        *int64            `json:"start,omitempty"`
		HandlerAdded *int              `json:"handler_added,omitempty"`
		Notification *wireNotification `json:"notification,omitempty"`
		HasSynced    *int              `json:"has_synced,omitempty"`
		SyncedRV     *int64            `json:"synced_rv,omitempty"`
		Resync       bool              `json:"resync,omitempty"`
		Quiesced     bool              `json:"quiesced,omitempty"`
	}
	informerRecord struct {
		Type  string             `json:"type"`
		Time  *int64             `json:"time"`
		Entry *wireInformerEntry `json:"entry"`
	}
	informerCacheRecord struct {
		Type    string       `json:"type"`
		Time    *int64       `json:"time"`
		Prefix  Bytes        `json:"prefix"`
		Objects []wireObject `json:"objects,omitempty"`
	}
)

func toWireObject(o k8s.Object) wireObject {
	return wireObject{Key: Bytes(o.Key), Value: Bytes(o.Value), ResourceVersion: o.ResourceVersion, UID: o.UID}
}

func toWireObjectPtr(o *k8s.Object) *wireObject {
	if o == nil {
		return nil
	}
	w := toWireObject(*o)
	return &w
}

func toWireObjects(os []k8s.Object) []wireObject {
	var out []wireObject
	for _, o := range os {
		out = append(out, toWireObject(o))
	}
	return out
}

func fromWireObject(w wireObject, what string) (k8s.Object, error) {
	if w.Key == "" {
		return k8s.Object{}, fmt.Errorf("%s: an object needs a key", what)
	}
	if err := notNegative(what+": ", "resource_version", w.ResourceVersion, "uid", w.UID); err != nil {
		return k8s.Object{}, err
	}
	return k8s.Object{Key: string(w.Key), Value: string(w.Value), ResourceVersion: w.ResourceVersion, UID: w.UID}, nil
}

func fromWireObjects(ws []wireObject, what string) ([]k8s.Object, error) {
	var out []k8s.Object
	for i, w := range ws {
		o, err := fromWireObject(w, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func toWireStatus(s *k8s.Status) *wireStatus {
	if s == nil {
		return nil
	}
	return &wireStatus{Code: s.Code, Reason: s.Reason, Message: s.Message, Continue: Bytes(s.Continue)}
}

func fromWireStatus(w *wireStatus) *k8s.Status {
	if w == nil {
		return nil
	}
	return &k8s.Status{Code: w.Code, Reason: w.Reason, Message: w.Message, Continue: string(w.Continue)}
}

var k8sEventTypes = []k8s.EventType{k8s.Added, k8s.Modified, k8s.Deleted, k8s.Bookmark, k8s.Error}
var notificationTypes = []k8s.NotificationType{k8s.OnAdd, k8s.OnUpdate, k8s.OnDelete}

// k8sReader is the state of reading a trace's Kubernetes records.
type k8sReader struct {
	run  *k8s.Run
	info *K8sInfo
	// ids maps a k8s watch id to its index in run.Watches.
	ids map[int]int
	// lastEvent is the time of each watch's last event.
	lastEvent []int64
	// last is the latest entry of the informer's log, for its order.
	last K8sEntryInfo
}

// k8s returns the trace's Kubernetes state, creating the run.
func (rd *reader) k8sState() *k8sReader {
	if rd.k8s == nil {
		rd.t.K8s = &k8s.Run{}
		rd.t.K8sInfo = &K8sInfo{Untimed: rd.v < 2}
		rd.k8s = &k8sReader{run: rd.t.K8s, info: rd.t.K8sInfo, ids: map[int]int{}}
	}
	return rd.k8s
}

// k8sTime reads the time of a Kubernetes record: required in version 2, and
// never negative.
func (rd *reader) k8sTime(p *int64, field string) (int64, error) {
	if p == nil && rd.v < 2 {
		return 0, nil
	}
	if p == nil {
		return 0, fmt.Errorf("missing %q: every Kubernetes record is timed in version 2", field)
	}
	return *p, nonNegative(*p, field)
}

// entry checks that a log entry at time t does not precede the one before
// it (version 2), and makes it the latest.
func (k *k8sReader) entry(v int, e K8sEntryInfo) error {
	if v >= 2 && e.Time < k.last.Time {
		return fmt.Errorf("time %d precedes the time %d of the informer log's previous entry (line %d): the log is recorded in order", e.Time, k.last.Time, k.last.Line)
	}
	k.last = e
	return nil
}

// compactRevision decodes a record's compact_revision into the model's
// convention: −1 never compacted, 0 unknown, N compacted at N.
func compactRevision(p *int64, v int) (int64, error) {
	switch {
	case p == nil:
		return 0, nil
	case *p < -1:
		return 0, fmt.Errorf(`"compact_revision" is %d: −1 (never compacted) or a compaction revision, or leave it out when not known`, *p)
	case *p == 0 && v >= 2:
		return 0, errors.New(`"compact_revision" 0 names no compaction: write −1 for a store never compacted, or leave it out when not known`)
	}
	return *p, nil
}

func (rd *reader) k8sRecord(typ string, line []byte, lineNo int) error {
	switch typ {
	case "k8s_list":
		var r k8sListRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		if r.Call == nil || r.Return == nil {
			return errors.New(`a k8s_list needs "call" and "return"`)
		}
		li := K8sListInfo{Line: lineNo, Call: *r.Call, Return: *r.Return}
		if err := nonNegative(li.Call, "call"); err != nil {
			return err
		}
		if err := nonNegative(li.Return, "return"); err != nil {
			return err
		}
		if rd.v >= 2 && li.Return < li.Call {
			return fmt.Errorf("\"return\" (%d) is before \"call\" (%d)", li.Return, li.Call)
		}
		if err := notNegative("", "before", r.Before, "after", r.After); err != nil {
			return err
		}
		compacted, err := compactRevision(r.CompactRevision, rd.v)
		if err != nil {
			return err
		}
		c := k8s.ListCall{Prefix: string(r.Prefix), Before: r.Before, After: r.After, CompactRevision: compacted,
			Options: k8s.ListOptions{ResourceVersion: r.Options.ResourceVersion, ResourceVersionMatch: r.Options.ResourceVersionMatch,
				Limit: r.Options.Limit, Continue: string(r.Options.Continue)}}
		switch {
		case (r.Result == nil) == (r.Status == nil):
			return errors.New(`a k8s_list has either a "result" or a "status"`)
		case r.Status != nil:
			c.Result.Status = fromWireStatus(r.Status)
		default:
			if err := notNegative("result ", "resource_version", r.Result.ResourceVersion); err != nil {
				return err
			}
			items, err := fromWireObjects(r.Result.Items, "result items")
			if err != nil {
				return err
			}
			c.Result = k8s.ListResult{ResourceVersion: r.Result.ResourceVersion, Items: items, Continue: string(r.Result.Continue), ContinueAfter: string(r.Result.ContinueAfter)}
		}
		k := rd.k8sState()
		if r.FirstPage != nil {
			if *r.FirstPage < 0 || *r.FirstPage >= len(k.run.Lists) {
				return fmt.Errorf("first_page %d names no earlier k8s_list", *r.FirstPage)
			}
			first := k.run.Lists[*r.FirstPage].Result
			c.First = &first
		}
		e := K8sEntryInfo{Line: lineNo, Time: li.Return}
		if err := k.entry(rd.v, e); err != nil {
			return fmt.Errorf(`"return" %v`, err)
		}
		k.run.Lists = append(k.run.Lists, c)
		k.info.Lists = append(k.info.Lists, li)
		idx := len(k.run.Lists) - 1
		k.run.Entries = append(k.run.Entries, k8s.Entry{List: &idx})
		k.info.Entries = append(k.info.Entries, e)
	case "k8s_watch":
		var r k8sWatchRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		if r.Watch == nil || r.Time == nil {
			return errors.New(`a k8s_watch needs "watch" and "time"`)
		}
		if err := nonNegative(*r.Time, "time"); err != nil {
			return err
		}
		if err := notNegative("", "before", r.Before); err != nil {
			return err
		}
		compacted, err := compactRevision(r.CompactRevision, rd.v)
		if err != nil {
			return err
		}
		k := rd.k8sState()
		switch i, dup := k.ids[*r.Watch]; {
		case rd.v < 2 && *r.Watch != len(k.run.Watches):
			return fmt.Errorf("k8s watches are numbered from 0 in order in version 1: expected %d, found %d", len(k.run.Watches), *r.Watch)
		case dup:
			return fmt.Errorf("k8s watch %d was already created on line %d", *r.Watch, k.info.Watches[i].Line)
		}
		k.ids[*r.Watch] = len(k.run.Watches)
		k.run.Watches = append(k.run.Watches, k8s.WatchCall{Prefix: string(r.Prefix), Before: r.Before, CompactRevision: compacted, Status: fromWireStatus(r.Status),
			Options: k8s.WatchOptions{ResourceVersion: r.Options.ResourceVersion, ResourceVersionMatch: r.Options.ResourceVersionMatch,
				SendInitialEvents: r.Options.SendInitialEvents, AllowWatchBookmarks: r.Options.AllowWatchBookmarks}})
		k.info.Watches = append(k.info.Watches, K8sWatchInfo{Line: lineNo, ID: *r.Watch, Time: *r.Time})
		k.lastEvent = append(k.lastEvent, *r.Time)
	case "k8s_watch_event", "k8s_watch_end":
		var tm *int64
		var w *int
		var ev *wireK8sEvent
		var after int64
		if typ == "k8s_watch_event" {
			var r k8sWatchEventRecord
			if err := strict(line, &r); err != nil {
				return err
			}
			if r.Event == nil {
				return errors.New(`a k8s_watch_event needs an "event"`)
			}
			w, tm, ev = r.Watch, r.Time, r.Event
		} else {
			var r k8sWatchEndRecord
			if err := strict(line, &r); err != nil {
				return err
			}
			w, tm, after = r.Watch, r.Time, r.After
			if err := notNegative("", "after", after); err != nil {
				return err
			}
			if after == 0 && rd.v >= 2 {
				return errors.New(`"after" must be the revision committed when the watch ended (at least 1)`)
			}
		}
		t, err := rd.k8sTime(tm, "time")
		if err != nil {
			return err
		}
		k := rd.k8sState()
		if w == nil {
			return errors.New(`missing "watch"`)
		}
		i, ok := k.ids[*w]
		if !ok {
			return fmt.Errorf("k8s watch %d, which no earlier k8s_watch created", *w)
		}
		wi := &k.info.Watches[i]
		switch {
		case rd.v >= 2 && wi.EndLine != 0:
			return fmt.Errorf("k8s watch %d already ended on line %d", *w, wi.EndLine)
		case rd.v >= 2 && t < k.lastEvent[i]:
			return fmt.Errorf("time %d precedes the time %d of k8s watch %d's creation or last event", t, k.lastEvent[i], *w)
		}
		k.lastEvent[i] = t
		call := &k.run.Watches[i]
		if ev == nil {
			call.After = after
			wi.EndLine, wi.End = lineNo, t
			if after == 0 { // version 1: as if there were no end (Write writes none)
				wi.EndLine, wi.End = 0, 0
			}
			break
		}
		e := k8s.WatchEvent{Type: k8s.EventType(ev.Type), InitialEventsEnd: ev.InitialEventsEnd, Status: fromWireStatus(ev.Status)}
		known := false
		for _, t := range k8sEventTypes {
			known = known || t == e.Type
		}
		if !known {
			return fmt.Errorf("event type %q is not one of %v", ev.Type, k8sEventTypes)
		}
		switch {
		case ev.Object == nil && e.Type != k8s.Error:
			return fmt.Errorf("a %s event needs an \"object\"", e.Type)
		case e.Type == k8s.Bookmark:
			// A bookmark carries only a resourceVersion.
			if err := notNegative("event object: ", "resource_version", ev.Object.ResourceVersion); err != nil {
				return err
			}
			e.Object = k8s.Object{Key: string(ev.Object.Key), ResourceVersion: ev.Object.ResourceVersion}
		case ev.Object != nil:
			obj, err := fromWireObject(*ev.Object, "event object")
			if err != nil {
				return err
			}
			e.Object = obj
		}
		ei := K8sEntryInfo{Line: lineNo, Time: t}
		if err := k.entry(rd.v, ei); err != nil {
			return err
		}
		call.Events = append(call.Events, e)
		k.run.Entries = append(k.run.Entries, k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: i, Event: e}})
		k.info.Entries = append(k.info.Entries, ei)
	case "informer":
		var r informerRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		t, err := rd.k8sTime(r.Time, "time")
		if err != nil {
			return err
		}
		if r.Entry == nil {
			return errors.New(`an informer record needs an "entry"`)
		}
		e, err := fromWireEntry(*r.Entry)
		if err != nil {
			return err
		}
		k := rd.k8sState()
		ei := K8sEntryInfo{Line: lineNo, Time: t}
		if err := k.entry(rd.v, ei); err != nil {
			return err
		}
		k.run.Entries = append(k.run.Entries, e)
		k.info.Entries = append(k.info.Entries, ei)
	case "informer_cache":
		var r informerCacheRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		t, err := rd.k8sTime(r.Time, "time")
		if err != nil {
			return err
		}
		objs, err := fromWireObjects(r.Objects, "objects")
		if err != nil {
			return err
		}
		k := rd.k8sState()
		if rd.v >= 2 && k.info.Cache.Line != 0 {
			return fmt.Errorf("a second informer_cache (the first is on line %d)", k.info.Cache.Line)
		}
		ei := K8sEntryInfo{Line: lineNo, Time: t}
		if err := k.entry(rd.v, ei); err != nil {
			return err
		}
		k.run.Prefix, k.run.Cache = string(r.Prefix), objs
		k.info.Cache = ei
	default:
		return fmt.Errorf("unknown record type %q", typ)
	}
	return nil
}

func fromWireEntry(w wireInformerEntry) (k8s.Entry, error) {
	var e k8s.Entry
	n := 0
	if w.Start != nil {
		if err := notNegative("", "start", *w.Start); err != nil {
			return e, err
		}
		e.Start, n = &k8s.StartEntry{Revision: *w.Start}, n+1
	}
	if w.HandlerAdded != nil {
		e.HandlerAdded, n = w.HandlerAdded, n+1
	}
	if w.HasSynced != nil {
		e.HasSynced, n = w.HasSynced, n+1
	}
	if w.SyncedRV != nil {
		if err := notNegative("", "synced_rv", *w.SyncedRV); err != nil {
			return e, err
		}
		e.SyncedRV, n = w.SyncedRV, n+1
	}
	if w.Resync {
		e.Resync, n = true, n+1
	}
	if w.Quiesced {
		e.Quiesced, n = true, n+1
	}
	if w.Notification != nil {
		wn := w.Notification
		nt := k8s.Notification{Handler: wn.Handler, Type: k8s.NotificationType(wn.Type), InInitialList: wn.InInitialList, Tombstone: wn.Tombstone}
		known := false
		for _, t := range notificationTypes {
			known = known || t == nt.Type
		}
		if !known {
			return e, fmt.Errorf("notification type %q is not one of %v", wn.Type, notificationTypes)
		}
		for _, p := range []struct {
			w   *wireObject
			dst **k8s.Object
		}{{wn.Old, &nt.Old}, {wn.New, &nt.New}} {
			if p.w != nil {
				o, err := fromWireObject(*p.w, "notification object")
				if err != nil {
					return e, err
				}
				*p.dst = &o
			}
		}
		if nt.Type != k8s.OnDelete && nt.New == nil {
			return e, fmt.Errorf("%s needs a \"new\" object", nt.Type)
		}
		if nt.Type == k8s.OnDelete && nt.Old == nil && !nt.Tombstone {
			return e, errors.New(`OnDelete needs an "old" object unless it is a tombstone`)
		}
		e.Notification, n = &nt, n+1
	}
	if n != 1 {
		return e, fmt.Errorf("an informer entry sets exactly one field, not %d", n)
	}
	return e, nil
}

func toWireEntry(e k8s.Entry) *wireInformerEntry {
	w := &wireInformerEntry{HandlerAdded: e.HandlerAdded, HasSynced: e.HasSynced, SyncedRV: e.SyncedRV, Resync: e.Resync, Quiesced: e.Quiesced}
	if e.Start != nil {
		w.Start = &e.Start.Revision
	}
	if n := e.Notification; n != nil {
		w.Notification = &wireNotification{Handler: n.Handler, Type: string(n.Type), Old: toWireObjectPtr(n.Old), New: toWireObjectPtr(n.New),
			InInitialList: n.InInitialList, Tombstone: n.Tombstone}
	}
	return w
}

// checkK8sInfo reports why info cannot describe run.
func checkK8sInfo(run *k8s.Run, info *K8sInfo) error {
	switch {
	case len(info.Lists) != len(run.Lists):
		return fmt.Errorf("traces: K8sInfo has %d lists, the run %d", len(info.Lists), len(run.Lists))
	case len(info.Watches) != len(run.Watches):
		return fmt.Errorf("traces: K8sInfo has %d watches, the run %d", len(info.Watches), len(run.Watches))
	case len(info.Entries) != len(run.Entries):
		return fmt.Errorf("traces: K8sInfo has %d entries, the run %d", len(info.Entries), len(run.Entries))
	}
	ids := map[int]bool{}
	for _, w := range info.Watches {
		if ids[w.ID] {
			return fmt.Errorf("traces: K8sInfo gives two watches the id %d", w.ID)
		}
		ids[w.ID] = true
	}
	return nil
}

// writeK8s writes an informer run's records in the order of its entries,
// with the times and ids of info (nil: time 0, ids by position, which only
// version 1 may say).
func writeK8s(w *Writer, run *k8s.Run, info *K8sInfo) {
	id := func(i int) int { return i }
	if info != nil && w.v >= 2 {
		id = func(i int) int { return info.Watches[i].ID }
	}
	if info == nil {
		info = &K8sInfo{Lists: make([]K8sListInfo, len(run.Lists)), Watches: make([]K8sWatchInfo, len(run.Watches)), Entries: make([]K8sEntryInfo, len(run.Entries))}
	}
	// The reader numbers watches in the order of their k8s_watch records:
	// a watch is written before its first event, after every
	// earlier-numbered watch (which may have no event yet, or none at all).
	written := 0
	writeWatches := func(upTo int) {
		for ; written <= upTo; written++ {
			w.K8sWatch(id(written), run.Watches[written], info.Watches[written].Time)
		}
	}
	for i, e := range run.Entries {
		switch {
		case e.List != nil:
			c := run.Lists[*e.List]
			first := -1
			if c.First != nil {
				for j := range run.Lists[:*e.List] {
					if reflect.DeepEqual(run.Lists[j].Result, *c.First) {
						first = j
						break
					}
				}
			}
			li := info.Lists[*e.List]
			w.K8sList(c, first, li.Call, li.Return)
		case e.WatchEvent != nil:
			writeWatches(e.WatchEvent.Watch)
			w.K8sWatchEvent(id(e.WatchEvent.Watch), info.Entries[i].Time, e.WatchEvent.Event)
		default:
			w.Informer(info.Entries[i].Time, e)
		}
	}
	writeWatches(len(run.Watches) - 1)
	for i, c := range run.Watches {
		if c.After != 0 {
			w.K8sWatchEnd(id(i), info.Watches[i].End, c.After)
		}
	}
	if run.Prefix != "" || len(run.Cache) > 0 || info.Cache != (K8sEntryInfo{}) {
		w.InformerCache(info.Cache.Time, run.Prefix, run.Cache)
	}
}

// continueBytes encodes a continue key for the writer's version: version 1
// can only write a plain string.
func (w *Writer) continueBytes(k string) (Bytes, error) {
	if w.v < 2 && !utf8.ValidString(k) {
		return "", fmt.Errorf("traces: version 1 cannot record the continue key %q, which is not UTF-8: write version 2", k)
	}
	return Bytes(k), nil
}

// compactRevisionField encodes the model's compaction revision (0: unknown).
func compactRevisionField(c int64) *int64 {
	if c == 0 {
		return nil
	}
	return &c
}

// K8sList records a list made between call and ret. For a continuation,
// firstPage is the number of the k8s_list of its first page (lists are
// numbered from 0 in file order); −1 otherwise.
func (w *Writer) K8sList(c k8s.ListCall, firstPage int, call, ret int64) error {
	r := k8sListRecord{Type: "k8s_list", Call: &call, Return: &ret, Prefix: Bytes(c.Prefix), Before: c.Before, After: c.After, CompactRevision: compactRevisionField(c.CompactRevision),
		Options: wireListOptions{ResourceVersion: c.Options.ResourceVersion, ResourceVersionMatch: c.Options.ResourceVersionMatch, Limit: c.Options.Limit}}
	var err error
	if r.Options.Continue, err = w.continueBytes(c.Options.Continue); err != nil {
		return w.fail(err)
	}
	if c.Result.Status != nil {
		r.Status = toWireStatus(c.Result.Status)
	} else {
		r.Result = &wireListResult{ResourceVersion: c.Result.ResourceVersion, Items: toWireObjects(c.Result.Items), ContinueAfter: Bytes(c.Result.ContinueAfter)}
		if r.Result.Continue, err = w.continueBytes(c.Result.Continue); err != nil {
			return w.fail(err)
		}
	}
	if firstPage >= 0 {
		r.FirstPage = &firstPage
	}
	return w.line(r)
}

// K8sWatch records the creation, at time t, of the Kubernetes watch id: an
// id the recorder chooses, unique in the trace, that its events and end
// name (version 1: watches are numbered from 0 in the order of their
// k8s_watch records).
func (w *Writer) K8sWatch(id int, c k8s.WatchCall, t int64) error {
	return w.line(k8sWatchRecord{Type: "k8s_watch", Watch: &id, Time: &t, Prefix: Bytes(c.Prefix), Before: c.Before, CompactRevision: compactRevisionField(c.CompactRevision), Status: toWireStatus(c.Status),
		Options: wireWatchOptions{ResourceVersion: c.Options.ResourceVersion, ResourceVersionMatch: c.Options.ResourceVersionMatch,
			SendInitialEvents: c.Options.SendInitialEvents, AllowWatchBookmarks: c.Options.AllowWatchBookmarks}})
}

// K8sWatchEvent records an event of the Kubernetes watch id, at time t.
func (w *Writer) K8sWatchEvent(id int, t int64, e k8s.WatchEvent) error {
	ev := &wireK8sEvent{Type: string(e.Type), InitialEventsEnd: e.InitialEventsEnd, Status: toWireStatus(e.Status)}
	if e.Type != k8s.Error {
		o := toWireObject(e.Object)
		ev.Object = &o
	}
	return w.line(k8sWatchEventRecord{Type: "k8s_watch_event", Watch: &id, Time: &t, Event: ev})
}

// K8sWatchEnd records that the Kubernetes watch id ended at time t, when
// after was the highest revision committed.
func (w *Writer) K8sWatchEnd(id int, t int64, after int64) error {
	return w.line(k8sWatchEndRecord{Type: "k8s_watch_end", Watch: &id, Time: &t, After: after})
}

// Informer records one entry of the informer's log (not a list or a watch
// event), at time t.
func (w *Writer) Informer(t int64, e k8s.Entry) error {
	return w.line(informerRecord{Type: "informer", Time: &t, Entry: toWireEntry(e)})
}

// InformerCache records the informer's final cache, read at time t.
func (w *Writer) InformerCache(t int64, prefix string, objs []k8s.Object) error {
	return w.line(informerCacheRecord{Type: "informer_cache", Time: &t, Prefix: Bytes(prefix), Objects: toWireObjects(objs)})
}
