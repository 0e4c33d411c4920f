package kube

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/watchspec/watchspec/model/k8s"
)

// recorder holds what the run sent and received: every write with its
// answer, every list, watch and watch event, and the informer's log. All
// its methods are safe for concurrent use; every record takes its time
// under the lock that orders the log, so the log's times never decrease
// (docs/TRACE_FORMAT.md, "Order").
type recorder struct {
	t0     time.Time
	gvr    k8s.GVR
	prefix string // the model's prefix of the run's namespace

	mu      sync.Mutex
	writes  []*writeRec
	lists   []*listRec
	watches []*watchRec
	entries []entry
	cache   []rawObject
	// hasCache says the informer's final cache was recorded.
	hasCache bool
	// firstPages maps a continue token to the list of its first page.
	firstPages map[string]int
	values     int

	// compactMu is held for writing by a compaction (Config.Compact) and
	// for reading by a list or a watch until it is answered, so that each
	// knows the compaction in force when it was answered.
	compactMu sync.RWMutex
	// compactRev is that compaction: −1 none yet, 0 unknown (a run that
	// does not compact cannot see the apiserver's compactions).
	compactRev  int64
	compactions []compaction
}

// compaction is one compaction of the store at rev, made through the
// apiserver's protocol: compact_rev_key written at keyRev, the compaction
// applied when the store was at at; sent at call, answered at ret.
type compaction struct{ rev, keyRev, at, call, ret int64 }

func newRecorder(gvr k8s.GVR, ns string) *recorder {
	return &recorder{t0: time.Now(), gvr: gvr, prefix: gvr.Prefix(ns), firstPages: map[string]int{}}
}

// now is the time of a record; the caller holds r.mu.
func (r *recorder) now() int64 { return int64(time.Since(r.t0)) }

// clock is the time now, for a record not yet in the log.
func (r *recorder) clock() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now()
}

// nextValue returns a value never written before.
func (r *recorder) nextValue() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.values++
	return fmt.Sprintf("v%d", r.values)
}

// rawObject is an object as a client received it: its UID is the server's
// string, which the writes' answers map to the revision that created it.
type rawObject struct {
	key, value string
	rv         int64
	uid        string
}

// writeKind is what a write did.
type writeKind int

const (
	create writeKind = iota
	update
	remove
	// compactKey is the write of compact_rev_key that records a
	// compaction (the apiserver's protocol, etcd3.Compact).
	compactKey
)

func (k writeKind) String() string {
	return [...]string{"create", "update", "delete", "compact_rev_key write"}[k]
}

// writeRec is a write that succeeded: its answer said what it wrote.
type writeRec struct {
	kind      writeKind
	key       string
	value     string // the value written (create, update)
	uid       string // the life of the key written
	call, ret int64
	// rev is the revision it committed, 0 until known: a delete answered
	// with a Status says nothing of it.
	rev int64
	// client is the writer that made it.
	client int
}

type listRec struct {
	compacts  int64 // the compaction in force when it was answered
	opts      k8s.ListOptions
	call, ret int64
	status    *k8s.Status
	rv        int64
	items     []rawObject
	cont      string // the key the result's continue token continues after
	first     int    // the list of a continuation's first page, or −1
	semantic  string // for the counts
}

type rawEvent struct {
	time       int64
	typ        k8s.EventType
	obj        rawObject
	initialEnd bool
	status     *k8s.Status
}

type watchRec struct {
	id        int
	compacts  int64
	opts      k8s.WatchOptions
	call, end int64 // sent, and ended (0: not yet)
	ended     bool
	status    *k8s.Status
	events    []rawEvent
}

// entry is one list (list ≥ 0), one watch event (watch ≥ 0), or one entry
// of the informer's log.
type entry struct {
	list, watch, event int
	informer           *rawInformerEntry
	time               int64
}

