package traces

import (
	"errors"
	"fmt"
	"reflect"

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
	}
	wireListOptions struct {
		ResourceVersion      string `json:"resource_version,omitempty"`
		ResourceVersionMatch string `json:"resource_version_match,omitempty"`
		Limit                int64  `json:"limit,omitempty"`
		Continue             string `json:"continue,omitempty"`
	}
	wireListResult struct {
		ResourceVersion int64        `json:"resource_version"`
		Items           []wireObject `json:"items,omitempty"`
		Continue        string       `json:"continue,omitempty"`
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
		// CompactRevision is the store's compaction revision when the list was answered, if known.
		CompactRevision int64 `json:"compact_revision,omitempty"`
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
		// CompactRevision is the store's compaction revision when the watch was answered, if known.
		CompactRevision int64       `json:"compact_revision,omitempty"`
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
	return &wireStatus{Code: s.Code, Reason: s.Reason, Message: s.Message}
}

func fromWireStatus(w *wireStatus) *k8s.Status {
	if w == nil {
		return nil
	}
	return &k8s.Status{Code: w.Code, Reason: w.Reason, Message: w.Message}
}

var k8sEventTypes = []k8s.EventType{k8s.Added, k8s.Modified, k8s.Deleted, k8s.Bookmark, k8s.Error}
var notificationTypes = []k8s.NotificationType{k8s.OnAdd, k8s.OnUpdate, k8s.OnDelete}

// k8sRun returns the trace's informer run, creating it.
func (t *Trace) k8sRun() *k8s.Run {
	if t.K8s == nil {
		t.K8s = &k8s.Run{}
	}
	return t.K8s
}

func readK8sRecord(t *Trace, typ string, line []byte) error {
	switch typ {
	case "k8s_list":
		var r k8sListRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		if r.Call == nil || r.Return == nil {
			return errors.New(`a k8s_list needs "call" and "return"`)
		}
		run := t.k8sRun()
		c := k8s.ListCall{Prefix: string(r.Prefix), Before: r.Before, After: r.After, CompactRevision: r.CompactRevision,
			Options: k8s.ListOptions{ResourceVersion: r.Options.ResourceVersion, ResourceVersionMatch: r.Options.ResourceVersionMatch,
				Limit: r.Options.Limit, Continue: r.Options.Continue}}
		switch {
		case (r.Result == nil) == (r.Status == nil):
			return errors.New(`a k8s_list has either a "result" or a "status"`)
		case r.Status != nil:
			c.Result.Status = fromWireStatus(r.Status)
		default:
			items, err := fromWireObjects(r.Result.Items, "result items")
			if err != nil {
				return err
			}
			c.Result = k8s.ListResult{ResourceVersion: r.Result.ResourceVersion, Items: items, Continue: r.Result.Continue, ContinueAfter: string(r.Result.ContinueAfter)}
		}
		if r.FirstPage != nil {
			if *r.FirstPage < 0 || *r.FirstPage >= len(run.Lists) {
				return fmt.Errorf("first_page %d names no earlier k8s_list", *r.FirstPage)
			}
			first := run.Lists[*r.FirstPage].Result
			c.First = &first
		}
		run.Lists = append(run.Lists, c)
		idx := len(run.Lists) - 1
		run.Entries = append(run.Entries, k8s.Entry{List: &idx})
	case "k8s_watch":
		var r k8sWatchRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		if r.Watch == nil || r.Time == nil {
			return errors.New(`a k8s_watch needs "watch" and "time"`)
		}
		run := t.k8sRun()
		if *r.Watch != len(run.Watches) {
			return fmt.Errorf("k8s watches are numbered from 0 in order: expected %d, found %d", len(run.Watches), *r.Watch)
		}
		run.Watches = append(run.Watches, k8s.WatchCall{Prefix: string(r.Prefix), Before: r.Before, CompactRevision: r.CompactRevision, Status: fromWireStatus(r.Status),
			Options: k8s.WatchOptions{ResourceVersion: r.Options.ResourceVersion, ResourceVersionMatch: r.Options.ResourceVersionMatch,
				SendInitialEvents: r.Options.SendInitialEvents, AllowWatchBookmarks: r.Options.AllowWatchBookmarks}})
	case "k8s_watch_event", "k8s_watch_end":
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
			w, ev = r.Watch, r.Event
		} else {
			var r k8sWatchEndRecord
			if err := strict(line, &r); err != nil {
				return err
			}
			w, after = r.Watch, r.After
		}
		run := t.k8sRun()
		if w == nil || *w < 0 || *w >= len(run.Watches) {
			return errors.New("the record names no earlier k8s_watch")
		}
		call := &run.Watches[*w]
		if ev == nil {
			call.After = after
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
			e.Object = k8s.Object{Key: string(ev.Object.Key), ResourceVersion: ev.Object.ResourceVersion}
		case ev.Object != nil:
			obj, err := fromWireObject(*ev.Object, "event object")
			if err != nil {
				return err
			}
			e.Object = obj
		}
		call.Events = append(call.Events, e)
		run.Entries = append(run.Entries, k8s.Entry{WatchEvent: &k8s.WatchEventEntry{Watch: *w, Event: e}})
	case "informer":
		var r informerRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		if r.Entry == nil {
			return errors.New(`an informer record needs an "entry"`)
		}
		e, err := fromWireEntry(*r.Entry)
		if err != nil {
			return err
		}
		run := t.k8sRun()
		run.Entries = append(run.Entries, e)
	case "informer_cache":
		var r informerCacheRecord
		if err := strict(line, &r); err != nil {
			return err
		}
		objs, err := fromWireObjects(r.Objects, "objects")
		if err != nil {
			return err
		}
		run := t.k8sRun()
		run.Prefix, run.Cache = string(r.Prefix), objs
	default:
		return fmt.Errorf("unknown record type %q", typ)
	}
	return nil
}

