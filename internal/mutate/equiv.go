package mutate

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"sort"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// The equivalence and weakening operators. They apply to every subject,
// whatever its verdict, unless they need the committed history.

var equivalenceOperators = []*Operator{
	{
		Name: "rename-clients", Kind: Equivalence,
		Doc: "renumbers the clients (of operations, watches and progress requests) with a random one-to-one map",
		apply: func(m *Mutant, r *rand.Rand) bool {
			t := m.tr()
			ids := map[int]bool{}
			for _, o := range t.Ops {
				ids[o.Client] = true
			}
			for _, w := range t.Watches {
				ids[w.Client] = true
			}
			for _, q := range t.ProgressRequests {
				ids[q.Client] = true
			}
			if len(ids) == 0 {
				return false
			}
			f := permute(ids, r)
			for i := range t.Ops {
				t.Ops[i].Client = f[t.Ops[i].Client]
			}
			for _, w := range t.Watches {
				w.Client = f[w.Client]
			}
			for i := range t.ProgressRequests {
				t.ProgressRequests[i].Client = f[t.ProgressRequests[i].Client]
			}
			m.whatf("clients renumbered: %v", f)
			return true
		},
	},
	{
		Name: "rename-watches", Kind: Equivalence,
		Doc: "renumbers each client's watches with a random one-to-one map",
		apply: func(m *Mutant, r *rand.Rand) bool {
			t := m.tr()
			if len(t.Watches) == 0 {
				return false
			}
			per := map[int]map[int]bool{}
			for _, w := range t.Watches {
				if per[w.Client] == nil {
					per[w.Client] = map[int]bool{}
				}
				per[w.Client][w.ID] = true
			}
			fs := map[int]map[int]int{}
			var clients []int
			for c := range per {
				clients = append(clients, c)
			}
			sort.Ints(clients)
			for _, c := range clients {
				fs[c] = permute(per[c], r)
			}
			for _, w := range t.Watches {
				w.ID = fs[w.Client][w.ID]
			}
			m.whatf("watches renumbered per client: %v", fs)
			return true
		},
	},
	{
		Name: "rename-streams", Kind: Equivalence,
		Doc: "renumbers each client's watch streams (of watches and progress requests) with a random one-to-one map: " +
			"which watches share a stream, and which streams were asked for progress, are kept (§3.6)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			t := m.tr()
			per := map[int]map[int]bool{}
			add := func(client, stream int) {
				if per[client] == nil {
					per[client] = map[int]bool{}
				}
				per[client][stream] = true
			}
			for _, w := range t.Watches {
				if w.Stream != nil {
					add(w.Client, *w.Stream)
				}
			}
			for _, q := range t.ProgressRequests {
				add(q.Client, q.Stream)
			}
			if len(per) == 0 {
				return false
			}
			var clients []int
			for c := range per {
				clients = append(clients, c)
			}
			sort.Ints(clients)
			fs := map[int]map[int]int{}
			for _, c := range clients {
				fs[c] = permute(per[c], r)
			}
			for _, w := range t.Watches {
				if w.Stream != nil {
					s := fs[w.Client][*w.Stream]
					w.Stream = &s
				}
			}
			for i := range t.ProgressRequests {
				q := &t.ProgressRequests[i]
				q.Stream = fs[q.Client][q.Stream]
			}
			m.whatf("streams renumbered per client: %v", fs)
			return true
		},
	},
	{
		Name: "rename-keys", Kind: Equivalence,
		Doc: "puts one prefix before every key, range end and Kubernetes prefix or continue key: key order, " +
			"prefixes and ranges are kept (not under a profile, whose allowances know compact_rev_key by name)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			if m.tr().Header.Profile != "" {
				return false
			}
			p := fmt.Sprintf("/m%x", r.Uint32())
			mapStrings(m.tr(), func(k string) string {
				if k == "" {
					return ""
				}
				return p + k
			}, nil)
			m.whatf("every key prefixed with %q", p)
			return true
		},
	},
	{
		Name: "rename-values", Kind: Equivalence,
		Doc: "puts one prefix before every non-empty value: distinct values stay distinct and keep their order " +
			"(transactions may compare values with < and >)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			p := fmt.Sprintf("v%x-", r.Uint32())
			mapStrings(m.tr(), nil, func(v string) string {
				if v == "" {
					return ""
				}
				return p + v
			})
			m.whatf("every value prefixed with %q", p)
			return true
		},
	},
	{
		Name: "shift-times", Kind: Equivalence,
		Doc: "maps every time t to a·t + b: the same order, other numbers",
		apply: func(m *Mutant, r *rand.Rand) bool {
			a := []int64{1, 2, 3, 7}[r.Intn(4)]
			b := r.Int63n(1 << 40)
			retime(m.tr(), func(t int64) int64 { return a*t + b })
			m.whatf("times t ↦ %d·t + %d", a, b)
			return true
		},
	},
	{
		Name: "stretch-times", Kind: Equivalence,
		Doc: "maps the distinct times to new ones with random gaps: every order and every tie kept",
		apply: func(m *Mutant, r *rand.Rand) bool {
			var all []int64
			retime(m.tr(), func(t int64) int64 { all = append(all, t); return t })
			slices.Sort(all)
			all = slices.Compact(all)
			to := map[int64]int64{}
			next := r.Int63n(1000)
			for _, t := range all {
				to[t] = next
				next += 1 + r.Int63n(1<<20)
			}
			retime(m.tr(), func(t int64) int64 { return to[t] })
			m.whatf("%d distinct times re-spaced at random", len(all))
			return true
		},
	},
	{
		Name: "reorder-concurrent", Kind: Equivalence,
		Doc: "permutes the call times of operations within runs of calls that no return and no other recorded " +
			"time separates, and the return times likewise: every real-time order between a return and a call " +
			"(and every watch and compaction time) is kept",
		apply: func(m *Mutant, r *rand.Rand) bool {
			n := reorderConcurrent(m.tr(), r)
			if n == 0 {
				return false
			}
			m.whatf("%d call or return times permuted among concurrent operations", n)
			return true
		},
	},
	{
		Name: "shuffle-records", Kind: Equivalence,
		Doc: "permutes the file order of the operations, of the watches and of the progress requests (times, not places, order them)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			t := m.tr()
			if len(t.Ops)+len(t.Watches) < 2 {
				return false
			}
			r.Shuffle(len(t.Ops), func(i, j int) { t.Ops[i], t.Ops[j] = t.Ops[j], t.Ops[i] })
			r.Shuffle(len(t.Watches), func(i, j int) { t.Watches[i], t.Watches[j] = t.Watches[j], t.Watches[i] })
			r.Shuffle(len(t.ProgressRequests), func(i, j int) {
				t.ProgressRequests[i], t.ProgressRequests[j] = t.ProgressRequests[j], t.ProgressRequests[i]
			})
			m.whatf("operations, watches and progress requests shuffled in file order")
			return true
		},
	},
	{
		Name: "split-responses", Kind: Equivalence,
		Doc: "splits a watch response at a revision boundary into two responses with its header and time " +
			"(a server may batch revisions as it likes, §3.13)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			var sites [][2]int
			for i, w := range m.tr().Watches {
				for j, resp := range w.Responses {
					if len(revisionsOf(resp.Response.Events)) >= 2 {
						sites = append(sites, [2]int{i, j})
					}
				}
			}
			if len(sites) == 0 {
				return false
			}
			st := pickOne(r, sites)
			w := m.tr().Watches[st[0]]
			resp := w.Responses[st[1]]
			revs := revisionsOf(resp.Response.Events)
			cut := revs[1+r.Intn(len(revs)-1)]
			x := slices.IndexFunc(resp.Response.Events, func(e kv.Event) bool { return e.KV.ModRevision == cut })
			first, second := resp, resp
			first.Response.Events = slices.Clone(resp.Response.Events[:x])
			second.Response.Events = slices.Clone(resp.Response.Events[x:])
			w.Responses[st[1]] = first
			w.Responses = slices.Insert(w.Responses, st[1]+1, second)
			m.whatf("watch %d of client %d: the response at line %d split before revision %d", w.ID, w.Client, resp.Line, cut)
			return true
		},
	},
	{
		Name: "merge-responses", Kind: Equivalence,
		Doc: "merges two consecutive responses with events into one, at the second's time and header, when no " +
			"compaction was called in between (batching, §3.13)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			var sites [][2]int
			for i, w := range m.tr().Watches {
				for j := 0; j+1 < len(w.Responses); j++ {
					a, b := w.Responses[j], w.Responses[j+1]
					if pureEvents(a.Response) && pureEvents(b.Response) && !compactionCalledIn(m.Subject, a.Time, b.Time) {
						sites = append(sites, [2]int{i, j})
					}
				}
			}
			if len(sites) == 0 {
				return false
			}
			st := pickOne(r, sites)
			w := m.tr().Watches[st[0]]
			a, b := w.Responses[st[1]], w.Responses[st[1]+1]
			merged := b
			merged.Response.Events = append(slices.Clone(a.Response.Events), b.Response.Events...)
			merged.Response.Revision = max(a.Response.Revision, b.Response.Revision)
			w.Responses[st[1]] = merged
			w.Responses = slices.Delete(w.Responses, st[1]+1, st[1]+2)
			m.whatf("watch %d of client %d: the responses at lines %d and %d merged", w.ID, w.Client, a.Line, b.Line)
			return true
		},
	},
	{
		Name: "add-progress", Kind: Equivalence,
		Doc: "inserts a truthful progress notification into a watch: at a revision at or above everything the " +
			"stream showed and not above any later header, below the next matching event, committed by then, " +
			"and leaving any later compaction cancel needed (§3.6)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			s := m.Subject
			if s.H == nil {
				return false
			}
			wi := cleanWatch(m, r)
			if wi == nil || wi.from == 0 || len(wi.w.Responses) == 0 {
				return false
			}
			rs := wi.w.Responses
			lo0 := max(wi.created, 0)
			k := lo0 + r.Intn(len(rs)-lo0)
			st := wi.before[k+1]
			if st.ended {
				return false
			}
			lo := max(st.header, st.lastRev, st.bookmark, 1, wi.w.Request.StartRevision-1)
			hi := max(s.committedBy(rs[k].Time), st.header)
			if nm := wi.nextMatching(st.next - 1); nm > 0 {
				hi = min(hi, nm-1)
			}
			hi = min(hi, s.head())
			for _, later := range rs[k+1:] {
				if c := later.Response.CompactRevision; c > 0 {
					hi = min(hi, c-2)
				}
				if h := later.Response.Revision; h > 0 {
					hi = min(hi, h) // later headers do not go back
				}
			}
			if lo > hi {
				return false
			}
			R := lo + r.Int63n(hi-lo+1)
			p := traces.WatchResponse{Time: rs[k].Time, Response: watch.Response{Revision: R}}
			m.setResponses(wi, slices.Insert(slices.Clone(m.responses(wi)), k+1, p))
			m.whatf("%s: a progress notification at %d after it", where(wi, k), R)
			return true
		},
	},
	{
		Name: "truncate-stream", Kind: Weakening,
		Doc: "drops the tail of a watch's stream (delivery may stop at any point, §6)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			var ws []int
			for i, w := range m.tr().Watches {
				if len(w.Responses) >= 2 {
					ws = append(ws, i)
				}
			}
			if len(ws) == 0 {
				return false
			}
			w := m.tr().Watches[pickOne(r, ws)]
			k := 1 + r.Intn(len(w.Responses)-1)
			if slices.ContainsFunc(w.Responses[k:], func(r traces.WatchResponse) bool { return r.Response.CompactRevision > 0 }) {
				m.tag("drops-cancel")
			}
			m.whatf("watch %d of client %d: the %d responses from line %d on dropped", w.ID, w.Client, len(w.Responses)-k, w.Responses[k].Line)
			w.Responses = w.Responses[:k]
			return true
		},
	},
	{
		Name: "forget-outcomes", Kind: Weakening,
		Doc: "turns one to three known responses into unknown outcomes (the client gave up at the same time): " +
			"the operation may have taken effect at any time after its call, or never. A write is forgotten only " +
			"when what §2.7 takes as evidence still shows it took effect (an etcd or Kubernetes watch event or a " +
			"listed object carries its write, or a later write of known outcome needs its revision): a watch " +
			"response's header, a progress notification, a list's resourceVersion, the objects a list leaves out " +
			"and an informer's notifications are not evidence (§2.7), so without it the checker may rightly take " +
			"the write as never applied and blame what showed it",
		apply: func(m *Mutant, r *rand.Rand) bool {
			var known []int
			for i, o := range m.tr().Ops {
				if o.Response != nil {
					known = append(known, i)
				}
			}
			if len(known) == 0 {
				return false
			}
			n := 1 + r.Intn(min(3, len(known)))
			r.Shuffle(len(known), func(i, j int) { known[i], known[j] = known[j], known[i] })
			if !m.Subject.evidenced(known[:n]) {
				return false
			}
			var lines []int
			for _, i := range known[:n] {
				o := &m.tr().Ops[i]
				switch {
				case o.Request.Compact != nil:
					m.tag("compaction")
				case writeCreates(o.Response):
					m.tag("write")
				}
				o.Response, o.Error = nil, "outcome forgotten by the mutation campaign"
				lines = append(lines, o.Line)
			}
			if m.Subject.informer {
				m.tag("informer")
			}
			m.whatf("the outcomes of the ops at lines %v forgotten", lines)
			return true
		},
	},
	{
		Name: "forget-streams", Kind: Weakening,
		Doc: "forgets which gRPC stream each watch was on (format 2 `stream`): a watch may then share a stream with " +
			"any watch of its client, so fewer progress notifications bind it (§3.6); a skip a notification " +
			"revealed may then be named by the event that reveals it instead",
		apply: func(m *Mutant, r *rand.Rand) bool {
			t := m.tr()
			n := 0
			for _, w := range t.Watches {
				if w.Stream != nil {
					w.Stream = nil
					n++
				}
			}
			if n == 0 {
				return false
			}
			m.tag("binding")
			m.whatf("the streams of %d watches forgotten", n)
			return true
		},
	},
	{
		Name: "forget-base-compaction", Kind: Weakening,
		Doc: "forgets the compaction in force when the recording began (header base_compact_revision, format 2): " +
			"unknown, the checker must take it as high as the history allows and fail no store for it (§2.4)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			t := m.tr()
			if t.Header.BaseCompactRevision == nil {
				return false
			}
			m.whatf("base_compact_revision %d forgotten", *t.Header.BaseCompactRevision)
			t.Header.BaseCompactRevision = nil
			m.tag("compaction")
			return true
		},
	},
	{
		Name: "re-encode", Kind: Equivalence,
		Doc: "writes the trace, re-encodes it — byte strings as {\"base64\": …}, fields in another order, blank " +
			"lines, gzip — and reads it back (docs/TRACE_FORMAT.md)",
		apply: func(m *Mutant, r *rand.Rand) bool {
			t, what, err := reencode(m.Subject.Trace, r)
			if err != nil {
				m.whatf("%s", what)
				m.Err = fmt.Errorf("the re-encoded trace does not read back: %v", err)
				return true
			}
			m.Trace = t
			m.whatf("%s", what)
			return true
		},
	},
}