type rawInformerEntry struct {
	entry    k8s.Entry // Notification unset
	note     *k8s.Notification
	old, new *rawObject
}

// informer records an entry of the informer's log (without a Notification).
func (r *recorder) informer(e k8s.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, entry{list: -1, watch: -1, informer: &rawInformerEntry{entry: e}, time: r.now()})
}

// notify records a handler's call: n without its objects, old and new raw.
func (r *recorder) notify(n k8s.Notification, old, new *rawObject) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, entry{list: -1, watch: -1, informer: &rawInformerEntry{note: &n, old: old, new: new}, time: r.now()})
}

func (r *recorder) setCache(objs []rawObject) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache = append([]rawObject(nil), objs...)
	r.hasCache = true
}

// addCompaction records a compaction answered now; the caller holds
// compactMu for writing.
func (r *recorder) addCompaction(c compaction) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.ret = r.now()
	r.compactions = append(r.compactions, c)
	r.compactRev = c.rev
	r.writes = append(r.writes, &writeRec{kind: compactKey, key: CompactRevKey, value: fmt.Sprint(c.rev), call: c.call, ret: c.ret, rev: c.keyRev, client: 998})
}

// CompactRevKey is the key the apiserver records its compactions in
// (k8s.io/apiserver pkg/storage/etcd3/compact.go).
const CompactRevKey = "compact_rev_key"

func (r *recorder) addWrite(w *writeRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.ret = r.now()
	r.writes = append(r.writes, w)
}

// addList records a list answered now and returns its index.
func (r *recorder) addList(l *listRec) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.ret = r.now()
	r.lists = append(r.lists, l)
	i := len(r.lists) - 1
	r.entries = append(r.entries, entry{list: i, watch: -1})
	return i
}

func (r *recorder) firstPage(token string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.firstPages[token]; ok {
		return i
	}
	return -1
}

func (r *recorder) setFirstPage(token string, i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.firstPages[token] = i
}

func (r *recorder) listStatus(i int) *k8s.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists[i].status
}

// addWatch records a watch; a refused one ends where it was answered.
func (r *recorder) addWatch(w *watchRec) *watchRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.id = len(r.watches) + 1
	if w.status != nil {
		w.end, w.ended = r.now(), true
	}
	r.watches = append(r.watches, w)
	return w
}

func (r *recorder) addEvent(w *watchRec, e rawEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.time = r.now()
	w.events = append(w.events, e)
	r.entries = append(r.entries, entry{list: -1, watch: w.id - 1, event: len(w.events) - 1, time: e.time})
}

func (r *recorder) endWatch(w *watchRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !w.ended {
		w.end, w.ended = r.now(), true
	}
}

// --- continue tokens ---

// DecodeContinue returns the key a continue token of the apiserver's
// format continues after, in the model's keys (prefix + the key after the
// list's prefix), and the token's revision; ok=false for a token of
// another format. Package traces/record/kuberecord decodes with it.
func DecodeContinue(token, prefix string) (key string, rv int64, ok bool) {
	return decodeContinue(token, prefix)
}

// decodeContinue returns the key a continue token's page continues after,
// in the model's keys (prefix + name), and the token's revision. The
// apiserver's token is base64url of {"v":"meta.k8s.io/v1","rv":R,"start":S}
// where S is the key after the list's prefix plus "\x00"
// (k8s.io/apiserver pkg/storage/continue.go). A token this does not decode
// (another server's format) reads as ok=false.
func decodeContinue(token, prefix string) (key string, rv int64, ok bool) {
	if token == "" {
		return "", 0, false
	}
	data, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(token, "="))
	if err != nil {
		return "", 0, false
	}
	var c struct {
		V     string `json:"v"`
		RV    int64  `json:"rv"`
		Start string `json:"start"`
	}
	if err := json.Unmarshal(data, &c); err != nil || c.V != "meta.k8s.io/v1" {
		return "", 0, false
	}
	// The start key is relative to the list's key prefix, with or without
	// a leading "/" (DecodeContinue reads both).
	return prefix + strings.TrimPrefix(strings.TrimSuffix(c.Start, "\x00"), "/"), c.RV, true
}

