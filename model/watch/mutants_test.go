package watch_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
)

// world is a random committed history with one watch on it.
type world struct {
	h         *kv.History
	s         kv.State
	req       watch.Request
	createdAt int64
	topUps    int // values written by the generators' repairs
}

var keys = []string{"a", "a/1", "a/2", "b", "c"}

// drawWorld writes a random history, maybe compacts it, creates a watch,
// and writes some more.
func drawWorld(t *rapid.T) world {
	w := world{h: &kv.History{}}
	value := 0
	write := func(label string) {
		var req kv.Request
		key := rapid.SampledFrom(keys).Draw(t, label+"key")
		switch rapid.IntRange(0, 9).Draw(t, label+"op") {
		case 0, 1:
			req.Delete = &kv.DeleteRequest{Key: key}
		case 2:
			req.Delete = &kv.DeleteRequest{Key: "a", RangeEnd: kv.PrefixEnd("a")}
		case 3, 4:
			var ops []kv.Op
			for _, k := range rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 2, 3, rapid.ID[string]).Draw(t, label+"txn") {
				value++
				ops = append(ops, kv.Op{Put: &kv.PutRequest{Key: k, Value: fmt.Sprint(value)}})
			}
			req.Txn = &kv.TxnRequest{Success: ops}
		default:
			value++
			req.Put = &kv.PutRequest{Key: key, Value: fmt.Sprint(value)}
		}
		w.step(t, req)
	}
	for i, n := 0, rapid.IntRange(0, 12).Draw(t, "before"); i < n; i++ {
		write(fmt.Sprintf("b%d", i))
	}
	if w.s.Revision() > 1 && rapid.Bool().Draw(t, "compact") {
		w.compact(t, rapid.Int64Range(1, w.s.Revision()).Draw(t, "compactAt"))
	}
	w.createdAt = w.s.Revision()
	switch rapid.IntRange(0, 2).Draw(t, "range") {
	case 0:
		w.req.Key = rapid.SampledFrom(keys).Draw(t, "watchKey")
	case 1:
		w.req.Key, w.req.RangeEnd = "a", kv.PrefixEnd("a")
	default:
		w.req.Key, w.req.RangeEnd = "a", "\x00"
	}
	switch rapid.IntRange(0, 2).Draw(t, "start") {
	case 1:
		w.req.StartRevision = rapid.Int64Range(1, w.createdAt).Draw(t, "past")
	case 2:
		w.req.StartRevision = w.createdAt + rapid.Int64Range(1, 4).Draw(t, "future")
	}
	w.req.NoPut = rapid.IntRange(0, 5).Draw(t, "noput") == 0
	w.req.NoDelete = rapid.IntRange(0, 3).Draw(t, "nodelete") == 0
	w.req.PrevKV = rapid.Bool().Draw(t, "prevkv")
	w.req.ProgressNotify = rapid.Bool().Draw(t, "progress")
	for i, n := 0, rapid.IntRange(0, 12).Draw(t, "after"); i < n; i++ {
		write(fmt.Sprintf("a%d", i))
	}
	return w
}

// step runs req through the model and records the commit it made, if any.
func (w *world) step(t *rapid.T, req kv.Request) {
	var resp kv.Response
	w.s, resp = kv.Step(w.s, req)
	if resp.Err != nil {
		t.Fatalf("step %+v: %v", req, resp.Err)
	}
	if c, ok := w.s.LastCommit(); ok && c.Revision > w.h.Head() {
		if err := w.h.Append(c); err != nil {
			t.Fatal(err)
		}
	}
}

// compact compacts the store and the history at rev.
func (w *world) compact(t *rapid.T, rev int64) {
	var resp kv.Response
	w.s, resp = kv.Step(w.s, kv.Request{Compact: &kv.CompactRequest{Revision: rev}})
	if resp.Err != nil {
		t.Fatalf("compact at %d: %v", rev, resp.Err)
	}
	if err := w.h.Compact(rev); err != nil {
		t.Fatal(err)
	}
}

