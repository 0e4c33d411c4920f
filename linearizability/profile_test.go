package linearizability

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/internal/corpus"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// tb writes a small trace: operations step the builder's model and record
// its response, which the test may change into what the store answered.
type tb struct {
	tr    *traces.Trace
	s     kv.State
	clock int64
}

func newTB(name string) *tb {
	return &tb{tr: &traces.Trace{Name: name, Header: traces.Header{Format: traces.Format, Version: traces.Version,
		System: "test", Start: "2026-11-30T00:00:00Z", UniqueValues: true}}}
}

func (b *tb) tick() int64 { b.clock += 10; return b.clock }

// op steps the model (a compaction with no effect when ignore is set) and
// records the response, after edit if given.
func (b *tb) op(client int, req kv.Request, ignore bool, edit func(*kv.Response)) kv.Response {
	next, resp := kv.Step(b.s, req)
	if !(ignore && req.Compact != nil) {
		b.s = next
	}
	rec := resp
	if edit != nil {
		edit(&rec)
	}
	call := b.tick()
	b.tr.Ops = append(b.tr.Ops, traces.Op{Client: client, Call: call, Return: b.tick(), Request: req, Response: &rec})
	return resp
}

func (b *tb) put(key, value string) kv.Response {
	return b.op(1, kv.Request{Put: &kv.PutRequest{Key: key, Value: value}}, false, nil)
}

// collector adds a watch of every key from revision 2 that received the
// canonical stream of the builder's history, each event edited by edit.
func (b *tb) collector(prevKV bool, edit func(*kv.Event)) {
	req := watch.Request{Key: "\x00", RangeEnd: "\x00", StartRevision: 2, PrevKV: prevKV, ProgressNotify: true}
	w := &traces.Watch{Client: 9, ID: 1, Time: b.tick(), Request: req}
	h, _ := kv.NewHistory(b.s.History().Commits()...)
	h.Skip(b.s.Revision())
	for _, r := range watch.Canonical(h, req, b.s.Revision()) {
		for i := range r.Events {
			if edit != nil {
				edit(&r.Events[i])
			}
		}
		w.Responses = append(w.Responses, traces.WatchResponse{Time: b.tick(), Response: r})
	}
	b.tr.Watches = append(b.tr.Watches, w)
}

