package linearizability

import (
	"fmt"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/lease"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// Options tune [Check].
type Options struct {
	// Timeout bounds porcupine's search (default 5 minutes). When it runs
	// out the verdict is Unknown.
	Timeout time.Duration
	// Progress, when set, is told what the check is doing.
	Progress func(format string, args ...any)
	// Profile is the profile to check under (docs/SPEC.md §9): nil means
	// the one the trace's header names, if any; [FullConformance] means
	// none, whatever the header says. Use [ProfileOption] to turn a name
	// given on a command line into this option, or build a profile from
	// [Allowances] and [Expectations].
	Profile *Profile
	// SingleServer says the trace was recorded against one server, not a
	// cluster: every revision a client was answered had then been applied
	// by the server of every watch requested afterwards, which bounds from
	// below where a watch from revision 0 may start (docs/SPEC.md §1,
	// from(w)). Against a cluster a member may lag, so leave it unset when
	// in doubt: the check is then sound, and weaker.
	SingleServer bool
}

// Verdict is the outcome of the linearizability check.
type Verdict string

const (
	Linearizable    Verdict = "linearizable"
	NotLinearizable Verdict = "not linearizable"
	Unknown         Verdict = "unknown (porcupine timed out)"
)

// Violation is a broken property, located in the trace.
type Violation struct {
	spec.Violation
	// Where says which operation or watch response shows it, with its line.
	Where string
}

// Result is what [Check] found.
type Result struct {
	Trace   string
	Verdict Verdict
	// Method says how the verdict was reached: "revision order" or "porcupine".
	Method string
	// History is the committed history of the linearization (nil unless
	// Verdict is Linearizable).
	History    *kv.History
	Violations []Violation
	// Checks counts how many times each property was checked.
	Checks map[spec.Property]int
	// Ops, Watches and WatchResponses count what the trace held.
	Ops, Watches, WatchResponses int
	// Informer says the trace holds an informer run (docs/SPEC.md §4–§5).
	Informer bool
	// Profile is the profile the trace was checked under (nil: full
	// conformance).
	Profile *Profile

	// search is porcupine's search of a history that is not linearizable,
	// for Visualize.
	search *search
}

// search is what porcupine's visualisation needs.
type search struct {
	model porcupine.Model
	info  porcupine.LinearizationInfo
}

// op is one operation prepared for checking.
type op struct {
	t      *traces.Op
	out    Output
	call   int64
	ret    int64 // math.MaxInt64 when the outcome is unknown and unpinned
	bucket int64 // the revision the revision-order stage places it at
	key    int64 // its place among the operations of that revision
	// guess, for a write the revision-order stage placed without a known
	// revision (fillGaps: a server lease deletion no watch showed, a client
	// write of unknown outcome), is the revision it created there (0: none).
	guess int64
}

// Check checks one trace. It returns an error only when the trace cannot be
// checked at all (for instance it names an unknown profile); broken
// properties are in the Result. It writes nothing: see [Result.Visualize].
func Check(t *traces.Trace, opts Options) (*Result, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	profile, err := profileFor(t, opts.Profile)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", t.Name, err)
	}
	a := allowOf(profile)
	progress := opts.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	res := &Result{Trace: t.Name, Checks: map[spec.Property]int{}, Ops: len(t.Ops), Watches: len(t.Watches), Informer: t.K8s != nil, Profile: profile}
	for _, w := range t.Watches {
		res.WatchResponses += len(w.Responses)
	}
	var deletions []*serverDeletion
	var ends map[*traces.Op]leaseEnd
	leases := usesLeases(t)
	if leases {
		// §3.14: the server's own deletions join the operations (see
		// lease.go): those watches showed at their revisions, those no
		// watch showed as the deletions of their leases; the trace itself
		// is not modified.
		deletions = findServerDeletions(t)
		c := *t
		c.Ops = append(withoutLeaseRefusals(t.Ops), serverOps(deletions)...)
		lops, info := serverLeaseOps(t, deletions, -1-len(deletions))
		n := len(c.Ops)
		c.Ops = append(c.Ops, lops...)
		ends = make(map[*traces.Op]leaseEnd, len(info))
		for i, e := range info {
			ends[&c.Ops[n+i]] = e
		}
		t = &c
	}
	obs := observe(t)
	ops, serializable := prepare(t, obs, a)
	start, err := startState(t, ops)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", t.Name, err)
	}
	progress("%s: linearizing %s", t.Name, linearizing(len(t.Ops), len(ops), len(serializable)))
	res.Checks[spec.Linearizable]++
	var views *watchViews
	if watchEvidence {
		views = newWatchViews(t)
	}
	final, err := res.linearize(t.Name, ops, ends, start, a, views, opts.Timeout, progress)
	if err != nil {
		return nil, err
	}
	if res.Verdict == Linearizable {
		res.History = final.History()
	}
	if leases {
		// The lease deletions the revision order placed are judged for
		// §2.11; porcupine's linearization may place one of unknown outcome
		// earlier than it need be, so its placements are not.
		var placed []lease.Deletion
		if res.Method == "revision order" {
			placed = placedDeletions(t, ops, res.History, ends)
		}
		res.checkLeases(t, deletions, placed)
	}
	if res.Verdict != Linearizable {
		res.checkWriteRevisions(t, obs, nil)
		return res, nil
	}
	res.checkWriteRevisions(t, obs, res.History)
	res.checkSerializable(serializable, ops, start, final)
	progress("%s: validating %d watches (%d responses)", t.Name, len(t.Watches), res.WatchResponses)
	res.validateWatches(t, final, start, ops, a, watchOptions{expect: expectOf(profile), singleServer: opts.SingleServer})
	if t.K8s != nil {
		progress("%s: checking the informer run (%d entries)", t.Name, len(t.K8s.Entries))
		h, err := k8s.NewHistory(res.History)
		if err != nil {
			return nil, err
		}
		for _, v := range k8s.CheckInformerWith(h, *t.K8s, k8sExpectOf(profile)) {
			res.Violations = append(res.Violations, Violation{Violation: v, Where: "informer run"})
		}
		for p, n := range k8s.Checks(*t.K8s) {
			res.Checks[p] += n
		}
	}
	return res, nil
}