// The generators below give each mutant what it needs to break, by
// construction: they draw a world with drawWorld and then, only when it
// lacks something, repair it — writes appended at the end (matching the
// watch, with values no earlier write used), a compaction, or a changed
// watch request. Nothing is filtered away (rapid's Skip is never called),
// and a world drawWorld already made fit is left exactly as it is, so the
// fail files under testdata/rapid replay the same worlds.

// from returns the watch's effective start revision.
func (w *world) from() int64 {
	if w.req.StartRevision > 0 {
		return w.req.StartRevision
	}
	return w.createdAt + 1
}

// rangeKeys returns the keys of the vocabulary the watch's range holds.
func (w *world) rangeKeys() []string {
	var in []string
	for _, k := range keys {
		if w.req.InRange(k) {
			in = append(in, k)
		}
	}
	return in
}

// fresh returns a value no write of the world used (drawWorld's are numbers).
func (w *world) fresh() string {
	w.topUps++
	return fmt.Sprintf("t%d", w.topUps)
}

// unfilter lets at least one event type through a watch that filters both.
func (w *world) unfilter(t *rapid.T) {
	if w.req.NoPut && w.req.NoDelete {
		if rapid.Bool().Draw(t, "keepPuts") {
			w.req.NoPut = false
		} else {
			w.req.NoDelete = false
		}
	}
}

// unexpired moves the start of a watch from a compacted revision into the
// history that was kept, so that its canonical stream is not a cancel.
func (w *world) unexpired(t *rapid.T) {
	if c := w.h.CompactRevision(); w.from() < c {
		w.req.StartRevision = rapid.Int64Range(c, w.createdAt).Draw(t, "keptStart")
	}
}

// topUp appends a write the watch delivers as one event response (a put, or
// a delete when the watch filters puts, after an undelivered put if needed).
// The watch must let one type through.
func (w *world) topUp(t *rapid.T) {
	key := rapid.SampledFrom(w.rangeKeys()).Draw(t, "topUpKey")
	if !w.req.NoPut {
		w.step(t, kv.Request{Put: &kv.PutRequest{Key: key, Value: w.fresh()}})
		return
	}
	if _, live := w.s.Get(key, 0); !live {
		w.step(t, kv.Request{Put: &kv.PutRequest{Key: key, Value: w.fresh()}})
	}
	w.step(t, kv.Request{Delete: &kv.DeleteRequest{Key: key}})
}

func (w *world) canonical() []watch.Response { return watch.Canonical(w.h, w.req, w.createdAt) }

// withEvents draws a world whose canonical stream has at least n responses
// with events.
func withEvents(n int) func(t *rapid.T) world {
	return func(t *rapid.T) world {
		w := drawWorld(t)
		w.ensureEvents(t, n)
		return w
	}
}

func (w *world) ensureEvents(t *rapid.T, n int) {
	if len(eventResponses(w.canonical())) >= n {
		return
	}
	w.unfilter(t)
	w.unexpired(t)
	for len(eventResponses(w.canonical())) < n {
		w.topUp(t)
	}
}

// withPut draws a world whose canonical stream delivers a PUT.
func withPut(t *rapid.T) world {
	w := drawWorld(t)
	has := func() bool {
		for _, r := range w.canonical() {
			for _, e := range r.Events {
				if e.Type == kv.Put {
					return true
				}
			}
		}
		return false
	}
	if has() {
		return w
	}
	w.req.NoPut = false
	w.unexpired(t)
	for !has() {
		w.topUp(t)
	}
	return w
}

// withPrevKV draws a world whose canonical stream attaches a previous
// key-value to some event.
func withPrevKV(t *rapid.T) world {
	w := drawWorld(t)
	has := func() bool {
		for _, r := range w.canonical() {
			for _, e := range r.Events {
				if e.PrevKV != nil {
					return true
				}
			}
		}
		return false
	}
	if has() {
		return w
	}
	w.req.PrevKV = true
	w.unfilter(t)
	w.unexpired(t)
	for !has() {
		// A write of a live key: a PUT over it, or its DELETE.
		key := rapid.SampledFrom(w.rangeKeys()).Draw(t, "prevKey")
		if _, live := w.s.Get(key, 0); !live {
			w.step(t, kv.Request{Put: &kv.PutRequest{Key: key, Value: w.fresh()}})
		}
		if w.req.NoPut {
			w.step(t, kv.Request{Delete: &kv.DeleteRequest{Key: key}})
		} else {
			w.step(t, kv.Request{Put: &kv.PutRequest{Key: key, Value: w.fresh()}})
		}
	}
	return w
}