func checkUnder(t *testing.T, tr *traces.Trace, profile string) *Result {
	t.Helper()
	opt, err := ProfileOption(profile)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check(tr, Options{Profile: opt})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Each allowance of docs/SPEC.md §9: a trace that shows the difference fails
// with the property the allowance weakens when no profile is in force,
// passes under a profile that holds the allowance, and still fails under a
// profile that does not.
func TestAllowances(t *testing.T) {
	for _, tc := range []struct {
		allowance string
		name      string
		build     func() *traces.Trace
		fails     spec.Property // without the allowance
	}{
		{RevisionGaps, "a write skips a revision", func() *traces.Trace {
			b := newTB("gaps")
			b.put("a", "1")
			b.s = b.s.Skip(3) // a fill row took revision 3
			b.put("b", "1")
			b.op(2, kv.Request{Range: &kv.RangeRequest{Key: "a", RangeEnd: "\x00"}}, false, nil)
			b.collector(true, nil)
			return b.tr
		}, spec.Linearizable},
		{RevisionGaps, "a read sees a revision no write made", func() *traces.Trace {
			b := newTB("gaps-read")
			b.put("a", "1")
			b.s = b.s.Skip(5)
			b.op(2, kv.Request{Range: &kv.RangeRequest{Key: "a"}}, false, nil)
			b.put("a", "2")
			b.collector(true, nil)
			return b.tr
		}, spec.Linearizable},
		{IgnoresCompaction, "reads below an acknowledged compaction succeed", func() *traces.Trace {
			b := newTB("ignores-compaction")
			b.put("a", "1")
			b.put("a", "2")
			b.op(3, kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, true, nil)
			b.op(2, kv.Request{Range: &kv.RangeRequest{Key: "a", Revision: 2}}, false, nil)
			b.op(3, kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, true, nil) // acknowledged again
			b.collector(true, nil)
			return b.tr
		}, spec.Linearizable},
		{UntrackedVersions, "ranges answer version 0", func() *traces.Trace {
			b := newTB("versions-kv")
			b.put("a", "1")
			b.put("a", "2")
			b.op(2, kv.Request{Range: &kv.RangeRequest{Key: "a"}}, false, func(r *kv.Response) { r.Range.KVs[0].Version = 0 })
			return b.tr
		}, spec.Linearizable},
		{UntrackedVersions, "watch events carry version 0", func() *traces.Trace {
			b := newTB("versions-watch")
			b.put("a", "1")
			b.put("a", "2")
			b.collector(true, func(e *kv.Event) {
				e.KV.Version = 0
				if e.PrevKV != nil {
					e.PrevKV.Version = 0
				}
			})
			return b.tr
		}, spec.Reliable},
		{CompactKeyEmulated, "the compaction transaction answered as kine does", func() *traces.Trace {
			b := newTB("compact-key")
			txn := func(version int64, value string) kv.Request {
				return kv.Request{Txn: &kv.TxnRequest{
					Compare: []kv.Compare{{Key: CompactRevKey, Target: kv.TargetVersion, Result: kv.CompareEqual, Number: version}},
					Success: []kv.Op{{Put: &kv.PutRequest{Key: CompactRevKey, Value: value}}},
					Failure: []kv.Op{{Range: &kv.RangeRequest{Key: CompactRevKey}}}}}
			}
			b.op(1, txn(0, "0"), false, func(r *kv.Response) { r.Txn.Responses = nil }) // success: the header alone
			b.op(2, txn(0, "0"), false, func(r *kv.Response) {                          // failure: value and version alone
				k := r.Txn.Responses[0].Range.KVs[0]
				r.Txn.Responses[0].Range.KVs[0] = kv.KeyValue{Key: k.Key, Value: k.Value, Version: k.Version}
			})
			return b.tr
		}, spec.Linearizable},
	} {
		t.Run(tc.allowance+"/"+tc.name, func(t *testing.T) {
			// Through the trace format, as a recorded trace would come.
			tr := roundTrip(t, tc.build())
			res := checkUnder(t, tr, NoProfile)
			if !hasProperty(res.Violations, tc.fails) {
				t.Fatalf("without a profile: %s, violations %v; want FAIL %s", res.Verdict, res.Violations, tc.fails)
			}
			for _, p := range Profiles() {
				res := checkUnder(t, tr, p.Name)
				switch {
				case p.Allows(tc.allowance) && (res.Verdict != Linearizable || len(res.Violations) > 0):
					t.Errorf("under %s (which allows %s): %s, %v", p.Name, tc.allowance, res.Verdict, res.Violations)
				case !p.Allows(tc.allowance) && !hasProperty(res.Violations, tc.fails):
					t.Errorf("under %s (which does not allow %s): %s, %v; want FAIL %s", p.Name, tc.allowance, res.Verdict, res.Violations, tc.fails)
				}
			}
		})
	}
}

func roundTrip(t *testing.T, tr *traces.Trace) *traces.Trace {
	t.Helper()
	var sb strings.Builder
	if err := traces.Write(&sb, tr); err != nil {
		t.Fatal(err)
	}
	out, err := traces.Read(strings.NewReader(sb.String()), tr.Name)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Each allowance relaxes its rule and nothing next to it (SPEC §9): what the
// allowance does not describe still fails under every profile.
func TestAllowancesAreNarrow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() *traces.Trace
		fails spec.Property
		// only: the failure is demanded only under profiles with this
		// allowance (without it, the trace is legitimate).
		only string
	}{
		{"RevisionGaps: a revision that goes back", func() *traces.Trace {
			b := newTB("back")
			b.put("a", "1")
			b.put("a", "2")
			b.op(2, kv.Request{Range: &kv.RangeRequest{Key: "a"}}, false, func(r *kv.Response) { r.Revision = 2 })
			return b.tr
		}, spec.Linearizable, ""},
		{"RevisionGaps: a progress notification beyond every revision shown", func() *traces.Trace {
			b := newTB("progress-beyond")
			b.put("a", "1")
			b.put("a", "2")
			b.collector(true, nil)
			w := b.tr.Watches[0]
			w.Responses = append(w.Responses, traces.WatchResponse{Time: b.tick(), Response: watch.Response{Revision: 9}})
			return b.tr
		}, spec.Bookmarkable, ""},
		{"IgnoresCompaction: a cancel for a compaction that did not happen", func() *traces.Trace {
			b := newTB("cancel")
			b.put("a", "1")
			b.put("a", "2")
			b.op(3, kv.Request{Compact: &kv.CompactRequest{Revision: 3}}, true, nil)
			req := watch.Request{Key: "a", StartRevision: 2}
			b.tr.Watches = append(b.tr.Watches, &traces.Watch{Client: 9, ID: 1, Time: b.tick(), Request: req, Responses: []traces.WatchResponse{
				{Time: b.tick(), Response: watch.Response{Revision: 3, Created: true}},
				{Time: b.tick(), Response: watch.Response{Canceled: true, CompactRevision: 3}},
			}})
			return b.tr
		}, spec.CompactedCancel, IgnoresCompaction},
		{"UntrackedVersions: compact_rev_key's version", func() *traces.Trace {
			b := newTB("compact-key-version")
			b.put(CompactRevKey, "0")
			b.put(CompactRevKey, "5")
			b.op(2, kv.Request{Range: &kv.RangeRequest{Key: CompactRevKey}}, false, func(r *kv.Response) { r.Range.KVs[0].Version = 0 })
			return b.tr
		}, spec.Linearizable, ""},
		{"UntrackedVersions: a wrong CreateRevision", func() *traces.Trace {
			b := newTB("create-revision")
			b.put("a", "1")
			b.put("a", "2")
			b.collector(true, func(e *kv.Event) {
				e.KV.Version = 0
				if e.KV.ModRevision == 3 {
					e.KV.CreateRevision = 3
				}
			})
			return b.tr
		}, spec.IsCreate, ""},
		{"CompactKeyEmulated: a failure answering a wrong version", func() *traces.Trace {
			b := newTB("compact-key-wrong")
			txn := kv.Request{Txn: &kv.TxnRequest{
				Compare: []kv.Compare{{Key: CompactRevKey, Target: kv.TargetVersion, Result: kv.CompareEqual, Number: 0}},
				Success: []kv.Op{{Put: &kv.PutRequest{Key: CompactRevKey, Value: "0"}}},
				Failure: []kv.Op{{Range: &kv.RangeRequest{Key: CompactRevKey}}}}}
			b.op(1, txn, false, nil)
			b.op(2, txn, false, func(r *kv.Response) { r.Txn.Responses[0].Range.KVs[0].Version = 2 })
			return b.tr
		}, spec.Linearizable, ""},
		{"CompactKeyEmulated: another transaction without results", func() *traces.Trace {
			b := newTB("other-txn")
			b.op(1, kv.Request{Txn: &kv.TxnRequest{Success: []kv.Op{{Put: &kv.PutRequest{Key: "a", Value: "1"}}}}}, false,
				func(r *kv.Response) { r.Txn.Responses = nil })
			return b.tr
		}, spec.Linearizable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := roundTrip(t, tc.build())
			for _, p := range append([]string{NoProfile}, ProfileNames()...) {
				if profile, _ := LookupProfile(p); tc.only != "" && !profile.Allows(tc.only) {
					continue
				}
				if res := checkUnder(t, tr, p); !hasProperty(res.Violations, tc.fails) {
					t.Errorf("under %s: %s, %v; want FAIL %s", p, res.Verdict, res.Violations, tc.fails)
				}
			}
		})
	}
}