// evidenced reports whether every write among the ops forgotten still
// shows in what docs/SPEC.md §2.7 takes as evidence of an unknown write: a
// PUT of each of its puts' key and value delivered by an etcd watch, a
// Kubernetes watch event or a list; a DELETE of its key at its revision;
// or a write of known outcome, not forgotten, answered a later revision
// (the revision exists, and only the forgotten writes can have created it).
func (s *Subject) evidenced(forgotten []int) bool {
	s.evidenceOnce.Do(s.gatherEvidence)
	shownPut, shownDelete := s.shownPut, s.shownDelete
	gone := map[int]bool{}
	for _, i := range forgotten {
		gone[i] = true
	}
	later := func(rev int64) bool {
		for i, o := range s.Trace.Ops {
			if !gone[i] && writeCreates(o.Response) && o.Response.Revision > rev {
				return true
			}
		}
		return false
	}
	for _, i := range forgotten {
		o := s.Trace.Ops[i]
		if !writeCreates(o.Response) || later(o.Response.Revision) {
			continue
		}
		ps, ds := writesOf(o.Request)
		for _, p := range ps {
			if !shownPut[[2]string{p.Key, p.Value}] {
				return false
			}
		}
		for _, d := range ds {
			if !shownDelete[d.Key][o.Response.Revision] {
				return false
			}
		}
	}
	return true
}