// withMultiEventRevision draws a world whose canonical stream has a response
// with two events or more (one revision's events come in one response).
func withMultiEventRevision(t *rapid.T) world {
	w := drawWorld(t)
	has := func() bool {
		for _, r := range w.canonical() {
			if len(r.Events) >= 2 {
				return true
			}
		}
		return false
	}
	if has() {
		return w
	}
	w.req.NoPut = false
	if len(w.rangeKeys()) < 2 {
		// A single key never changes twice in one revision: widen the watch.
		w.req.Key, w.req.RangeEnd = "a", kv.PrefixEnd("a")
	}
	w.unexpired(t)
	for !has() {
		var ops []kv.Op
		for _, k := range rapid.SliceOfNDistinct(rapid.SampledFrom(w.rangeKeys()), 2, 2, rapid.ID[string]).Draw(t, "txnKeys") {
			ops = append(ops, kv.Op{Put: &kv.PutRequest{Key: k, Value: w.fresh()}})
		}
		w.step(t, kv.Request{Txn: &kv.TxnRequest{Success: ops}})
	}
	return w
}

// withPastStart draws a world whose watch starts at a revision of the kept
// history, at or before its creation, and delivers at least n responses
// with events.
func withPastStart(n int) func(t *rapid.T) world {
	return func(t *rapid.T) world {
		w := drawWorld(t)
		if s := w.req.StartRevision; s == 0 || s > w.createdAt || s < w.h.CompactRevision() {
			w.req.StartRevision = rapid.Int64Range(max(w.h.CompactRevision(), 1), w.createdAt).Draw(t, "pastStart")
		}
		w.ensureEvents(t, n)
		return w
	}
}

// lowest returns the lowest revision the watch may deliver: its start, or
// — a watch from now on one store — its created revision (clientv3 resumes
// it there, inclusive; SPEC §1).
func (w *world) lowest() int64 {
	if w.req.StartRevision > 0 {
		return w.req.StartRevision
	}
	return w.createdAt
}

// earlyEvent returns the latest matching event in the kept history below
// the lowest revision the watch may deliver.
func (w *world) earlyEvent() (kv.Event, bool) {
	for _, c := range slices.Backward(w.h.Between(w.h.CompactRevision(), w.lowest()-1)) {
		for _, e := range c.Events {
			if w.req.Matches(e) {
				return e, true
			}
		}
	}
	return kv.Event{}, false
}

// withEarlyEvent draws a world in which a matching event of the kept
// history lies below the watch's start: when there is none, the watch
// starts right after one (appended if the history has none).
func withEarlyEvent(t *rapid.T) world {
	w := drawWorld(t)
	if _, ok := w.earlyEvent(); ok {
		return w
	}
	w.unfilter(t)
	var revs []int64
	for _, c := range w.h.Between(max(w.h.CompactRevision(), 1), w.h.Head()) {
		if slices.ContainsFunc(c.Events, w.req.Matches) {
			revs = append(revs, c.Revision)
		}
	}
	if len(revs) == 0 {
		w.topUp(t)
		revs = append(revs, w.h.Head())
	}
	w.req.StartRevision = rapid.SampledFrom(revs).Draw(t, "eventBeforeStart") + 1
	return w
}

// withFutureStart draws a world whose watch starts at least two revisions
// after its creation.
func withFutureStart(t *rapid.T) world {
	w := drawWorld(t)
	if w.req.StartRevision < w.createdAt+2 {
		w.req.StartRevision = w.createdAt + rapid.Int64Range(2, 5).Draw(t, "farFuture")
	}
	return w
}

// quietHead writes, when the head revision holds a matching event or the
// watch starts after it, keys no watch matches ("0" sorts below every key of
// the vocabulary): the head then holds no event of the watch and is at
// least its start, and above revision 1.
func (w *world) quietHead(t *rapid.T) {
	matches := func() bool {
		c, ok := w.h.Commit(w.h.Head())
		return ok && slices.ContainsFunc(c.Events, w.req.Matches)
	}
	for matches() || w.h.Head() < max(w.from(), 2) {
		w.step(t, kv.Request{Put: &kv.PutRequest{Key: "0", Value: w.fresh()}})
	}
}

