package linearizability

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// Allowance relaxes exactly one rule of docs/SPEC.md, for a store that
// differs from etcd there on purpose (docs/SPEC.md §9). It names the rule,
// the properties whose checks it relaxes, and where the store documents the
// difference; the checker relaxes nothing else.
type Allowance struct {
	// Name is the allowance's stable name, as §9 spells it.
	Name string
	// Rule is the rule of docs/SPEC.md it relaxes, such as "§2.1 Revisions".
	Rule string
	// Weakens lists the properties whose checks it relaxes.
	Weakens []spec.Property
	// Description says what the store may do that etcd does not.
	Description string
	// Source is where the store documents or implements the difference.
	Source string
}

// Expectation holds a store to more than etcd guarantees: a behaviour
// watchspec recommends (docs/SPEC.md §9.3). A correct etcd may break it, so
// an expectation is only checked under a profile that names it, and the
// violation it reports names the upstream behaviour it differs from.
type Expectation struct {
	// Name is the expectation's stable name, as §9.3 spells it.
	Name string
	// Rule is the rule of docs/SPEC.md it strengthens, such as "§3.12 MonotonicRevision".
	Rule string
	// Strengthens lists the properties whose checks it makes stricter.
	Strengthens []spec.Property
	// Description says what the store is expected to do beyond etcd.
	Description string
	// Source is where etcd (or clientv3) does otherwise.
	Source string
}

// Profile is a named set of allowances and expectations (docs/SPEC.md §9).
// A result under a profile with allowances is not full conformance; one
// under a profile with expectations is stricter than full conformance, and
// may fail a correct etcd. Reports say which.
//
// The profiles watchspec knows are [Profiles]; a caller may also build one
// from the allowances and expectations this package defines ([Allowances],
// [Expectations]) and pass it in [Options.Profile].
type Profile struct {
	Name string
	// Description says which store, and which configuration of it, the
	// profile describes.
	Description string
	// Workload is the conform workload (conform.Config.Workload) the store
	// supports: "" for the whole etcd API.
	Workload     string
	Allowances   []Allowance
	Expectations []Expectation
}

// The allowances (docs/SPEC.md §9).
const (
	RevisionGaps       = "RevisionGaps"
	IgnoresCompaction  = "IgnoresCompaction"
	UntrackedVersions  = "UntrackedVersions"
	CompactKeyEmulated = "CompactKeyEmulated"
)

// NoProfile is the name that asks for full conformance whatever a trace's
// header names ([ProfileOption]).
const NoProfile = "none"

// FullConformance, as [Options.Profile], checks every trace for full
// conformance, whatever its header names.
var FullConformance = &Profile{Name: NoProfile, Description: "full conformance: no allowance, no expectation beyond etcd's guarantees"}

// ProfileOption turns a profile name, as a command line gives it, into
// [Options.Profile]: "" is nil (each trace's own), [NoProfile] is
// [FullConformance], any other name the profile of [LookupProfile].
func ProfileOption(name string) (*Profile, error) {
	if name == NoProfile {
		return FullConformance, nil
	}
	return LookupProfile(name)
}

// profileFor returns the profile a trace is checked under: opt, or the one
// its header names; nil is full conformance.
func profileFor(t *traces.Trace, opt *Profile) (*Profile, error) {
	if opt == FullConformance || (opt != nil && opt.Name == NoProfile && len(opt.Allowances)+len(opt.Expectations) == 0) {
		return nil, nil
	}
	if opt == nil {
		return LookupProfile(t.Header.Profile)
	}
	if err := opt.validate(); err != nil {
		return nil, err
	}
	p := opt.clone()
	return &p, nil
}

// CompactRevKey is the key in which the Kubernetes apiserver records its
// compactions (k8s.io/apiserver/pkg/storage/etcd3/compact.go).
const CompactRevKey = "compact_rev_key"