// Under every profile, the other properties still catch their bugs: every
// reconstructed bug trace of the corpus (docs/CORPUS.md) is still rejected
// — with exactly its properties, unless the profile ignores a compaction
// the trace relies on, which may change the name — and the watch mutants
// of a simulated run are rejected naming their property. SPEC §9.
func TestProfilesKeepCatchingBugs(t *testing.T) {
	rows, err := corpus.ReadTable("../docs/CORPUS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if len(row.Expected) == 0 {
			continue
		}
		tr, err := traces.ReadFile(filepath.Join("../traces/corpus", row.File))
		if err != nil {
			t.Fatal(err)
		}
		compacts := slices.ContainsFunc(tr.Ops, func(o traces.Op) bool { return o.Request.Compact != nil })
		for _, p := range Profiles() {
			var res *Result
			var stronger []spec.Property
			if len(p.Allowances) == 0 {
				// Expectations only: add them to the trace's own profile;
				// they may name more, never fewer.
				own, _ := LookupProfile(tr.Header.Profile)
				combined := &Profile{Name: p.Name, Expectations: p.Expectations}
				if own != nil {
					combined.Allowances = own.Allowances
				}
				for _, e := range p.Expectations {
					stronger = append(stronger, e.Strengthens...)
				}
				var err error
				if res, err = Check(tr, Options{Profile: combined}); err != nil {
					t.Fatal(err)
				}
			} else {
				// Allowances: with the trace's own expectations, if its
				// profile holds any (a bug only the strict profile names).
				combined := p
				if own, _ := LookupProfile(tr.Header.Profile); own != nil {
					combined.Expectations = own.Expectations
				}
				var err error
				if res, err = Check(tr, Options{Profile: &combined}); err != nil {
					t.Fatal(err)
				}
			}
			got := properties(res.Violations)
			extra := slices.DeleteFunc(slices.Clone(got), func(q spec.Property) bool { return slices.Contains(row.Expected, q) || slices.Contains(stronger, q) })
			// An expectation may name an event a stronger property first:
			// the validator then blames nothing else on it (an event below
			// a strict start is judged §3.10 StartRevision only). Such an
			// expected property may be missing when every revision the
			// trace's own check names it at is named by a stronger one.
			missing := slices.DeleteFunc(slices.Clone(row.Expected), func(q spec.Property) bool {
				return slices.Contains(got, q) || (len(stronger) > 0 && coveredByStronger(t, tr, q, res.Violations, stronger))
			})
			switch {
			case len(got) == 0:
				t.Errorf("%s under %s: no violation; want %v", row.File, p.Name, row.Expected)
			case compacts && p.Allows(IgnoresCompaction):
			case len(extra) > 0 || len(missing) > 0:
				t.Errorf("%s under %s: FAIL %v; want %v", row.File, p.Name, got, row.Expected)
			}
		}
	}
	for seed := uint64(1); seed <= 6; seed++ {
		base := simulate(simConfig{ops: 60, clients: 3, watch: true, seed: seed})
		for _, m := range watchMutants {
			tr := cloneTrace(base)
			if !m.apply(tr.Watches[0]) {
				continue
			}
			for _, p := range Profiles() {
				res := checkUnder(t, tr, p.Name)
				if !hasProperty(res.Violations, m.want) {
					t.Errorf("seed %d, mutant %s under %s: %s, %v; want FAIL %s", seed, m.name, p.Name, res.Verdict, res.Violations, m.want)
				}
			}
		}
	}
}