// withProgressAtQuietHead draws a world whose canonical stream ends with a
// progress notification at a head revision no delivered event reaches.
func withProgressAtQuietHead(t *rapid.T) world {
	w := drawWorld(t)
	w.req.ProgressNotify = true
	w.unexpired(t)
	w.quietHead(t)
	return w
}

// withEventsBelowQuietHead draws a world with n responses with events and a
// head above them.
func withEventsBelowQuietHead(n int) func(t *rapid.T) world {
	return func(t *rapid.T) world {
		w := drawWorld(t)
		w.ensureEvents(t, n)
		// Above every header of the stream (at most the creation revision
		// or an event's).
		w.step(t, kv.Request{Put: &kv.PutRequest{Key: "0", Value: w.fresh()}})
		w.quietHead(t)
		return w
	}
}

// withWriteAtCreation draws a world whose watch was created right after a
// write (revision createdAt has a commit).
func withWriteAtCreation(t *rapid.T) world {
	w := drawWorld(t)
	if _, ok := w.h.Commit(w.createdAt); !ok {
		w.step(t, kv.Request{Put: &kv.PutRequest{Key: "a", Value: w.fresh()}})
		w.createdAt = w.s.Revision()
	}
	return w
}

// compactedBelow returns the highest revision below the compaction with a
// matching event, or 0.
func (w *world) compactedBelow() int64 {
	c := w.h.CompactRevision()
	for _, cm := range slices.Backward(w.h.Between(1, c-1)) {
		if slices.ContainsFunc(cm.Events, w.req.Matches) {
			return cm.Revision
		}
	}
	return 0
}

// withCompactedHistory draws a world compacted at c ≥ 2 with a matching
// event below c, where a watch from c gets something after its created
// response. When drawWorld's world lacks that, two matching writes are
// appended, the second compacted, and the watch is created after them.
func withCompactedHistory(t *rapid.T) world {
	w := drawWorld(t)
	fits := func() bool {
		req := w.req
		req.StartRevision = w.h.CompactRevision()
		return w.h.CompactRevision() > 1 && w.compactedBelow() > 0 && len(watch.Canonical(w.h, req, w.createdAt)) >= 2
	}
	if fits() {
		return w
	}
	w.unfilter(t)
	w.topUp(t)
	w.topUp(t)
	w.compact(t, w.h.Head())
	w.createdAt = w.s.Revision()
	return w
}

// withCompaction draws a compacted world whose watch starts at or above the
// compaction (its history was kept).
func withCompaction(t *rapid.T) world {
	w := drawWorld(t)
	if w.h.CompactRevision() < 0 {
		w.compact(t, rapid.Int64Range(1, min(w.createdAt, w.from())).Draw(t, "keptCompactAt"))
	}
	w.unexpired(t)
	return w
}

func properties(vs []spec.Violation) []spec.Property {
	var ps []spec.Property
	for _, v := range vs {
		if !slices.Contains(ps, v.Property) {
			ps = append(ps, v.Property)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// config is what the checker knows of a world's watch: one store, so
// everything committed before the watch was requested is applied by the
// server that registers it.
func (w world) config() watch.Config { return watch.Config{CommittedBefore: w.createdAt} }

var strictExpectations = watch.Expectations{MonotonicHeaders: true, StartAfterCreated: true}

func validate(w world, cfg watch.Config, stream []watch.Response) []spec.Violation {
	v := watch.NewValidatorWith(w.h, w.req, cfg)
	var out []spec.Violation
	for _, r := range stream {
		out = append(out, v.Observe(r)...)
	}
	return out
}

// TestCanonicalIsValid: the stream a perfect server sends passes every
// property, for random histories and watches. SPEC §3.
func TestCanonicalIsValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := drawWorld(t)
		stream := watch.Canonical(w.h, w.req, w.createdAt)
		if vs := watch.Validate(w.h, w.req, stream); len(vs) > 0 {
			t.Fatalf("canonical stream rejected: %v\nstream: %+v", vs, stream)
		}
	})
}