var allowances = map[string]Allowance{
	RevisionGaps: {
		Name:    RevisionGaps,
		Rule:    "§2.1 Revisions",
		Weakens: []spec.Property{spec.Linearizable},
		Description: "the store's revision may advance by more than one between writes: the revisions skipped hold no event. " +
			"Revisions still never decrease, a read still reports the current revision, a write the revision of its events, " +
			"and a progress notification still no revision beyond the last one a response showed.",
		Source: "kine docs/flow.md (\"If any gaps are observed, dummy fill records are created\"); " +
			"pkg/logstructured/sqllog/sql.go poll (a revision missing for a second is filled with a gap-N row no watch delivers)",
	},
	IgnoresCompaction: {
		Name:    IgnoresCompaction,
		Rule:    "§2.4 Compaction",
		Weakens: []spec.Property{spec.Linearizable},
		Description: "a client's compaction is acknowledged — success, or ErrFutureRev beyond the current revision, as §2.4 " +
			"says — and has no effect: reads below it still succeed, a later compaction at or below it succeeds again, " +
			"and no watch is cancelled for it (a cancel for a compaction that did not happen is still §3.11's violation).",
		Source: "kine docs/flow.md (\"compaction requests via GRPC are acknowleged but not acted upon\"); " +
			"pkg/logstructured/sqllog/sql.go Compact (\"manual compact is a no-op unless automatic compaction is disabled\")",
	},
	UntrackedVersions: {
		Name:    UntrackedVersions,
		Rule:    "§2.2 Key lifecycle (Version)",
		Weakens: []spec.Property{spec.Linearizable, spec.Reliable, spec.PrevKV},
		Description: "a key-value's Version may be 0, in responses and watch events, whatever the key's history: the store " +
			"does not count versions. Every other field is checked, and compact_rev_key's version (which the apiserver " +
			"compares) must be right.",
		Source: "kine pkg/server/compact.go (\"kine does not actually track key versions, only revisions\"); " +
			"pkg/logstructured/sqllog/sql.go scan never sets Version",
	},
	CompactKeyEmulated: {
		Name:    CompactKeyEmulated,
		Rule:    "§2.5 Transactions (one result per operation of the branch)",
		Weakens: []spec.Property{spec.Linearizable},
		Description: "the apiserver's compaction transaction (version(compact_rev_key) = V → put compact_rev_key, else get it) " +
			"may be answered with only what the apiserver reads: on success the header alone, on failure the key's value " +
			"and version alone. Which branch ran, the header revision and the transaction's effect are checked.",
		Source: "kine pkg/server/compact.go isCompact and compact (\"on success, no response is required - just the revision header\")",
	},
}

// The expectations (docs/SPEC.md §9.3).
const (
	MonotonicHeaders  = "MonotonicHeaders"
	StartAfterCreated = "StartAfterCreated"
	// StrictFreshStart is the Kubernetes expectation of docs/SPEC.md §5.8
	// (k8s.ExpectStrictFreshStart).
	StrictFreshStart = k8s.ExpectStrictFreshStart
)

