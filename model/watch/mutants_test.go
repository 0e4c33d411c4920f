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
	for i, n := 0, rapid.IntRange(0, 12).Draw(t, "before"); i < n; i++ {
		write(fmt.Sprintf("b%d", i))
	}
	if w.s.Revision() > 1 && rapid.Bool().Draw(t, "compact") {
		c := rapid.Int64Range(1, w.s.Revision()).Draw(t, "compactAt")
		w.s, _ = kv.Step(w.s, kv.Request{Compact: &kv.CompactRequest{Revision: c}})
		if err := w.h.Compact(c); err != nil {
			t.Fatal(err)
		}
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
// then recompute the stream) to reach a case it can break. It returns false
// when the world gives it nothing to break.
type mutant struct {
	property spec.Property
	name     string
	break_   func(t *rapid.T, w *world, stream []watch.Response) ([]watch.Response, bool)
	// strict checks the mutant under the strict profile's expectations
	// (§9.3): what it breaks is not an etcd guarantee.
	strict bool
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
	{property: spec.Ordered, name: "reverses two revisions in one response", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
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
	{property: spec.Ordered, name: "replays an older revision (etcd#15271)", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		s = withoutProgress(s)
		idx := eventResponses(s)
		if len(idx) < 2 {
			return nil, false
		}
		old := s[idx[rapid.IntRange(0, len(idx)-2).Draw(t, "old")]]
		old.Revision = s[idx[len(idx)-1]].Revision
		return append(s, old), true
	}},
	{property: spec.Unique, name: "sends the last revision twice (etcd#17247)", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		s = withoutProgress(s)
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		return append(s, s[idx[len(idx)-1]]), true
	}},
	{property: spec.Reliable, name: "drops a revision in the middle", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) < 3 {
			return nil, false
		}
		i := idx[rapid.IntRange(1, len(idx)-2).Draw(t, "i")]
		return slices.Delete(s, i, i+1), true
	}},
	{property: spec.Reliable, name: "forges an event's value", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		r := &s[idx[rapid.IntRange(0, len(idx)-1).Draw(t, "i")]]
		e := &r.Events[rapid.IntRange(0, len(r.Events)-1).Draw(t, "e")]
		if e.Type == kv.Delete {
			return nil, false
		}
		e.KV.Value += "-forged"
		return s, true
	}},
	{property: spec.Atomic, name: "splits a revision over two responses", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
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
	{property: spec.Resumable, name: "drops the first event of a watch from the past (etcd#18089)", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if w.req.StartRevision == 0 || w.req.StartRevision > w.createdAt || len(idx) < 2 {
			return nil, false
		}
		return slices.Delete(s, idx[0], idx[0]+1), true
	}},
	{property: spec.Bookmarkable, name: "sends a progress notification before its events (etcd#15220)", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
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
	{property: spec.Filtered, name: "delivers an event outside the range", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		r := &s[idx[rapid.IntRange(0, len(idx)-1).Draw(t, "i")]]
		rev := r.Events[len(r.Events)-1].KV.ModRevision
		r.Events = append(r.Events, kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: "\x00outside", Value: "x", CreateRevision: rev, ModRevision: rev, Version: 1}})
		return s, true
	}},
	{property: spec.PrevKV, name: "attaches a wrong previous value", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
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
	{property: spec.IsCreate, name: "flips whether a PUT created its key", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
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
	{property: spec.StartRevision, name: "delivers an event from before the start", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		from := w.req.StartRevision
		if from == 0 {
			// A watch from now may start at its created revision (clientv3
			// resumes there, inclusive), never below it on one store.
			from = w.createdAt
		}
		for _, c := range slices.Backward(w.h.Between(w.h.CompactRevision(), from-1)) {
			for _, e := range c.Events {
				if w.req.Matches(e) {
					early := watch.Response{Revision: max(w.createdAt, e.KV.ModRevision), Events: []kv.Event{{Type: e.Type, KV: e.KV}}}
					return slices.Insert(s, 1, early), true
				}
			}
		}
		return nil, false
	}},
	{property: spec.StartRevision, name: "sends a progress notification below a future start (etcd#20221)", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		if w.req.StartRevision < w.createdAt+2 {
			return nil, false
		}
		return slices.Insert(s, 1, watch.Response{Revision: w.createdAt}), true
	}},
	{property: spec.CompactedCancel, name: "serves a compacted start from the compaction revision (etcd#17529)", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		c := w.h.CompactRevision()
		if c <= 1 {
			return nil, false
		}
		// Ask for history below the compaction, which the server skips.
		w.req.StartRevision = rapid.Int64Range(1, c-1).Draw(t, "compactedStart")
		skipped := false
		for _, cm := range w.h.Between(w.req.StartRevision, c-1) {
			for _, e := range cm.Events {
				skipped = skipped || w.req.Matches(e)
			}
		}
		req := w.req
		req.StartRevision = c
		served := watch.Canonical(w.h, req, w.createdAt)
		if !skipped || len(served) < 2 {
			return nil, false // the skip would be invisible
		}
		return served, true
	}},
	{property: spec.CompactedCancel, name: "cancels a watch whose history was kept", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		c := w.h.CompactRevision()
		from := w.req.StartRevision
		if from == 0 {
			from = w.createdAt + 1
		}
		if c < 0 || from < c || len(s) < 1 {
			return nil, false
		}
		return []watch.Response{s[0], {Canceled: true, CompactRevision: c}}, true
	}},
	{property: spec.MonotonicRevision, name: "sends a header revision below its events", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		r := &s[idx[len(idx)-1]]
		r.Revision = r.Events[0].KV.ModRevision - 1
		return s, true
	}},
	{property: spec.MonotonicRevision, name: "sends a progress notification below an event already delivered", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		s = withoutProgress(s)
		idx := eventResponses(s)
		if len(idx) == 0 {
			return nil, false
		}
		i := idx[rapid.IntRange(0, len(idx)-1).Draw(t, "i")]
		last := s[i].Events[len(s[i].Events)-1].KV.ModRevision
		if last-1 < max(w.req.StartRevision-1, 1) {
			return nil, false
		}
		if rapid.Bool().Draw(t, "unrecorded") {
			s[i].Revision = 0 // the event's header revision was not recorded (issue 19)
		}
		p := rapid.Int64Range(max(w.req.StartRevision-1, 1), last-1).Draw(t, "p")
		return slices.Insert(s, i+1, watch.Response{Revision: p}), true
	}},
	{property: spec.MonotonicRevision, name: "sends a progress notification below an earlier one", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		last := len(s) - 1
		if !s[last].IsProgressNotify() {
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
	{property: spec.Bookmarkable, name: "sends a first progress notification beyond the head to a watch without a created response", break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		w.req.StartRevision = 0
		return []watch.Response{{Revision: w.h.Head() + 1}}, true
	}},
	{property: spec.MonotonicRevision, name: "re-sends a batch with a header below an earlier one (strict)", strict: true, break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
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
	{property: spec.StartRevision, name: "delivers the event at the created revision to a watch from now (strict)", strict: true, break_: func(t *rapid.T, w *world, s []watch.Response) ([]watch.Response, bool) {
		c, ok := w.h.Commit(w.createdAt)
		if !ok {
			return nil, false
		}
		// A watch from now on a key the created revision wrote.
		e := c.Events[rapid.IntRange(0, len(c.Events)-1).Draw(t, "e")]
		w.req = watch.Request{Key: e.KV.Key}
		e.PrevKV = nil
		s = watch.Canonical(w.h, w.req, w.createdAt)
		return slices.Insert(s, 1, watch.Response{Revision: w.createdAt, Events: []kv.Event{e}}), true
	}},
}

// TestMutantsAreRejected: each deliberately broken server is rejected, and
// the validator names exactly the property the mutant breaks. SPEC §3.1–§3.12.
func TestMutantsAreRejected(t *testing.T) {
	for _, m := range mutants {
		t.Run(string(m.property)+"/"+m.name, func(t *testing.T) {
			applied := 0
			rapid.Check(t, func(rt *rapid.T) {
				w := drawWorld(rt)
				stream, ok := m.break_(rt, &w, clone(watch.Canonical(w.h, w.req, w.createdAt)))
				if !ok {
					rt.Skip("nothing to break")
				}
				applied++
				cfg := w.config()
				if m.strict {
					cfg.Expect = strictExpectations
					// Not an etcd guarantee: the default passes it.
					if vs := validate(w, w.config(), stream); len(vs) > 0 {
						rt.Fatalf("strict mutant %q fails by default: %v\nstream %+v", m.name, vs, stream)
					}
				}
				vs := validate(w, cfg, stream)
				if got := properties(vs); !slices.Equal(got, []spec.Property{m.property}) {
					rt.Fatalf("mutant %q: want exactly [%s], got %v\nrequest %+v created at %d\nstream %+v\nviolations: %v",
						m.name, m.property, got, w.req, w.createdAt, stream, vs)
				}
			})
			if applied == 0 {
				t.Fatalf("mutant %q never applied: the generator cannot exercise it", m.name)
			}
		})
	}
}

// TestEveryWatchPropertyHasAMutant keeps the mutant list complete.
func TestEveryWatchPropertyHasAMutant(t *testing.T) {
	for _, e := range spec.Catalog() {
		if !strings.HasPrefix(e.Section, "3.") {
			continue // not a watch property: model/kv, linearizability and model/k8s test their mutants
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