// A mutant is a deliberately broken server: it takes the canonical stream and
// breaks exactly one property. It may first change the watch request (and
// then recompute the stream) to reach a case it can break. Its world
// generator gives it, by construction, something to break; break_ returns
// false only when it did not, which fails the test (a generator bug: no
// world is ever filtered away).
type mutant struct {
	property spec.Property
	name     string
	world    func(t *rapid.T) world
	break_   func(t *rapid.T, w *world, stream []watch.Response) ([]watch.Response, bool)
}

// eventResponses returns the indexes of the responses that carry events.
func eventResponses(stream []watch.Response) []int {
	var idx []int
	for i, r := range stream {
		if len(r.Events) > 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

func clone(stream []watch.Response) []watch.Response {
	out := make([]watch.Response, len(stream))
	for i, r := range stream {
		r.Events = slices.Clone(r.Events)
		out[i] = r
	}
	return out
}

func withoutProgress(stream []watch.Response) []watch.Response {
	return slices.DeleteFunc(stream, func(r watch.Response) bool { return r.IsProgressNotify() })
}

var mutants = []mutant{
	{spec.Ordered, "reverses two revisions in one response", withEvents(2), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) < 2 {
			return nil, false
		}
		i := rapid.IntRange(0, len(idx)-2).Draw(t, "i")
		a, b := idx[i], idx[i+1]
		s[a].Events = append(slices.Clone(s[b].Events), s[a].Events...)
		s[a].Revision = s[b].Revision
		return slices.Delete(s, b, b+1), true
	}},
	{spec.Ordered, "replays an older revision (etcd#15271)", withEvents(2), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		s = withoutProgress(s)
		idx := eventResponses(s)
		if len(idx) < 2 {
			return nil, false
		}
		old := s[idx[rapid.IntRange(0, len(idx)-2).Draw(t, "old")]]
		old.Revision = s[idx[len(idx)-1]].Revision
		return append(s, old), true
	}},
	{spec.Unique, "sends the last revision twice (etcd#17247)", withEvents(1), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		s = withoutProgress(s)
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		return append(s, s[idx[len(idx)-1]]), true
	}},
	{spec.Reliable, "drops a revision in the middle", withEvents(3), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) < 3 {
			return nil, false
		}
		i := idx[rapid.IntRange(1, len(idx)-2).Draw(t, "i")]
		return slices.Delete(s, i, i+1), true
	}},
	{spec.Reliable, "forges an event's value", withPut, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		var puts [][2]int
		for _, i := range eventResponses(s) {
			for j, e := range s[i].Events {
				if e.Type == kv.Put {
					puts = append(puts, [2]int{i, j})
				}
			}
		}
		if len(puts) == 0 {
			return nil, false
		}
		p := rapid.SampledFrom(puts).Draw(t, "put")
		s[p[0]].Events[p[1]].KV.Value += "-forged"
		return s, true
	}},
	{spec.Atomic, "splits a revision over two responses", withMultiEventRevision, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		for _, i := range eventResponses(s) {
			if n := len(s[i].Events); n >= 2 {
				cut := rapid.IntRange(1, n-1).Draw(t, "cut")
				first, second := s[i], s[i]
				first.Events, second.Events = s[i].Events[:cut], s[i].Events[cut:]
				s[i] = first
				return slices.Insert(s, i+1, second), true
			}
		}
		return nil, false
	}},
	{spec.Resumable, "drops the first event of a watch from the past (etcd#18089)", withPastStart(2), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if w.req.StartRevision == 0 || w.req.StartRevision > w.createdAt || len(idx) < 2 {
			return nil, false
		}
		return slices.Delete(s, idx[0], idx[0]+1), true
	}},
	{spec.Bookmarkable, "sends a progress notification before its events (etcd#15220)", withEvents(1), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		i := idx[rapid.IntRange(0, len(idx)-1).Draw(t, "i")]
		if s[i].Revision < w.req.StartRevision-1 {
			return nil, false
		}
		return slices.Insert(s, i, watch.Response{Revision: s[i].Revision}), true
	}},
	{spec.Filtered, "delivers an event outside the range", withEvents(1), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		r := &s[idx[rapid.IntRange(0, len(idx)-1).Draw(t, "i")]]
		rev := r.Events[len(r.Events)-1].KV.ModRevision
		r.Events = append(r.Events, kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: "\x00outside", Value: "x", CreateRevision: rev, ModRevision: rev, Version: 1}})
		return s, true
	}},
	{spec.PrevKV, "attaches a wrong previous value", withPrevKV, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		for _, i := range eventResponses(s) {
			for j, e := range s[i].Events {
				if e.PrevKV != nil {
					p := *e.PrevKV
					p.Value += "-stale"
					s[i].Events[j].PrevKV = &p
					return s, true
				}
			}
		}
		return nil, false
	}},
	{spec.IsCreate, "flips whether a PUT created its key", withPut, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		for _, i := range eventResponses(s) {
			for j, e := range s[i].Events {
				if e.Type != kv.Put {
					continue
				}
				if e.IsCreate() {
					s[i].Events[j].KV.CreateRevision = e.KV.ModRevision - 1
				} else {
					s[i].Events[j].KV.CreateRevision = e.KV.ModRevision
				}
				return s, true
			}
		}
		return nil, false
	}},
	{spec.StartRevision, "delivers an event from before the start", withEarlyEvent, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		e, ok := w.earlyEvent()
		if !ok {
			return nil, false
		}
		early := watch.Response{Revision: max(w.createdAt, e.KV.ModRevision), Events: []kv.Event{{Type: e.Type, KV: e.KV}}}
		return slices.Insert(s, 1, early), true
	}},
	{spec.StartRevision, "sends a progress notification below a future start (etcd#20221)", withFutureStart, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		if w.req.StartRevision < w.createdAt+2 {
			return nil, false
		}
		return slices.Insert(s, 1, watch.Response{Revision: w.createdAt}), true
	}},
	{spec.CompactedCancel, "serves a compacted start from the compaction revision (etcd#17529)", withCompactedHistory, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		c := w.h.CompactRevision()
		below := w.compactedBelow()
		if c <= 1 || below == 0 {
			return nil, false
		}
		// Ask for history below the compaction, from a revision at or
		// before a matching event there, which the server skips.
		w.req.StartRevision = rapid.Int64Range(1, below).Draw(t, "compactedStart")
		req := w.req
		req.StartRevision = c
		served := watch.Canonical(w.h, req, w.createdAt)
		if len(served) < 2 {
			return nil, false // the skip would be invisible
		}
		return served, true
	}},
	{spec.CompactedCancel, "cancels a watch whose history was kept", withCompaction, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		c := w.h.CompactRevision()
		if c < 0 || w.from() < c || len(s) < 1 {
			return nil, false
		}
		return []watch.Response{s[0], {Canceled: true, CompactRevision: c}}, true
	}},
	{spec.MonotonicRevision, "sends a header revision below its events", withEvents(1), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		r := &s[idx[len(idx)-1]]
		r.Revision = r.Events[0].KV.ModRevision - 1
		return s, true
	}},
	{spec.MonotonicRevision, "sends a progress notification below an event already delivered", withEvents(1), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		s = withoutProgress(s)
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		i := idx[rapid.IntRange(0, len(idx)-1).Draw(t, "i")]
		last := s[i].Events[len(s[i].Events)-1].KV.ModRevision
		low := max(w.req.StartRevision-1, 1)
		if last-1 < low {
			return nil, false
		}
		if rapid.Bool().Draw(t, "unrecorded") {
			s[i].Revision = 0 // the event's header revision was not recorded (issue 19)
		}
		return slices.Insert(s, i+1, watch.Response{Revision: rapid.Int64Range(low, last-1).Draw(t, "p")}), true
	}},
	{spec.MonotonicRevision, "sends a progress notification below an earlier one", withProgressAtQuietHead, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		last := len(s) - 1
		if last < 1 || !s[last].IsProgressNotify() {
			return nil, false
		}
		low := max(w.req.StartRevision-1, 1)
		for _, r := range s {
			for _, e := range r.Events {
				low = max(low, e.KV.ModRevision)
			}
		}
		if low >= s[last].Revision {
			return nil, false
		}
		return append(s, watch.Response{Revision: rapid.Int64Range(low, s[last].Revision-1).Draw(t, "p")}), true
	}},
	{spec.Bookmarkable, "sends a first progress notification beyond the head to a watch without a created response", drawWorld, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		w.req.StartRevision = 0
		return []watch.Response{{Revision: w.h.Head() + 1}}, true
	}},
}

