package mutate

import (
	"fmt"
	"hash/fnv"
	"math/rand"
	"slices"
	"strings"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// Kind says how the checker must answer an operator's mutants.
type Kind int

const (
	// Semantic mutants break a guarantee: the checker must report new
	// violations, exactly one of the expected sets of properties.
	Semantic Kind = iota
	// Equivalence mutants keep every verdict: the same properties fail.
	Equivalence
	// Weakening mutants only remove evidence: no property may fail that
	// did not fail before (one that failed may now hold).
	Weakening
	// Strict mutants break only an expectation of the strict profile
	// (docs/SPEC.md §9.3): checked under that profile the checker must
	// report exactly one of the expected sets of properties, and checked
	// by default (etcd's and Kubernetes' guarantees) nothing new.
	Strict
)

func (k Kind) String() string {
	switch k {
	case Semantic:
		return "semantic"
	case Equivalence:
		return "equivalence"
	case Weakening:
		return "weakening"
	case Strict:
		return "strict"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Operator makes one kind of change to a trace.
type Operator struct {
	// Name is the operator's stable name (the -mutate.op flag selects it).
	Name string
	Kind Kind
	// Doc says what the operator changes and why the result is what Kind says.
	Doc string
	// Properties lists the properties its mutants may be expected to break
	// (the SPEC section decides which one each mutant gets).
	Properties []spec.Property
	apply      func(m *Mutant, r *rand.Rand) bool
}

// Mutant is one changed trace and what the checker must say about it.
type Mutant struct {
	Op      *Operator
	Subject *Subject
	// Seed remakes the mutant: Op.Apply(Subject, Seed).
	Seed  int64
	Trace *traces.Trace
	// What describes the change, with the lines of the original trace.
	What string
	// Expect lists, for a semantic or strict mutant, the acceptable sets of
	// new properties; the checker must report exactly one of them.
	Expect [][]spec.Property
	// Tags are facts about the mutated site (such as "no-created") that a
	// known checker defect may depend on.
	Tags []string
	// Err is set when the operator could not make a readable trace (a
	// bug of the operator or of the trace format); Judge reports it.
	Err error
}

// tries is how many sites an operator tries in one subject before it says
// the subject gives it nothing to change.
const tries = 40

// Apply makes the operator's mutant of s for seed, or reports that s gives
// the operator nothing to change.
//
// A subject that uses leases is changed by the lease operators only: the
// checker takes the server's deletions from what watches delivered
// (docs/SPEC.md §3.14), so an operator that drops, merges or re-times
// deliveries changes that evidence, which the other operators' verdicts do
// not foresee (leaseops.go).
func (op *Operator) Apply(s *Subject, seed int64) (*Mutant, bool) {
	if len(s.Trace.LeaseOps) > 0 && !strings.HasPrefix(op.Name, "lease-") {
		return nil, false
	}
	r := rand.New(rand.NewSource(seed))
	for range tries {
		m := &Mutant{Op: op, Subject: s, Seed: seed}
		if op.apply(m, r) {
			m.tr()
			return m, true
		}
	}
	return nil, false
}

// tr returns the mutant's trace, copying the subject's on first use (most
// attempts find nothing to change and copy nothing).
func (m *Mutant) tr() *traces.Trace {
	if m.Trace == nil {
		m.Trace = cloneTrace(m.Subject.Trace)
	}
	return m.Trace
}

// Seed derives the seed of mutant i of operator name in a campaign seeded
// with campaign.
func Seed(campaign int64, name string, i int) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", campaign, name, i)
	return int64(h.Sum64() &^ (1 << 63))
}

func (m *Mutant) whatf(format string, args ...any) { m.What = fmt.Sprintf(format, args...) }

func (m *Mutant) tag(t string) {
	if !slices.Contains(m.Tags, t) {
		m.Tags = append(m.Tags, t)
	}
}

// expectString renders the expected sets: "Reliable | Ordered".
func expectString(e [][]spec.Property) string {
	var alts []string
	for _, set := range e {
		var ps []string
		for _, p := range set {
			ps = append(ps, string(p))
		}
		alts = append(alts, strings.Join(ps, "+"))
	}
	return strings.Join(alts, " | ")
}

// cloneTrace copies t deeply enough that a mutation may replace any
// operation, watch, response, progress request, list, watch call or entry
// of the copy (and its K8sInfo) in place. What lies below those (event slices, responses of operations,
// objects) is shared: operators copy it before they change it (see
// mutable helpers below).
func cloneTrace(t *traces.Trace) *traces.Trace {
	c := *t
	c.Ops = slices.Clone(t.Ops)
	c.LeaseOps = slices.Clone(t.LeaseOps)
	c.Watches = make([]*traces.Watch, len(t.Watches))
	for i, w := range t.Watches {
		wc := *w
		wc.Responses = slices.Clone(w.Responses)
		c.Watches[i] = &wc
	}
	c.Annotations = slices.Clone(t.Annotations)
	c.ProgressRequests = slices.Clone(t.ProgressRequests)
	if t.Header.BaseCompactRevision != nil {
		b := *t.Header.BaseCompactRevision
		c.Header.BaseCompactRevision = &b
	}
	if t.K8sInfo != nil {
		info := *t.K8sInfo
		info.Lists = slices.Clone(info.Lists)
		info.Watches = slices.Clone(info.Watches)
		info.Entries = slices.Clone(info.Entries)
		c.K8sInfo = &info
	}
	if t.K8s != nil {
		run := *t.K8s
		run.Lists = slices.Clone(run.Lists)
		run.Watches = slices.Clone(run.Watches)
		for i := range run.Watches {
			run.Watches[i].Events = slices.Clone(run.Watches[i].Events)
		}
		run.Entries = slices.Clone(run.Entries)
		run.Cache = slices.Clone(run.Cache)
		c.K8s = &run
	}
	return &c
}

// events returns the events of response j of watch i of the mutant's trace,
// copied so that the caller may change them.
func (m *Mutant) events(i, j int) []kv.Event {
	r := &m.tr().Watches[i].Responses[j].Response
	r.Events = slices.Clone(r.Events)
	return r.Events
}

// rebuildWatchEvents sets every k8s watch's events from the run's entries,
// which hold them in file order (each k8s_watch_event record is both):
// operators change the entries, then call it.
func rebuildWatchEvents(run *k8s.Run) {
	for i := range run.Watches {
		run.Watches[i].Events = nil
	}
	for _, e := range run.Entries {
		if we := e.WatchEvent; we != nil {
			run.Watches[we.Watch].Events = append(run.Watches[we.Watch].Events, we.Event)
		}
	}
}

// spliceEntries replaces the informer log's entries [at, at+del) of the
// mutant's run with ins, and keeps the trace's K8sInfo in step (its
// Entries run parallel to the run's): an inserted entry happens when the
// entry before it did (or the one it displaces, at the start), with no line.
// Callers rebuild the watches' events when they touch watch events.
func (m *Mutant) spliceEntries(at, del int, ins ...k8s.Entry) {
	t := m.tr()
	t.K8s.Entries = slices.Replace(slices.Clone(t.K8s.Entries), at, at+del, ins...)
	if info := t.K8sInfo; info != nil && len(info.Entries) > 0 {
		var like traces.K8sEntryInfo
		switch {
		case at > 0:
			like = info.Entries[at-1]
		case at < len(info.Entries):
			like = info.Entries[at]
		}
		like.Line = 0
		add := make([]traces.K8sEntryInfo, len(ins))
		for i := range add {
			add[i] = like
		}
		info.Entries = slices.Replace(slices.Clone(info.Entries), at, at+del, add...)
	}
}

// moveEntry moves the informer log's entry from to index to (counted in
// the log without it); the times stay where they were (the log stays in
// time order), the entry takes the time of its new place.
func (m *Mutant) moveEntry(from, to int) {
	run := m.tr().K8s
	e := run.Entries[from]
	entries := slices.Delete(slices.Clone(run.Entries), from, from+1)
	run.Entries = slices.Insert(entries, to, e)
}

// deleteEntries deletes the informer log's entries that drop accepts, and
// their K8sInfo.
func (m *Mutant) deleteEntries(drop func(i int, e k8s.Entry) bool) {
	t := m.tr()
	info := t.K8sInfo
	var keep []k8s.Entry
	var keepInfo []traces.K8sEntryInfo
	for i, e := range t.K8s.Entries {
		if drop(i, e) {
			continue
		}
		keep = append(keep, e)
		if info != nil && i < len(info.Entries) {
			keepInfo = append(keepInfo, info.Entries[i])
		}
	}
	t.K8s.Entries = keep
	if info != nil && len(info.Entries) > 0 {
		info.Entries = keepInfo
	}
}