// linearize sets the verdict and returns the final state of a
// linearization: one every watch agrees with (views.go), searched for with
// at most a quarter of the timeout, or, when there is none, any the
// responses allow.
func (res *Result) linearize(name string, ops []*op, ends map[*traces.Op]leaseEnd, start States, a allow, views *watchViews,
	timeout time.Duration, progress func(string, ...any)) (kv.State, error) {
	if views != nil {
		av := a
		av.views = views
		try := &Result{Checks: map[spec.Property]int{}}
		final, err := try.linearizeUnder(name+" (agreeing with every watch)", ops, ends, start, av, timeout/4, progress)
		if err != nil || try.Verdict == Linearizable {
			res.Verdict, res.Method = try.Verdict, try.Method
			return final, err
		}
		progress("%s: no linearization found that agrees with every watch; searching without the watches' evidence", name)
	}
	return res.linearizeUnder(name, ops, ends, start, a, timeout, progress)
}

// linearizeUnder sets the verdict and returns the final state of a linearization
// under a: the revision order, then porcupine for at most timeout.
func (res *Result) linearizeUnder(name string, ops []*op, ends map[*traces.Op]leaseEnd, start States, a allow,
	timeout time.Duration, progress func(string, ...any)) (kv.State, error) {
	if final, ok := revisionOrderFilling(ops, ends, start, a); ok {
		res.Verdict, res.Method = Linearizable, "revision order"
		return final, nil
	}
	progress("%s: revision order failed; searching with porcupine (timeout %v)", name, timeout)
	res.Method = "porcupine"
	stop := ticker(func(elapsed time.Duration) {
		progress("%s: porcupine still searching (%.0fs of %v)", name, elapsed.Seconds(), timeout)
	})
	defer stop()
	return res.porcupine(ops, start, timeout, a)
}

// linearizing says how many of a trace's operations are linearized, counting
// them as reports do (all of the trace's operations): "12 operations", or
// "10 of the 12 operations (1 serializable read, checked apart; 1 read of
// unknown outcome, which constrains nothing)".
func linearizing(all, linearized, serializable int) string {
	if linearized == all {
		return fmt.Sprintf("%d operations", all)
	}
	var why []string
	if serializable > 0 {
		why = append(why, fmt.Sprintf("%d serializable reads, checked apart", serializable))
	}
	if n := all - linearized - serializable; n > 0 {
		why = append(why, fmt.Sprintf("%d reads of unknown outcome, which constrain nothing", n))
	}
	return fmt.Sprintf("%d of the %d operations (%s)", linearized, all, strings.Join(why, "; "))
}