var expectations = map[string]Expectation{
	MonotonicHeaders: {
		Name:        MonotonicHeaders,
		Rule:        "§3.12 MonotonicRevision",
		Strengthens: []spec.Property{spec.MonotonicRevision},
		Description: "the non-zero header revisions one watch receives never decrease, so that a client may take any header as how far the watch has seen.",
		Source: "etcd 3.5-3.7 server/storage/mvcc/watchable_store.go: syncWatchers sends a catch-up batch with header curRev; " +
			"one that meets a full send buffer is parked as a victim and moveVictims re-sends it with header minRev-1, below headers already delivered " +
			"(only WatchResponse.Revision >= its events is documented, server/storage/mvcc/watcher.go)",
	},
	StartAfterCreated: {
		Name:        StartAfterCreated,
		Rule:        "§3.10 StartRevision (§1 from(w))",
		Strengthens: []spec.Property{spec.StartRevision},
		Description: "a watch from revision 0 delivers nothing at or below the header revision of its created response, as the API reference's start_revision says.",
		Source: "etcd PR #20229 (3.5.22, 3.6.2, 3.7.0): v3rpc reads the created header after registering the watch, so a write applied in between is delivered below it; " +
			"clientv3 client/v3/watch.go serveSubstream resumes a watch from now that received nothing at that header revision, inclusive",
	},
	StrictFreshStart: {
		Name:        StrictFreshStart,
		Rule:        "§5.8 FreshStart",
		Strengthens: []spec.Property{spec.FreshStart},
		Description: "an informer's first sync is not older than what was committed before it started, even when it was read at resourceVersion \"0\", " +
			"so that a restarted component never goes back in time.",
		Source: "client-go v0.37.2 tools/cache/reflector.go relistResourceVersion: the first list is at \"0\" when WatchList is off (the default before 1.35) " +
			"or failed, and the apiserver answers \"0\" from its watch cache, which may be stale (kubernetes#59848, open; KEP-3157 note 2)",
	},
}

var profiles = []Profile{{
	Name: "kine",
	Description: "kine v0.17 (github.com/k3s-io/kine) over SQL with automatic compaction on (--compact-interval > 0, " +
		"longer than the run), driven as the Kubernetes apiserver drives it",
	Workload:   "kubernetes",
	Allowances: []Allowance{allowances[RevisionGaps], allowances[IgnoresCompaction], allowances[UntrackedVersions], allowances[CompactKeyEmulated]},
}, {
	Name: "kine-compacting",
	Description: "kine v0.17 with compaction left to its clients (--compact-interval 0) and no revision retained " +
		"(--compact-min-retain 0), as kine's pkg/testserver runs the apiserver's storage tests: a client's compaction takes effect",
	Workload:   "kubernetes",
	Allowances: []Allowance{allowances[RevisionGaps], allowances[UntrackedVersions], allowances[CompactKeyEmulated]},
}, {
	Name: "strict",
	Description: "watchspec's recommendations beyond etcd's guarantees: what a store should do so that its watch headers " +
		"and the start of a watch from now can be taken at their word. A correct etcd fails it",
	Expectations: []Expectation{expectations[MonotonicHeaders], expectations[StartAfterCreated], expectations[StrictFreshStart]},
}}

// Profiles returns every profile watchspec knows, in the order of
// docs/SPEC.md §9.2. The result is the caller's: changing it changes
// nothing here.
func Profiles() []Profile {
	out := make([]Profile, len(profiles))
	for i, p := range profiles {
		out[i] = p.clone()
	}
	return out
}

// Allowances returns every allowance the checker implements, by name.
func Allowances() []Allowance {
	var out []Allowance
	for _, name := range []string{RevisionGaps, IgnoresCompaction, UntrackedVersions, CompactKeyEmulated} {
		a := allowances[name]
		a.Weakens = slices.Clone(a.Weakens)
		out = append(out, a)
	}
	return out
}

// Expectations returns every expectation the checker implements, by name.
func Expectations() []Expectation {
	var out []Expectation
	for _, name := range []string{MonotonicHeaders, StartAfterCreated, StrictFreshStart} {
		e := expectations[name]
		e.Strengthens = slices.Clone(e.Strengthens)
		out = append(out, e)
	}
	return out
}

func (p Profile) clone() Profile {
	p.Allowances = slices.Clone(p.Allowances)
	for i := range p.Allowances {
		p.Allowances[i].Weakens = slices.Clone(p.Allowances[i].Weakens)
	}
	p.Expectations = slices.Clone(p.Expectations)
	for i := range p.Expectations {
		p.Expectations[i].Strengthens = slices.Clone(p.Expectations[i].Strengthens)
	}
	return p
}