// gatherEvidence indexes the writes §2.7's evidence shows (see evidenced).
func (s *Subject) gatherEvidence() {
	shownPut, shownDelete := map[[2]string]bool{}, map[string]map[int64]bool{}
	show := func(e kv.Event) {
		if e.Type == kv.Put {
			shownPut[[2]string{e.KV.Key, e.KV.Value}] = true
			return
		}
		if shownDelete[e.KV.Key] == nil {
			shownDelete[e.KV.Key] = map[int64]bool{}
		}
		shownDelete[e.KV.Key][e.KV.ModRevision] = true
	}
	for _, w := range s.Trace.Watches {
		for _, r := range w.Responses {
			for _, e := range r.Response.Events {
				show(e)
			}
		}
	}
	if run := s.Trace.K8s; run != nil {
		for _, c := range run.Watches {
			for _, e := range c.Events {
				o := e.Object
				switch e.Type {
				case k8s.Added, k8s.Modified:
					show(kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: o.Key, Value: o.Value}})
				case k8s.Deleted:
					show(kv.Event{Type: kv.Delete, KV: kv.KeyValue{Key: o.Key, ModRevision: o.ResourceVersion}})
				}
			}
		}
		for _, l := range run.Lists {
			for _, o := range l.Result.Items {
				show(kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: o.Key, Value: o.Value}})
			}
		}
	}
	s.shownPut, s.shownDelete = shownPut, shownDelete
}