// ticker calls tell every five seconds until the returned stop is called.
func ticker(tell func(elapsed time.Duration)) (stop func()) {
	done := make(chan struct{})
	go func() {
		started := time.Now()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				tell(time.Since(started))
			}
		}
	}()
	return func() { close(done) }
}

// porcupine decides linearizability by search, sets the verdict, keeps what
// the visualisation of a failure needs, and returns the final state of a
// linearization.
func (res *Result) porcupine(ops []*op, start States, timeout time.Duration, a allow) (kv.State, error) {
	history := make([]porcupine.Operation, len(ops))
	for i, p := range ops {
		history[i] = porcupine.Operation{ClientId: p.t.Client, Input: p.t.Request, Call: p.call, Output: p.out, Return: p.ret, Metadata: i}
	}
	model := a.model(start...)
	model.DescribeOperationMetadata = func(info any) string {
		p := ops[info.(int)]
		return fmt.Sprintf("line %d", p.t.Line)
	}
	result, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	switch result {
	case porcupine.Unknown:
		res.Verdict = Unknown
		return kv.State{}, nil
	case porcupine.Illegal:
		res.Verdict = NotLinearizable
		res.Violations = append(res.Violations, res.notLinearizable(ops, info))
		res.search = &search{model: model, info: info}
		return kv.State{}, nil
	}
	res.Verdict = Linearizable
	// Replay the linearization porcupine found; an unknown outcome leaves a
	// choice, and the choice with the most writes applied is kept (watches
	// are then checked against every write that may have happened).
	states := start
	for _, id := range longest(info.PartialLinearizations()) {
		states = a.step(states, ops[id].t.Request, ops[id].out)
	}
	if len(states) == 0 {
		return kv.State{}, fmt.Errorf("porcupine's linearization does not replay: a checker bug")
	}
	best := states[0]
	for _, s := range states[1:] {
		if s.Revision() > best.Revision() {
			best = s
		}
	}
	return best, nil
}

func longest(parts [][][]int) []int {
	var best []int
	for _, partition := range parts {
		for _, l := range partition {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	return best
}

// notLinearizable describes a failed check: the longest linearizable prefix
// porcupine found, and the earliest operation it could not extend it with.
func (res *Result) notLinearizable(ops []*op, info porcupine.LinearizationInfo) Violation {
	lin := longest(info.PartialLinearizations())
	in := make(map[int]bool, len(lin))
	for _, id := range lin {
		in[id] = true
	}
	var culprit *op
	for i, p := range ops {
		if !in[i] && (culprit == nil || p.call < culprit.call) {
			culprit = p
		}
	}
	v := Violation{Violation: spec.Violation{Property: spec.Linearizable}}
	if culprit == nil {
		v.Message = fmt.Sprintf("no linearization of the %d operations exists", len(ops))
		return v
	}
	v.Where = where(culprit.t)
	v.Keys = requestKeys(culprit.t.Request)
	if r := culprit.out.Response; r != nil && r.Revision != 0 {
		v.Revisions = []int64{r.Revision}
	}
	v.Message = fmt.Sprintf("no order of the %d operations explains every response; the longest linearizable prefix has %d, and the earliest operation left out is %s",
		len(ops), len(lin), describeOp(culprit.t.Request, culprit.out))
	return v
}

// where locates an operation in its trace.
func where(o *traces.Op) string { return fmt.Sprintf("op at line %d (client %d)", o.Line, o.Client) }

func requestKeys(r kv.Request) []string {
	switch {
	case r.Range != nil:
		return []string{r.Range.Key}
	case r.Put != nil:
		return []string{r.Put.Key}
	case r.Delete != nil:
		return []string{r.Delete.Key}
	case r.Txn != nil:
		var ks []string
		for _, c := range r.Txn.Compare {
			ks = append(ks, c.Key)
		}
		return ks
	}
	return nil
}