// ProfileNames returns the names of the profiles.
func ProfileNames() []string {
	var names []string
	for _, p := range profiles {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// LookupProfile returns the profile called name, a copy the caller may
// keep; "" and [NoProfile] give nil (full conformance). An unknown name is
// an error that lists the known ones.
func LookupProfile(name string) (*Profile, error) {
	if name == "" || name == NoProfile {
		return nil, nil
	}
	for i := range profiles {
		if profiles[i].Name == name {
			p := profiles[i].clone()
			return &p, nil
		}
	}
	return nil, fmt.Errorf("unknown profile %q (known: %s, or %q for full conformance)", name, strings.Join(ProfileNames(), ", "), NoProfile)
}

// validate checks that every allowance and expectation of a caller's profile
// is one the checker implements, with its registered meaning.
func (p *Profile) validate() error {
	if p == nil {
		return nil
	}
	for _, a := range p.Allowances {
		if _, ok := allowances[a.Name]; !ok {
			return fmt.Errorf("profile %q: unknown allowance %q (known: %s)", p.Name, a.Name, strings.Join(slices.Sorted(maps.Keys(allowances)), ", "))
		}
	}
	for _, e := range p.Expectations {
		if _, ok := expectations[e.Name]; !ok {
			return fmt.Errorf("profile %q: unknown expectation %q (known: %s)", p.Name, e.Name, strings.Join(slices.Sorted(maps.Keys(expectations)), ", "))
		}
	}
	return nil
}

// Allows reports whether the profile holds the allowance; a nil profile
// holds none.
func (p *Profile) Allows(name string) bool {
	if p == nil {
		return false
	}
	for _, a := range p.Allowances {
		if a.Name == name {
			return true
		}
	}
	return false
}

// Expects reports whether the profile holds the expectation; a nil profile
// holds none.
func (p *Profile) Expects(name string) bool {
	if p == nil {
		return false
	}
	for _, e := range p.Expectations {
		if e.Name == name {
			return true
		}
	}
	return false
}

// allow is what the checker relaxes: the allowances of the profile in force.
type allow struct {
	gaps, ignoreCompaction, untrackedVersions, compactKey bool
	// views, when set, keeps only the commits every watch agrees with
	// (views.go); nil keeps every commit the responses allow.
	views *watchViews
}

func allowOf(p *Profile) allow {
	return allow{gaps: p.Allows(RevisionGaps), ignoreCompaction: p.Allows(IgnoresCompaction),
		untrackedVersions: p.Allows(UntrackedVersions), compactKey: p.Allows(CompactKeyEmulated)}
}

// k8sExpectOf returns the Kubernetes expectations of the profile in force.
func k8sExpectOf(p *Profile) k8s.Expectations {
	return k8s.Expectations{StrictFreshStart: p.Expects(StrictFreshStart)}
}

// expectOf returns the watch expectations of the profile in force.
func expectOf(p *Profile) watch.Expectations {
	return watch.Expectations{MonotonicHeaders: p.Expects(MonotonicHeaders), StartAfterCreated: p.Expects(StartAfterCreated)}
}

// modelStep is kv.Step, with a compaction that has no effect under
// IgnoresCompaction.
func (a allow) modelStep(s kv.State, req kv.Request) (kv.State, kv.Response) {
	next, resp := kv.Step(s, req)
	if a.ignoreCompaction && req.Compact != nil && resp.Err == nil {
		next = s
	}
	return next, resp
}

// same compares the model's response with the recorded one, relaxing what
// the allowances relax. recorded is already normalized (see normalize).
func (a allow) same(req kv.Request, model, recorded kv.Response) bool {
	if a.untrackedVersions {
		model = zeroVersions(model)
	}
	if a.compactKey && isCompactTxn(req) && recorded.Err == nil && model.Err == nil && recorded.Txn != nil && model.Txn != nil {
		return sameCompactTxn(model, recorded)
	}
	return kv.Answers(model, recorded)
}

// normalize prepares a recorded response for comparison.
func (a allow) normalize(r *kv.Response) *kv.Response {
	if r == nil || !a.untrackedVersions {
		return r
	}
	z := zeroVersions(*r)
	return &z
}

// isCompactTxn reports whether req is the apiserver's compaction
// transaction (k8s.io/apiserver/pkg/storage/etcd3/compact.go).
func isCompactTxn(req kv.Request) bool {
	t := req.Txn
	return t != nil && len(t.Compare) == 1 && t.Compare[0].Key == CompactRevKey && t.Compare[0].Target == kv.TargetVersion &&
		t.Compare[0].Result == kv.CompareEqual &&
		len(t.Success) == 1 && t.Success[0].Put != nil && t.Success[0].Put.Key == CompactRevKey &&
		len(t.Failure) == 1 && t.Failure[0].Range != nil && t.Failure[0].Range.Key == CompactRevKey
}

// sameCompactTxn compares what CompactKeyEmulated leaves: the branch, the
// revision, and on failure the key's value and version.
func sameCompactTxn(model, recorded kv.Response) bool {
	if model.Revision != recorded.Revision || model.Txn.Succeeded != recorded.Txn.Succeeded {
		return false
	}
	if model.Txn.Succeeded {
		return len(recorded.Txn.Responses) == 0 || kv.SameResponse(model, recorded)
	}
	if len(recorded.Txn.Responses) != 1 || recorded.Txn.Responses[0].Range == nil {
		return false
	}
	want, got := model.Txn.Responses[0].Range.KVs, recorded.Txn.Responses[0].Range.KVs
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if want[i].Key != got[i].Key || want[i].Value != got[i].Value || want[i].Version != got[i].Version {
			return false
		}
	}
	return true
}

// zeroVersions returns r with the Version of every key-value it holds set
// to 0, except compact_rev_key's (UntrackedVersions).
func zeroVersions(r kv.Response) kv.Response {
	kvs := func(in []kv.KeyValue) []kv.KeyValue {
		if in == nil {
			return nil
		}
		out := make([]kv.KeyValue, len(in))
		for i, k := range in {
			out[i] = zeroVersion(k)
		}
		return out
	}
	ptr := func(k *kv.KeyValue) *kv.KeyValue {
		if k == nil {
			return nil
		}
		z := zeroVersion(*k)
		return &z
	}
	rng := func(rr *kv.RangeResponse) *kv.RangeResponse {
		if rr == nil {
			return nil
		}
		c := *rr
		c.KVs = kvs(rr.KVs)
		return &c
	}
	put := func(p *kv.PutResponse) *kv.PutResponse {
		if p == nil {
			return nil
		}
		return &kv.PutResponse{PrevKV: ptr(p.PrevKV)}
	}
	del := func(d *kv.DeleteResponse) *kv.DeleteResponse {
		if d == nil {
			return nil
		}
		return &kv.DeleteResponse{Deleted: d.Deleted, PrevKVs: kvs(d.PrevKVs)}
	}
	r.Range, r.Put, r.Delete = rng(r.Range), put(r.Put), del(r.Delete)
	if r.Txn != nil {
		t := &kv.TxnResponse{Succeeded: r.Txn.Succeeded}
		for _, o := range r.Txn.Responses {
			t.Responses = append(t.Responses, kv.OpResponse{Range: rng(o.Range), Put: put(o.Put), Delete: del(o.Delete)})
		}
		r.Txn = t
	}
	return r
}

func zeroVersion(k kv.KeyValue) kv.KeyValue {
	if k.Key != CompactRevKey {
		k.Version = 0
	}
	return k
}

// zeroEvent is zeroVersion for a watch event and its previous key-value.
func zeroEvent(e kv.Event) kv.Event {
	e.KV = zeroVersion(e.KV)
	if e.PrevKV != nil {
		p := zeroVersion(*e.PrevKV)
		e.PrevKV = &p
	}
	return e
}