// strictMutants break an expectation of the strict profile (SPEC §9.3), not
// an etcd guarantee: the default passes them, the strict expectations
// reject them under the property named.
var strictMutants = []mutant{
	{spec.MonotonicRevision, "re-sends a batch with a header below an earlier one", withEventsBelowQuietHead(2), func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) < 2 {
			return nil, false
		}
		i := rapid.IntRange(0, len(idx)-2).Draw(t, "i")
		a, b := idx[i], idx[i+1]
		if s[b].Revision >= w.h.Head() {
			return nil, false
		}
		s[a].Revision = w.h.Head() // legal: a catch-up response carries the current revision
		return s, true
	}},
	{spec.StartRevision, "delivers the event at the created revision to a watch from now", withWriteAtCreation, func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		c, ok := w.h.Commit(w.createdAt)
		if !ok {
			return nil, false
		}
		// A watch from now on a key the created revision wrote.
		e := c.Events[rapid.IntRange(0, len(c.Events)-1).Draw(t, "e")]
		w.req = watch.Request{Key: e.KV.Key}
		e.PrevKV = nil
		s = w.canonical()
		return slices.Insert(s, 1, watch.Response{Revision: w.createdAt, Events: []kv.Event{e}}), true
	}},
}

// TestMutantsAreRejected: each deliberately broken server is rejected, and
// the validator names exactly the property the mutant breaks. Every drawn
// world is used: the generators give each mutant something to break. A
// strict mutant passes by default and is rejected under the strict
// profile's expectations. SPEC §3.1–§3.12, §9.3.
func TestMutantsAreRejected(t *testing.T) {
	for _, set := range []struct {
		strict  bool
		mutants []mutant
	}{{false, mutants}, {true, strictMutants}} {
		for _, m := range set.mutants {
			name := string(m.property) + "/" + m.name
			if set.strict {
				name += " (strict)"
			}
			t.Run(name, func(t *testing.T) {
				rapid.Check(t, func(rt *rapid.T) {
					w := m.world(rt)
					stream, ok := m.break_(rt, &w, clone(w.canonical()))
					if !ok {
						rt.Fatalf("mutant %q found nothing to break: its generator must provide it\nrequest %+v created at %d, compacted at %d\nhistory %+v",
							m.name, w.req, w.createdAt, w.h.CompactRevision(), w.h.Commits())
					}
					cfg := w.config()
					if set.strict {
						// Not an etcd guarantee: the default passes it.
						if vs := validate(w, cfg, stream); len(vs) > 0 {
							rt.Fatalf("strict mutant %q fails by default: %v\nstream %+v", m.name, vs, stream)
						}
						cfg.Expect = strictExpectations
					}
					vs := validate(w, cfg, stream)
					if got := properties(vs); !slices.Equal(got, []spec.Property{m.property}) {
						rt.Fatalf("mutant %q: want exactly [%s], got %v\nrequest %+v created at %d\nstream %+v\nviolations: %v",
							m.name, m.property, got, w.req, w.createdAt, stream, vs)
					}
				})
			})
		}
	}
}