// coveredByStronger reports whether every revision at which tr's own check
// names q is named by a violation of a stronger property in vs.
func coveredByStronger(t *testing.T, tr *traces.Trace, q spec.Property, vs []Violation, stronger []spec.Property) bool {
	t.Helper()
	own, err := Check(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	named := map[int64]bool{}
	for _, v := range vs {
		if slices.Contains(stronger, v.Property) {
			for _, r := range v.Revisions {
				named[r] = true
			}
		}
	}
	found := false
	for _, v := range own.Violations {
		if v.Property != q {
			continue
		}
		found = true
		if len(v.Revisions) == 0 || !named[v.Revisions[0]] {
			return false
		}
	}
	return found
}

func sameSet(a, b []spec.Property) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(p spec.Property) bool { return !slices.Contains(b, p) })
}

func cloneTrace(tr *traces.Trace) *traces.Trace {
	c := *tr
	c.Watches = nil
	for _, w := range tr.Watches {
		cw := *w
		cw.Responses = nil
		for _, r := range w.Responses {
			r.Response.Events = append([]kv.Event(nil), r.Response.Events...)
			cw.Responses = append(cw.Responses, r)
		}
		c.Watches = append(c.Watches, &cw)
	}
	return &c
}

// watchMutants break one watch property of a valid stream (the responses
// after the created one).
var watchMutants = []struct {
	name  string
	want  spec.Property
	apply func(w *traces.Watch) bool
}{
	{"drop an event between two", spec.Reliable, func(w *traces.Watch) bool {
		rs := eventResponses(w)
		if len(rs) < 3 {
			return false
		}
		w.Responses = slices.Delete(w.Responses, rs[1], rs[1]+1)
		return true
	}},
	{"deliver an event twice", spec.Unique, func(w *traces.Watch) bool {
		rs := eventResponses(w)
		if len(rs) < 1 {
			return false
		}
		r := &w.Responses[rs[0]].Response
		r.Events = append(r.Events, r.Events[len(r.Events)-1])
		return true
	}},
	{"replay an older revision after a newer one", spec.Ordered, func(w *traces.Watch) bool {
		rs := eventResponses(w)
		if len(rs) < 2 {
			return false
		}
		replay := w.Responses[rs[0]]
		replay.Time = w.Responses[rs[1]].Time
		replay.Response.Revision = w.Responses[rs[1]].Response.Revision
		w.Responses = slices.Insert(w.Responses, rs[1]+1, replay)
		return true
	}},
	{"a wrong value", spec.Reliable, func(w *traces.Watch) bool {
		rs := eventResponses(w)
		if len(rs) < 1 || w.Responses[rs[0]].Response.Events[0].Type != kv.Put {
			return false
		}
		w.Responses[rs[0]].Response.Events[0].KV.Value = "never written"
		return true
	}},
	{"a header revision that goes back", spec.MonotonicRevision, func(w *traces.Watch) bool {
		rs := eventResponses(w)
		if len(rs) < 2 {
			return false
		}
		last := w.Responses[rs[len(rs)-1]]
		w.Responses = append(w.Responses, traces.WatchResponse{Time: last.Time + 1, Response: watch.Response{Revision: last.Response.Revision - 1}})
		return true
	}},
}