// writesOf lists the puts and deletes a request makes (a transaction's in
// both branches).
func writesOf(r kv.Request) (ps []kv.PutRequest, ds []kv.DeleteRequest) {
	ops := []kv.Op{{Put: r.Put, Delete: r.Delete}}
	if r.Txn != nil {
		ops = append(append([]kv.Op(nil), r.Txn.Success...), r.Txn.Failure...)
	}
	for _, o := range ops {
		if o.Put != nil {
			ps = append(ps, *o.Put)
		}
		if o.Delete != nil {
			ds = append(ds, *o.Delete)
		}
	}
	return ps, ds
}

func pureEvents(r watch.Response) bool {
	return len(r.Events) > 0 && !r.Created && !r.Canceled && r.CompactRevision == 0
}

func compactionCalledIn(s *Subject, from, to int64) bool {
	for _, o := range s.Trace.Ops {
		if o.Request.Compact != nil && o.Call > from && o.Call <= to {
			return true
		}
	}
	return false
}

// permute maps each id to a distinct new id, at random.
func permute(ids map[int]bool, r *rand.Rand) map[int]int {
	var in []int
	for id := range ids {
		in = append(in, id)
	}
	sort.Ints(in)
	base := 100 + r.Intn(1000)
	out := make([]int, len(in))
	for i := range out {
		out[i] = base + i*(1+r.Intn(3))
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	f := map[int]int{}
	for i, id := range in {
		f[id] = out[i]
	}
	return f
}

// retime applies f to every time of t.
func retime(t *traces.Trace, f func(int64) int64) {
	for i := range t.Ops {
		o := &t.Ops[i]
		o.Call = f(o.Call)
		if o.Return != 0 || o.Response != nil {
			o.Return = f(o.Return)
		}
	}
	for _, w := range t.Watches {
		w.Time = f(w.Time)
		for j := range w.Responses {
			w.Responses[j].Time = f(w.Responses[j].Time)
		}
	}
	for i := range t.Annotations {
		t.Annotations[i].Time = f(t.Annotations[i].Time)
		t.Annotations[i].End = f(t.Annotations[i].End)
	}
	for i := range t.ProgressRequests {
		t.ProgressRequests[i].Time = f(t.ProgressRequests[i].Time)
	}
	if info := t.K8sInfo; info != nil && !info.Untimed {
		for i := range info.Lists {
			info.Lists[i].Call, info.Lists[i].Return = f(info.Lists[i].Call), f(info.Lists[i].Return)
		}
		for i := range info.Watches {
			info.Watches[i].Time = f(info.Watches[i].Time)
			if info.Watches[i].End != 0 || info.Watches[i].EndLine != 0 {
				info.Watches[i].End = f(info.Watches[i].End)
			}
		}
		for i := range info.Entries {
			info.Entries[i].Time = f(info.Entries[i].Time)
		}
		if info.Cache != (traces.K8sEntryInfo{}) {
			info.Cache.Time = f(info.Cache.Time)
		}
	}
}

// reorderConcurrent permutes call times among calls no other recorded time
// separates, and return times of known outcomes likewise; see the operator.
// It returns how many times moved.
func reorderConcurrent(t *traces.Trace, r *rand.Rand) int {
	const (
		call = iota
		ret
		other
	)
	type point struct {
		t    int64
		kind int
		p    *int64
	}
	var pts []point
	for i := range t.Ops {
		o := &t.Ops[i]
		pts = append(pts, point{o.Call, call, &o.Call})
		if o.Response != nil {
			pts = append(pts, point{o.Return, ret, &o.Return})
		} else {
			pts = append(pts, point{o.Return, other, nil})
		}
	}
	for _, w := range t.Watches {
		pts = append(pts, point{w.Time, other, nil})
		for j := range w.Responses {
			pts = append(pts, point{w.Responses[j].Time, other, nil})
		}
	}
	for _, a := range t.Annotations {
		pts = append(pts, point{a.Time, other, nil}, point{a.End, other, nil})
	}
	for _, q := range t.ProgressRequests {
		pts = append(pts, point{q.Time, other, nil})
	}
	if info := t.K8sInfo; info != nil && !info.Untimed {
		for _, l := range info.Lists {
			pts = append(pts, point{l.Call, other, nil}, point{l.Return, other, nil})
		}
		for _, w := range info.Watches {
			pts = append(pts, point{w.Time, other, nil}, point{w.End, other, nil})
		}
		for _, e := range info.Entries {
			pts = append(pts, point{e.Time, other, nil})
		}
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].t < pts[j].t })
	// kindAt: the kind of every point at a time, or other when kinds mix.
	kindAt := map[int64]int{}
	for _, p := range pts {
		if k, ok := kindAt[p.t]; ok && k != p.kind {
			kindAt[p.t] = other
		} else if !ok {
			kindAt[p.t] = p.kind
		}
	}
	moved := 0
	for i := 0; i < len(pts); {
		k := kindAt[pts[i].t]
		j := i
		for j < len(pts) && kindAt[pts[j].t] == k {
			j++
		}
		if k != other && j-i >= 2 {
			vals := make([]int64, j-i)
			for x := range vals {
				vals[x] = pts[i+x].t
			}
			r.Shuffle(len(vals), func(a, b int) { vals[a], vals[b] = vals[b], vals[a] })
			for x, v := range vals {
				if *pts[i+x].p != v {
					moved++
				}
				*pts[i+x].p = v
			}
		}
		i = max(j, i+1)
	}
	return moved
}