// TestEveryWatchPropertyHasAMutant keeps the mutant list complete.
func TestEveryWatchPropertyHasAMutant(t *testing.T) {
	for _, e := range spec.Catalog() {
		if !strings.HasPrefix(e.Section, "3.") {
			continue // not a watch property: model/kv, linearizability and model/k8s test their mutants
		}
		if e.Model == "lease.Check" {
			continue // §3.14, §3.15: model/lease's TestCheckMutants breaks them
		}
		if !slices.ContainsFunc(mutants, func(m mutant) bool { return m.property == e.Property }) {
			t.Errorf("no mutant breaks %s (%s)", e.Property, e.Property.Section())
		}
	}
}

// TestLegalVariantsAreAccepted: a server may batch revisions, delay the tail
// of the stream without bound, send header revisions above the events — a
// re-sent catch-up batch below an earlier header (etcd's victims) —, start a
// watch from now at its created revision (clientv3's resume), and send
// truthful progress notifications whenever it likes; on a shared stream a
// watch may also receive, first, the answer to a progress request computed
// before it was registered. None of that is a violation. This guards the
// validator against false positives. SPEC §1, §3, §6 (what is not
// guaranteed).
func TestLegalVariantsAreAccepted(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := drawWorld(t)
		cfg := w.config()
		canonical := watch.Canonical(w.h, w.req, w.createdAt)
		from := w.req.StartRevision
		if from == 0 {
			from = w.createdAt + 1
		}
		var out []watch.Response
		delivered := from - 1 // every matching event up to here was delivered
		lastEvent, lastProgress := int64(0), int64(0)
		emit := func(r watch.Response) {
			if len(r.Events) > 0 {
				// Any header revision at or above the events, up to the head:
				// not necessarily above earlier headers (etcd#victims).
				low := r.Events[len(r.Events)-1].KV.ModRevision
				r.Revision = rapid.Int64Range(low, max(low, w.h.Head())).Draw(t, "header")
			}
			out = append(out, r)
		}
		out = append(out, canonical[0]) // created
		if rapid.Bool().Draw(t, "shared") {
			// The answer to a progress request computed before the watch was
			// registered: at or below the created header, before any event.
			cfg.Progress = watch.BindAfterRegistration
			if rapid.Bool().Draw(t, "stale") && w.createdAt >= 1 {
				out = append(out, watch.Response{Revision: rapid.Int64Range(1, w.createdAt).Draw(t, "staleAt")})
			}
		}
		events := canonical[1:]
		if len(events) > 0 && (events[0].Canceled || events[len(events)-1].IsProgressNotify()) {
			events = events[:len(events)-1] // re-decided below
		}
		if len(canonical) > 1 && canonical[1].Canceled {
			out = append(out, canonical[1])
			events = nil
		}
		if w.req.StartRevision == 0 && len(events) == len(canonical)-1 && w.h.CompactRevision() <= w.createdAt && rapid.Bool().Draw(t, "resumeInclusive") {
			// clientv3 resumed the watch at its created revision, inclusive.
			if c, ok := w.h.Commit(w.createdAt); ok {
				var evs []kv.Event
				for _, e := range c.Events {
					if w.req.Matches(e) {
						if !w.req.PrevKV || e.KV.ModRevision-1 < w.h.CompactRevision() {
							e.PrevKV = nil
						}
						evs = append(evs, e)
					}
				}
				if len(evs) > 0 {
					events = append([]watch.Response{{Revision: w.createdAt, Events: evs}}, events...)
					delivered = w.createdAt - 1
				}
			}
		}
		// A delayed server: only a prefix of the events ever arrives.
		all := events
		events = events[:rapid.IntRange(0, len(events)).Draw(t, "prefix")]
		for i := 0; i < len(events); {
			// Batch one or more revisions into one response.
			n := rapid.IntRange(1, len(events)-i).Draw(t, "batch")
			batch := watch.Response{}
			for _, r := range events[i : i+n] {
				batch.Events = append(batch.Events, r.Events...)
			}
			emit(batch)
			i += n
			delivered = batch.Events[len(batch.Events)-1].KV.ModRevision
			lastEvent = delivered
			// Maybe a truthful progress notification: any revision from the
			// last delivered one (and the last notification) up to just
			// before the next undelivered event.
			limit := w.h.Head()
			if i < len(all) {
				limit = all[i].Events[0].KV.ModRevision - 1
			}
			low := max(delivered, lastEvent, lastProgress, w.req.StartRevision-1)
			if rapid.Bool().Draw(t, "progress") && limit >= low {
				p := rapid.Int64Range(low, limit).Draw(t, "progressAt")
				lastProgress = p
				out = append(out, watch.Response{Revision: p})
			}
		}
		if vs := validate(w, cfg, out); len(vs) > 0 {
			t.Fatalf("legal stream rejected: %v\nrequest %+v created at %d\nstream %+v", vs, w.req, w.createdAt, out)
		}
	})
}
