package linearizability

import (
	"fmt"
	"sort"
	"strings"

	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
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

// Profile is a named set of allowances (docs/SPEC.md §9). A result under a
// profile is not full conformance, and reports say so.
type Profile struct {
	Name string
	// Description says which store, and which configuration of it, the
	// profile describes.
	Description string
	// Workload is the conform workload (conform.Config.Workload) the store
	// supports: "" for the whole etcd API.
	Workload   string
	Allowances []Allowance
}

// The allowances (docs/SPEC.md §9).
const (
	RevisionGaps       = "RevisionGaps"
	IgnoresCompaction  = "IgnoresCompaction"
	UntrackedVersions  = "UntrackedVersions"
	CompactKeyEmulated = "CompactKeyEmulated"
)

// NoProfile, given as Options.Profile, checks for full conformance whatever
// the trace's header names.
const NoProfile = "none"

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
}}

// Profiles returns every profile, by name. Callers must not modify them.
func Profiles() []Profile { return profiles }

// ProfileNames returns the names of the profiles.
func ProfileNames() []string {
	var names []string
	for _, p := range profiles {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// LookupProfile returns the profile called name; "" and [NoProfile] give
// nil (full conformance). An unknown name is an error that lists the known
// ones.
func LookupProfile(name string) (*Profile, error) {
	if name == "" || name == NoProfile {
		return nil, nil
	}
	for i := range profiles {
		if profiles[i].Name == name {
			return &profiles[i], nil
		}
	}
	return nil, fmt.Errorf("unknown profile %q (known: %s, or %q for full conformance)", name, strings.Join(ProfileNames(), ", "), NoProfile)
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

// allow is what the checker relaxes: the allowances of the profile in force.
type allow struct {
	gaps, ignoreCompaction, untrackedVersions, compactKey bool
}

func allowOf(p *Profile) allow {
	return allow{gaps: p.Allows(RevisionGaps), ignoreCompaction: p.Allows(IgnoresCompaction),
		untrackedVersions: p.Allows(UntrackedVersions), compactKey: p.Allows(CompactKeyEmulated)}
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