// mapStrings rewrites every key (fk) and every value (fv) of t in place,
// copying what it changes; a nil function leaves its strings alone.
// Range ends "" and "\x00" keep their meaning.
func mapStrings(t *traces.Trace, fk, fv func(string) string) {
	if fk == nil {
		fk = func(s string) string { return s }
	}
	if fv == nil {
		fv = func(s string) string { return s }
	}
	fe := func(e string) string {
		if e == "" || e == "\x00" {
			return e
		}
		return fk(e)
	}
	mkv := func(k kv.KeyValue) kv.KeyValue { k.Key, k.Value = fk(k.Key), fv(k.Value); return k }
	mkvp := func(k *kv.KeyValue) *kv.KeyValue {
		if k == nil {
			return nil
		}
		c := mkv(*k)
		return &c
	}
	mkvs := func(ks []kv.KeyValue) []kv.KeyValue {
		if ks == nil {
			return nil
		}
		out := make([]kv.KeyValue, len(ks))
		for i, k := range ks {
			out[i] = mkv(k)
		}
		return out
	}
	var mops func([]kv.Op) []kv.Op
	mop := func(o kv.Op) kv.Op {
		if o.Range != nil {
			c := *o.Range
			c.Key, c.RangeEnd = fk(c.Key), fe(c.RangeEnd)
			o.Range = &c
		}
		if o.Put != nil {
			c := *o.Put
			c.Key, c.Value = fk(c.Key), fv(c.Value)
			o.Put = &c
		}
		if o.Delete != nil {
			c := *o.Delete
			c.Key, c.RangeEnd = fk(c.Key), fe(c.RangeEnd)
			o.Delete = &c
		}
		return o
	}
	mops = func(os []kv.Op) []kv.Op {
		if os == nil {
			return nil
		}
		out := make([]kv.Op, len(os))
		for i, o := range os {
			out[i] = mop(o)
		}
		return out
	}
	mresp := func(rg *kv.RangeResponse, p *kv.PutResponse, d *kv.DeleteResponse) (*kv.RangeResponse, *kv.PutResponse, *kv.DeleteResponse) {
		if rg != nil {
			c := *rg
			c.KVs = mkvs(c.KVs)
			rg = &c
		}
		if p != nil {
			c := *p
			c.PrevKV = mkvp(c.PrevKV)
			p = &c
		}
		if d != nil {
			c := *d
			c.PrevKVs = mkvs(c.PrevKVs)
			d = &c
		}
		return rg, p, d
	}
	for i := range t.Ops {
		o := &t.Ops[i]
		rq := o.Request
		x := mop(kv.Op{Range: rq.Range, Put: rq.Put, Delete: rq.Delete})
		rq.Range, rq.Put, rq.Delete = x.Range, x.Put, x.Delete
		if rq.Txn != nil {
			c := *rq.Txn
			c.Compare = slices.Clone(c.Compare)
			for j := range c.Compare {
				c.Compare[j].Key = fk(c.Compare[j].Key)
				if c.Compare[j].Target == kv.TargetValue {
					c.Compare[j].Value = fv(c.Compare[j].Value)
				}
			}
			c.Success, c.Failure = mops(c.Success), mops(c.Failure)
			rq.Txn = &c
		}
		o.Request = rq
		if o.Response != nil {
			c := *o.Response
			c.Range, c.Put, c.Delete = mresp(c.Range, c.Put, c.Delete)
			if c.Txn != nil {
				tx := *c.Txn
				tx.Responses = slices.Clone(tx.Responses)
				for j := range tx.Responses {
					or := &tx.Responses[j]
					or.Range, or.Put, or.Delete = mresp(or.Range, or.Put, or.Delete)
				}
				c.Txn = &tx
			}
			o.Response = &c
		}
	}
	for _, w := range t.Watches {
		w.Request.Key, w.Request.RangeEnd = fk(w.Request.Key), fe(w.Request.RangeEnd)
		for j := range w.Responses {
			evs := slices.Clone(w.Responses[j].Response.Events)
			for x := range evs {
				evs[x].KV = mkv(evs[x].KV)
				evs[x].PrevKV = mkvp(evs[x].PrevKV)
			}
			w.Responses[j].Response.Events = evs
		}
	}
	if t.K8s == nil {
		return
	}
	run := t.K8s
	obj := func(o k8s.Object) k8s.Object { o.Key, o.Value = fk(o.Key), fv(o.Value); return o }
	objp := func(o *k8s.Object) *k8s.Object {
		if o == nil {
			return nil
		}
		c := obj(*o)
		return &c
	}
	objs := func(os []k8s.Object) []k8s.Object {
		if os == nil {
			return nil
		}
		out := make([]k8s.Object, len(os))
		for i, o := range os {
			out[i] = obj(o)
		}
		return out
	}
	tok := func(s string) string {
		if s == "" {
			return ""
		}
		return fk(s)
	}
	result := func(r k8s.ListResult) k8s.ListResult {
		r.Items = objs(r.Items)
		r.Continue, r.ContinueAfter = tok(r.Continue), tok(r.ContinueAfter)
		if r.Status != nil && r.Status.Continue != "" {
			st := *r.Status
			st.Continue = tok(st.Continue)
			r.Status = &st
		}
		return r
	}
	run.Prefix = fk(run.Prefix)
	run.Cache = objs(run.Cache)
	for i := range run.Lists {
		l := &run.Lists[i]
		l.Prefix = fk(l.Prefix)
		l.Options.Continue = tok(l.Options.Continue)
		l.Result = result(l.Result)
		if l.First != nil {
			f := result(*l.First)
			l.First = &f
		}
	}
	for i := range run.Watches {
		run.Watches[i].Prefix = fk(run.Watches[i].Prefix)
	}
	for i, e := range run.Entries {
		if e.WatchEvent != nil {
			we := *e.WatchEvent
			we.Event.Object = obj(we.Event.Object)
			run.Entries[i].WatchEvent = &we
		}
		if e.Notification != nil {
			n := *e.Notification
			n.Old, n.New = objp(n.Old), objp(n.New)
			run.Entries[i].Notification = &n
		}
	}
	rebuildWatchEvents(run)
}