func fromWireEntry(w wireInformerEntry) (k8s.Entry, error) {
	var e k8s.Entry
	n := 0
	if w.Start != nil {
		e.Start, n = &k8s.StartEntry{Revision: *w.Start}, n+1
	}
	if w.HandlerAdded != nil {
		e.HandlerAdded, n = w.HandlerAdded, n+1
	}
	if w.HasSynced != nil {
		e.HasSynced, n = w.HasSynced, n+1
	}
	if w.SyncedRV != nil {
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

// writeK8s writes an informer run's records in the order of its entries.
func writeK8s(w *Writer, run *k8s.Run) {
	// Watches are numbered in the order they were made, and the reader
	// demands k8s_watch records in that order: a watch is written before
	// its first event, after every earlier-numbered watch (which may have
	// no event yet, or none at all).
	written := 0
	writeWatches := func(upTo int, t int64) {
		for ; written <= upTo; written++ {
			w.K8sWatch(written, run.Watches[written], t)
		}
	}
	var t int64
	for _, e := range run.Entries {
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
			w.K8sList(c, first, t, t)
		case e.WatchEvent != nil:
			writeWatches(e.WatchEvent.Watch, t)
			w.K8sWatchEvent(e.WatchEvent.Watch, t, e.WatchEvent.Event)
		default:
			w.Informer(t, e)
		}
	}
	writeWatches(len(run.Watches)-1, t)
	for i, c := range run.Watches {
		if c.After != 0 {
			w.K8sWatchEnd(i, t, c.After)
		}
	}
	if run.Prefix != "" || len(run.Cache) > 0 {
		w.InformerCache(t, run.Prefix, run.Cache)
	}
}

// K8sList records a list made between call and ret. For a continuation,
// firstPage is the number of the k8s_list of its first page (lists are
// numbered from 0 in file order); −1 otherwise.
func (w *Writer) K8sList(c k8s.ListCall, firstPage int, call, ret int64) error {
	r := k8sListRecord{Type: "k8s_list", Call: &call, Return: &ret, Prefix: Bytes(c.Prefix), Before: c.Before, After: c.After, CompactRevision: c.CompactRevision,
		Options: wireListOptions{ResourceVersion: c.Options.ResourceVersion, ResourceVersionMatch: c.Options.ResourceVersionMatch,
			Limit: c.Options.Limit, Continue: c.Options.Continue}}
	if c.Result.Status != nil {
		r.Status = toWireStatus(c.Result.Status)
	} else {
		r.Result = &wireListResult{ResourceVersion: c.Result.ResourceVersion, Items: toWireObjects(c.Result.Items),
			Continue: c.Result.Continue, ContinueAfter: Bytes(c.Result.ContinueAfter)}
	}
	if firstPage >= 0 {
		r.FirstPage = &firstPage
	}
	return w.line(r)
}

// K8sWatch records the creation of k8s watch number id (numbered from 0).
func (w *Writer) K8sWatch(id int, c k8s.WatchCall, t int64) error {
	return w.line(k8sWatchRecord{Type: "k8s_watch", Watch: &id, Time: &t, Prefix: Bytes(c.Prefix), Before: c.Before, CompactRevision: c.CompactRevision, Status: toWireStatus(c.Status),
		Options: wireWatchOptions{ResourceVersion: c.Options.ResourceVersion, ResourceVersionMatch: c.Options.ResourceVersionMatch,
			SendInitialEvents: c.Options.SendInitialEvents, AllowWatchBookmarks: c.Options.AllowWatchBookmarks}})
}

// K8sWatchEvent records an event of k8s watch id.
func (w *Writer) K8sWatchEvent(id int, t int64, e k8s.WatchEvent) error {
	ev := &wireK8sEvent{Type: string(e.Type), InitialEventsEnd: e.InitialEventsEnd, Status: toWireStatus(e.Status)}
	if e.Type != k8s.Error {
		o := toWireObject(e.Object)
		ev.Object = &o
	}
	return w.line(k8sWatchEventRecord{Type: "k8s_watch_event", Watch: &id, Time: &t, Event: ev})
}

// K8sWatchEnd records the highest revision committed when watch id ended.
func (w *Writer) K8sWatchEnd(id int, t int64, after int64) error {
	return w.line(k8sWatchEndRecord{Type: "k8s_watch_end", Watch: &id, Time: &t, After: after})
}

// Informer records one entry of the informer's log (not a list or a watch event).
func (w *Writer) Informer(t int64, e k8s.Entry) error {
	return w.line(informerRecord{Type: "informer", Time: &t, Entry: toWireEntry(e)})
}

// InformerCache records the informer's final cache.
func (w *Writer) InformerCache(t int64, prefix string, objs []k8s.Object) error {
	return w.line(informerCacheRecord{Type: "informer_cache", Time: &t, Prefix: Bytes(prefix), Objects: toWireObjects(objs)})
}