// --- counts ---

// Stats counts what a run did, for its report.
type Stats struct {
	// Writes counts the creates, updates and deletes that succeeded.
	Writes int
	// Lists counts the lists by semantic (k8s.ListSemantic: MostRecent,
	// Any, NotOlderThan, Exact, Continuation, or "invalid" for options the
	// server must reject).
	Lists map[string]int
	// Watches counts every watch; WatchLists those with sendInitialEvents.
	Watches, WatchLists int
	// Bookmarks counts the BOOKMARK events received (InitialEventsEnd of
	// them the ones annotated k8s.io/initial-events-end).
	Bookmarks, InitialEventsEnd int
	// Events counts every watch event.
	Events int
	// Gone counts the answers 410 Gone: lists, watches refused, and ERROR
	// events of watches; GoneLists those to lists.
	Gone, GoneLists int
	// Notifications counts the informer's handler calls; Relists its lists
	// and WatchList states after the first.
	Notifications int
	// Compactions counts the compactions the run made (Config.Compact).
	Compactions int
	// Revisions is how far the run's history goes: from Base to Head.
	Base, Head int64
	// Foreign counts the revisions in between that the run did not write.
	Foreign  int
	Duration time.Duration
}

func (s Stats) String() string {
	var sems []string
	for _, k := range []string{string(k8s.MostRecent), string(k8s.Any), string(k8s.NotOlderThan), string(k8s.Exact), string(k8s.Continuation), "invalid"} {
		sems = append(sems, fmt.Sprintf("%s %d", k, s.Lists[k]))
	}
	revs := ""
	if s.Head > 0 {
		revs = fmt.Sprintf(" (revisions %d–%d, %d by others)", s.Base+1, s.Head, s.Foreign)
	}
	comp := ""
	if s.Compactions > 0 {
		comp = fmt.Sprintf(", %d compactions", s.Compactions)
	}
	return fmt.Sprintf("%d writes%s%s; lists: %s; %d watches (%d WatchLists), %d events, %d bookmarks (%d initial-events-end); %d answers 410 Gone (%d to lists); %d informer notifications",
		s.Writes, revs, comp, strings.Join(sems, ", "), s.Watches, s.WatchLists, s.Events, s.Bookmarks, s.InitialEventsEnd, s.Gone, s.GoneLists, s.Notifications)
}

func (r *recorder) stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Lists: map[string]int{}, Compactions: len(r.compactions)}
	for _, w := range r.writes {
		if w.kind != compactKey {
			s.Writes++
		}
	}
	for _, l := range r.lists {
		s.Lists[l.semantic]++
		if l.status != nil && l.status.Code == k8s.StatusGone {
			s.Gone++
			s.GoneLists++
		}
	}
	for _, w := range r.watches {
		s.Watches++
		if w.opts.SendInitialEvents != nil && *w.opts.SendInitialEvents {
			s.WatchLists++
		}
		if w.status != nil && w.status.Code == k8s.StatusGone {
			s.Gone++
		}
		for _, e := range w.events {
			s.Events++
			switch {
			case e.typ == k8s.Bookmark:
				s.Bookmarks++
				if e.initialEnd {
					s.InitialEventsEnd++
				}
			case e.typ == k8s.Error && e.status != nil && e.status.Code == k8s.StatusGone:
				s.Gone++
			}
		}
	}
	for _, e := range r.entries {
		if e.informer != nil && e.informer.note != nil {
			s.Notifications++
		}
	}
	return s
}

// sortedObjects sorts raw objects by key.
func sortedObjects(objs []rawObject) []rawObject {
	sort.Slice(objs, func(i, j int) bool { return objs[i].key < objs[j].key })
	return objs
}