// bytesFields are the JSON fields whose values are byte strings
// (traces.Bytes): a plain string or {"base64": …}.
var bytesFields = map[string]bool{"key": true, "value": true, "range_end": true, "prefix": true, "continue": true, "continue_after": true}

// reencode writes t and reads it back through a random re-encoding.
func reencode(t *traces.Trace, r *rand.Rand) (*traces.Trace, string, error) {
	var plain bytes.Buffer
	if err := traces.Write(&plain, t); err != nil {
		return nil, "", err
	}
	b64 := r.Intn(3) // 0: none, 1: some, 2: all byte strings as base64
	shuffle := r.Intn(2) == 0
	blank := r.Intn(3) == 0
	gz := r.Intn(2) == 0
	var out bytes.Buffer
	sc := bufio.NewScanner(&plain)
	sc.Buffer(nil, traces.MaxLine)
	first := true
	for sc.Scan() {
		line := sc.Bytes()
		if !first && (b64 > 0 || shuffle) {
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				return nil, "", err
			}
			v = recode(v, "", b64, r)
			writeJSON(&out, v, shuffle, r)
		} else {
			out.Write(line)
		}
		first = false
		out.WriteByte('\n')
		if blank && r.Intn(4) == 0 {
			out.WriteString("\n  \n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	data := out.Bytes()
	if gz {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(data)
		zw.Close()
		zr, err := gzip.NewReader(&z)
		if err != nil {
			return nil, "", err
		}
		data, _ = readAll(zr)
	}
	back, err := traces.Read(bytes.NewReader(data), t.Name)
	what := fmt.Sprintf("re-encoded: base64 %s, fields shuffled %v, blank lines %v, through gzip %v", []string{"none", "some", "all"}[b64], shuffle, blank, gz)
	return back, what, err
}

func readAll(r interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// recode turns byte-string fields into {"base64": …}: all of them (b64 = 2)
// or some (1).
func recode(v any, field string, b64 int, r *rand.Rand) any {
	switch x := v.(type) {
	case map[string]any:
		var ks []string
		for k := range x {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			x[k] = recode(x[k], k, b64, r)
		}
	case []any:
		for i, e := range x {
			x[i] = recode(e, field, b64, r)
		}
	case string:
		if bytesFields[field] && (b64 == 2 || r.Intn(2) == 0) {
			return map[string]any{"base64": base64.StdEncoding.EncodeToString([]byte(x))}
		}
	}
	return v
}

// writeJSON writes v, objects' fields in random order when shuffle is set.
func writeJSON(b *bytes.Buffer, v any, shuffle bool, r *rand.Rand) {
	switch x := v.(type) {
	case map[string]any:
		var ks []string
		for k := range x {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		if shuffle {
			r.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		}
		b.WriteByte('{')
		for i, k := range ks {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			writeJSON(b, x[k], shuffle, r)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e, shuffle, r)
		}
		b.WriteByte(']')
	default:
		vb, _ := json.Marshal(x)
		b.Write(vb)
	}
}