func eventResponses(w *traces.Watch) []int {
	var is []int
	for i, r := range w.Responses {
		if len(r.Response.Events) > 0 {
			is = append(is, i)
		}
	}
	return is
}

// Profiles are found by name; "" and "none" mean full conformance; an
// unknown name is an error naming the known ones; the trace's header names
// the profile unless the options do. SPEC §9.
func TestProfiles(t *testing.T) {
	for _, name := range []string{"", NoProfile} {
		if p, err := LookupProfile(name); p != nil || err != nil {
			t.Errorf("LookupProfile(%q) = %v, %v", name, p, err)
		}
	}
	_, err := LookupProfile("etcd-ish")
	if err == nil || !strings.Contains(err.Error(), `"etcd-ish"`) || !strings.Contains(err.Error(), "kine, kine-compacting, strict") {
		t.Errorf("unknown profile: %v", err)
	}
	for _, p := range Profiles() {
		got, err := LookupProfile(p.Name)
		if err != nil || got.Name != p.Name {
			t.Errorf("LookupProfile(%q) = %v, %v", p.Name, got, err)
		}
		if p.Description == "" || len(p.Allowances)+len(p.Expectations) == 0 || (len(p.Allowances) > 0) != (p.Workload == "kubernetes") {
			t.Errorf("profile %s is not described: %+v", p.Name, p)
		}
		for _, e := range p.Expectations {
			if e.Rule == "" || len(e.Strengthens) == 0 || e.Description == "" || e.Source == "" || !p.Expects(e.Name) {
				t.Errorf("expectation %s of %s is not described: %+v", e.Name, p.Name, e)
			}
			for _, s := range e.Strengthens {
				if _, ok := spec.Lookup(s); !ok {
					t.Errorf("expectation %s strengthens %q, which is not a property", e.Name, s)
				}
			}
		}
		for _, a := range p.Allowances {
			if a.Rule == "" || len(a.Weakens) == 0 || a.Description == "" || a.Source == "" || !p.Allows(a.Name) {
				t.Errorf("allowance %s of %s is not described: %+v", a.Name, p.Name, a)
			}
			for _, w := range a.Weakens {
				if _, ok := spec.Lookup(w); !ok {
					t.Errorf("allowance %s weakens %q, which is not a property", a.Name, w)
				}
			}
		}
	}
	var none *Profile
	if none.Allows(RevisionGaps) {
		t.Error("no profile allows something")
	}
	// The header's profile applies unless the options name one.
	b := newTB("header")
	b.put("a", "1")
	b.op(2, kv.Request{Range: &kv.RangeRequest{Key: "a"}}, false, func(r *kv.Response) { r.Range.KVs[0].Version = 0 })
	b.tr.Header.Profile = "kine"
	if res := checkUnder(t, b.tr, ""); res.Verdict != Linearizable || res.Profile == nil || res.Profile.Name != "kine" {
		t.Errorf("under the header's profile: %s, profile %v", res.Verdict, res.Profile)
	}
	if res := checkUnder(t, b.tr, NoProfile); res.Verdict != NotLinearizable || res.Profile != nil {
		t.Errorf("with the profile overridden: %s, profile %v", res.Verdict, res.Profile)
	}
	b.tr.Header.Profile = "nope"
	if _, err := Check(b.tr, Options{}); err == nil || !strings.Contains(err.Error(), `unknown profile "nope"`) {
		t.Errorf("a header naming an unknown profile: %v", err)
	}
	// A caller's own profile is built from the allowances and expectations
	// the checker implements; anything else is an error.
	b.tr.Header.Profile = ""
	mine := &Profile{Name: "mine", Allowances: Allowances()[2:3]}
	if res, err := Check(b.tr, Options{Profile: mine}); err != nil || res.Verdict != Linearizable || !res.Profile.Allows(UntrackedVersions) {
		t.Errorf("a caller's profile: %v, %v", res, err)
	}
	bad := &Profile{Name: "mine", Allowances: []Allowance{{Name: "Lenient"}}}
	if _, err := Check(b.tr, Options{Profile: bad}); err == nil || !strings.Contains(err.Error(), `unknown allowance "Lenient"`) {
		t.Errorf("a profile with an unknown allowance: %v", err)
	}
	// What Profiles and LookupProfile hand out is the caller's.
	ps := Profiles()
	ps[0].Allowances[0].Weakens[0] = spec.Ordered
	ps[0].Name = "changed"
	if again := Profiles(); again[0].Name == "changed" || again[0].Allowances[0].Weakens[0] == spec.Ordered {
		t.Error("Profiles hands out the registry's own slices")
	}
}
