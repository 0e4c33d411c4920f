// Package linearizability checks a recorded trace against the specification:
// its key-value operations for linearizability (docs/SPEC.md §2.7) against
// the model's kv.Step, the response revisions of its writes (§2.6), and then
// every watch stream (§3) against the committed history the linearization
// found.
//
// The linearizability check has two stages. The first exploits the store's
// revisions, which make most histories "traceable": every write's response
// names the revision it created, every read names the revision it saw. Those
// revisions give a candidate order — writes by revision, each followed by the
// operations that observed it, by call time — which is checked against real
// time and replayed through kv.Step. When the replay answers every operation
// as recorded, that order is a linearization, found in O(n log n). Only when
// it fails does the second stage run porcupine (github.com/anishathalye/porcupine)
// on the model of [NewModel], which searches every order and is the judge:
// it either finds a linearization or proves there is none, and then its
// visualisation is written as HTML. A history the first stage accepts is
// therefore always linearizable; one it rejects is decided by porcupine.
package linearizability

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// Options tune [Check].
type Options struct {
	// Timeout bounds porcupine's search (default 5 minutes). When it runs
	// out the verdict is Unknown.
	Timeout time.Duration
	// HTMLDir, when set, receives porcupine's visualisation of a history that
	// is not linearizable, as <trace name>.html.
	HTMLDir string
	// Progress, when set, is told what the check is doing.
	Progress func(format string, args ...any)
	// Profile is the profile to check under (docs/SPEC.md §9): nil means
	// the one the trace's header names, if any; [FullConformance] means
	// none, whatever the header says. Use [ProfileOption] to turn a name
	// given on a command line into this option, or build a profile from
	// [Allowances] and [Expectations].
	Profile *Profile
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
	// HTML is the path of the visualisation written, if any.
	HTML string
	// Ops, Watches and WatchResponses count what the trace held.
	Ops, Watches, WatchResponses int
	// Informer says the trace holds an informer run (docs/SPEC.md §4–§5).
	Informer bool
	// Profile is the profile the trace was checked under (nil: full
	// conformance).
	Profile *Profile
}

// op is one operation prepared for checking.
type op struct {
	t      *traces.Op
	out    Output
	call   int64
	ret    int64 // math.MaxInt64 when the outcome is unknown and unpinned
	bucket int64 // the revision the revision-order stage places it at
	key    int64 // its place among the operations of that revision
}

// Check checks one trace. It returns an error only when the trace cannot be
// checked at all (for instance it names an unknown profile); broken
// properties are in the Result.
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
	seen := observedPuts(t)
	res.checkWriteRevisions(t, seen)

	ops := prepare(t, seen, a)
	progress("%s: linearizing %d operations", t.Name, len(ops))
	res.Checks[spec.Linearizable]++
	start := kv.Start(t.Header.BaseRevision)
	final, ok := revisionOrder(ops, start, a)
	if ok {
		res.Verdict, res.Method = Linearizable, "revision order"
	} else {
		progress("%s: revision order failed; searching with porcupine (timeout %v)", t.Name, opts.Timeout)
		res.Method = "porcupine"
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
					progress("%s: porcupine still searching (%.0fs of %v)", t.Name, time.Since(started).Seconds(), opts.Timeout)
				}
			}
		}()
		var err error
		final, err = res.porcupine(ops, start, opts, a)
		close(done)
		if err != nil {
			return nil, err
		}
	}
	if res.Verdict != Linearizable {
		return res, nil
	}
	progress("%s: validating %d watches (%d responses)", t.Name, len(t.Watches), res.WatchResponses)
	res.validateWatches(t, final, a, expectOf(profile))
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

// observedPuts maps each (key, value) a watch delivered in a PUT event to the
// revisions it was delivered at.
func observedPuts(t *traces.Trace) map[[2]string][]int64 {
	seen := map[[2]string][]int64{}
	for _, w := range t.Watches {
		for _, r := range w.Responses {
			for _, e := range r.Response.Events {
				if e.Type != kv.Put {
					continue
				}
				k := [2]string{e.KV.Key, e.KV.Value}
				if revs := seen[k]; len(revs) == 0 || revs[len(revs)-1] != e.KV.ModRevision {
					seen[k] = append(revs, e.KV.ModRevision)
				}
			}
		}
	}
	return seen
}

// puts lists the puts a request makes (a transaction's in both branches).
func puts(r kv.Request) []kv.PutRequest {
	switch {
	case r.Put != nil:
		return []kv.PutRequest{*r.Put}
	case r.Txn != nil:
		var ps []kv.PutRequest
		for _, o := range append(append([]kv.Op(nil), r.Txn.Success...), r.Txn.Failure...) {
			if o.Put != nil {
				ps = append(ps, *o.Put)
			}
		}
		return ps
	}
	return nil
}

// checkWriteRevisions decides §2.6 WriteRevision from what watches saw: a
// successful put whose unique value a watch delivered must have been
// answered with the revision the watch delivered it at. It needs no
// linearization, so it names the fault even when the history is not
// linearizable.
func (res *Result) checkWriteRevisions(t *traces.Trace, seen map[[2]string][]int64) {
	if !t.Header.UniqueValues {
		return
	}
	for i := range t.Ops {
		o := &t.Ops[i]
		if o.Response == nil || o.Response.Err != nil {
			continue
		}
		var ps []kv.PutRequest
		switch {
		case o.Request.Put != nil:
			ps = puts(o.Request)
		case o.Request.Txn != nil && o.Response.Txn != nil:
			branch := o.Request.Txn.Failure
			if o.Response.Txn.Succeeded {
				branch = o.Request.Txn.Success
			}
			ps = puts(kv.Request{Txn: &kv.TxnRequest{Success: branch}})
		}
		for _, p := range ps {
			revs := seen[[2]string{p.Key, p.Value}]
			if len(revs) == 0 {
				continue
			}
			res.Checks[spec.WriteRevision]++
			if len(revs) == 1 && revs[0] == o.Response.Revision {
				continue
			}
			res.Violations = append(res.Violations, Violation{
				Violation: spec.Violation{Property: spec.WriteRevision, Revisions: append([]int64{o.Response.Revision}, revs...), Keys: []string{p.Key},
					Message: fmt.Sprintf("put of %q answered revision %d, but watches delivered its value at revision(s) %v", p.Key, o.Response.Revision, revs)},
				Where: fmt.Sprintf("op at line %d (client %d)", o.Line, o.Client),
			})
		}
	}
}

func isRead(r kv.Request) bool {
	if r.Range != nil {
		return true
	}
	if r.Txn == nil {
		return false
	}
	for _, o := range append(append([]kv.Op(nil), r.Txn.Success...), r.Txn.Failure...) {
		if o.Range == nil {
			return false
		}
	}
	return true
}

// prepare turns the trace's operations into checker operations. Reads whose
// outcome is unknown are dropped (they changed nothing and showed nothing). A
// write of unknown outcome whose unique value a watch delivered is pinned to
// that revision, and its return time bounded by the first operation known to
// have seen that revision (the write took effect before it).
func prepare(t *traces.Trace, seen map[[2]string][]int64, a allow) []*op {
	var ops []*op
	for i := range t.Ops {
		o := &t.Ops[i]
		p := &op{t: o, call: o.Call, ret: o.Return}
		switch {
		case o.Response != nil:
			p.out.Response = a.normalize(o.Response)
		case isRead(o.Request):
			continue
		default:
			p.ret = math.MaxInt64
			if t.Header.UniqueValues {
				for _, put := range puts(o.Request) {
					if revs := seen[[2]string{put.Key, put.Value}]; len(revs) == 1 {
						p.out.Pinned = revs[0]
						break
					}
				}
			}
		}
		ops = append(ops, p)
	}
	ops = resolveUnknown(t, ops)
	// Bound the return of pinned writes: revision r existed once an operation
	// that observed a revision ≥ r returned.
	byRev := make([]*op, 0, len(ops))
	for _, p := range ops {
		if p.out.Response != nil && p.out.Response.Err == nil {
			byRev = append(byRev, p)
		}
	}
	sort.Slice(byRev, func(i, j int) bool { return byRev[i].out.Response.Revision < byRev[j].out.Response.Revision })
	suffixMin := make([]int64, len(byRev)+1)
	suffixMin[len(byRev)] = math.MaxInt64
	for i := len(byRev) - 1; i >= 0; i-- {
		suffixMin[i] = min(suffixMin[i+1], byRev[i].ret)
	}
	for _, p := range ops {
		if p.out.Pinned == 0 {
			continue
		}
		i := sort.Search(len(byRev), func(i int) bool { return byRev[i].out.Response.Revision >= p.out.Pinned })
		if bound := suffixMin[i]; bound != math.MaxInt64 {
			p.ret = max(bound, p.call)
		}
	}
	return ops
}

// revisionOrder tries to linearize in the order the revisions dictate; see
// the package documentation. It returns the final state when that order is
// a linearization.
func revisionOrder(ops []*op, start kv.State, a allow) (kv.State, bool) {
	// Revisions known to exist, to place operations without one.
	var known []*op
	for _, p := range ops {
		if p.out.Response != nil && p.out.Response.Err == nil {
			known = append(known, p)
		}
	}
	sort.Slice(known, func(i, j int) bool { return known[i].ret < known[j].ret })
	maxRevReturnedBy := make([]int64, len(known)) // max revision among known[0..i]
	for i, p := range known {
		maxRevReturnedBy[i] = p.out.Response.Revision
		if i > 0 {
			maxRevReturnedBy[i] = max(maxRevReturnedBy[i], maxRevReturnedBy[i-1])
		}
	}
	byCall := append([]*op(nil), known...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
	minRevCalledFrom := make([]int64, len(byCall)+1) // min revision among byCall[i..]
	minRevCalledFrom[len(byCall)] = math.MaxInt64
	for i := len(byCall) - 1; i >= 0; i-- {
		minRevCalledFrom[i] = min(minRevCalledFrom[i+1], byCall[i].out.Response.Revision)
	}
	// lower: the highest revision returned before time t; upper: the lowest
	// revision of an operation called after time t.
	lower := func(t int64) int64 {
		i := sort.Search(len(known), func(i int) bool { return known[i].ret >= t })
		if i == 0 {
			return start.Revision()
		}
		return maxRevReturnedBy[i-1]
	}
	upper := func(t int64) int64 {
		i := sort.Search(len(byCall), func(i int) bool { return byCall[i].call > t })
		return minRevCalledFrom[i]
	}
	// createdHere reports whether p's outcome created the revision it is
	// placed at.
	createdHere := func(p *op) bool {
		if p.out.Pinned > 0 {
			return true
		}
		r := p.out.Response
		if r == nil || r.Err != nil || r.Revision != p.bucket {
			return false
		}
		switch {
		case r.Put != nil:
			return true
		case r.Delete != nil:
			return r.Delete.Deleted > 0
		case r.Txn != nil:
			for _, o := range r.Txn.Responses {
				if o.Put != nil || (o.Delete != nil && o.Delete.Deleted > 0) {
					return true
				}
			}
		}
		return false
	}
	creator := map[int64]*op{}
	var order []*op
	for _, p := range ops {
		p.key = p.call
		switch {
		case p.out.Pinned > 0:
			p.bucket = p.out.Pinned
		case p.out.Response == nil:
			continue // unknown and unseen: taken as not applied
		case p.out.Response.Err == nil:
			p.bucket = p.out.Response.Revision
		default:
			p.bucket = -1 // placed below, once the creators are known
		}
		if p.bucket > 0 && createdHere(p) {
			creator[p.bucket] = p
		}
		order = append(order, p)
	}
	for _, p := range order {
		if p.bucket != -1 {
			continue
		}
		if !kv.SameError(p.out.Response.Err, kv.ErrCompacted) {
			// Fails because a revision does not exist yet, or whatever the
			// state: as early as real time allows.
			p.bucket = lower(p.call)
			continue
		}
		// Fails because compaction already happened: as late as real time
		// allows — after every operation called before it returned, in the
		// last revision whose creator was called before it returned.
		u := upper(p.ret)
		switch c, ok := creator[u]; {
		case u == math.MaxInt64:
			p.bucket, p.key = lower(math.MaxInt64), math.MaxInt64
		case ok && c.call >= p.ret:
			p.bucket, p.key = u-1, math.MaxInt64
		default:
			p.bucket, p.key = u, p.ret
		}
	}
	// A compaction changes no revision, only which reads succeed: within its
	// revision it goes as late as real time allows — at its return, so that
	// a read of older history called before it returned may still precede
	// it — but before any operation of that revision that failed on
	// compacted history and returned after the compaction was called.
	failedCompacted := map[int64][]*op{}
	for _, p := range order {
		if r := p.out.Response; r != nil && kv.SameError(r.Err, kv.ErrCompacted) {
			failedCompacted[p.bucket] = append(failedCompacted[p.bucket], p)
		}
	}
	isCompaction := func(p *op) bool {
		return p.t.Request.Compact != nil && p.out.Response != nil && p.out.Response.Err == nil
	}
	for _, p := range order {
		if !isCompaction(p) {
			continue
		}
		p.key = p.ret
		for _, f := range failedCompacted[p.bucket] {
			if f.key >= p.call {
				p.key = min(p.key, f.key)
			}
		}
	}
	// Within a revision: the write that created it first, then the rest by
	// their key (the call time; for a read that failed on compacted history,
	// its return; for a compaction, as above), a compaction before what has
	// the same key.
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.bucket != b.bucket {
			return a.bucket < b.bucket
		}
		if ca, cb := createdHere(a), createdHere(b); ca != cb {
			return ca
		}
		if a.key != b.key {
			return a.key < b.key
		}
		return isCompaction(a) && !isCompaction(b)
	})
	// Real time: linearization points p_i = max(p_{i-1}, call_i) must not pass return_i.
	point := int64(math.MinInt64)
	for _, p := range order {
		point = max(point, p.call)
		if point > p.ret {
			return kv.State{}, false
		}
	}
	states := States{start}
	for _, p := range order {
		if states = a.step(states, p.t.Request, p.out); len(states) != 1 {
			return kv.State{}, false
		}
	}
	return states[0], true
}

// porcupine decides linearizability by search, sets the verdict, writes the
// visualisation of a failure, and returns the final state of a linearization.
func (res *Result) porcupine(ops []*op, start kv.State, opts Options, a allow) (kv.State, error) {
	history := make([]porcupine.Operation, len(ops))
	for i, p := range ops {
		history[i] = porcupine.Operation{ClientId: p.t.Client, Input: p.t.Request, Call: p.call, Output: p.out, Return: p.ret, Metadata: i}
	}
	model := a.model(start)
	model.DescribeOperationMetadata = func(info any) string {
		p := ops[info.(int)]
		return fmt.Sprintf("line %d", p.t.Line)
	}
	result, info := porcupine.CheckOperationsVerbose(model, history, opts.Timeout)
	switch result {
	case porcupine.Unknown:
		res.Verdict = Unknown
		return kv.State{}, nil
	case porcupine.Illegal:
		res.Verdict = NotLinearizable
		res.Violations = append(res.Violations, res.notLinearizable(ops, info))
		if opts.HTMLDir != "" {
			if err := os.MkdirAll(opts.HTMLDir, 0o755); err != nil {
				return kv.State{}, err
			}
			path := filepath.Join(opts.HTMLDir, filepath.Base(res.Trace)+".html")
			if err := porcupine.VisualizePath(model, info, path); err != nil {
				return kv.State{}, fmt.Errorf("writing the visualisation: %v", err)
			}
			res.HTML = path
		}
		return kv.State{}, nil
	}
	res.Verdict = Linearizable
	// Replay the linearization porcupine found; an unknown outcome leaves a
	// choice, and the choice with the most writes applied is kept (watches
	// are then checked against every write that may have happened).
	states := States{start}
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
	v.Where = fmt.Sprintf("op at line %d (client %d)", culprit.t.Line, culprit.t.Client)
	v.Keys = requestKeys(culprit.t.Request)
	if r := culprit.out.Response; r != nil && r.Revision != 0 {
		v.Revisions = []int64{r.Revision}
	}
	v.Message = fmt.Sprintf("no order of the %d operations explains every response; the longest linearizable prefix has %d, and the earliest operation left out is %s",
		len(ops), len(lin), describeOp(culprit.t.Request, culprit.out))
	return v
}

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

// validateWatches checks every watch stream against the committed history of
// final. Compactions are made known to the validators at their call time (the
// most lenient choice, see docs/SPEC.md §3), and responses are fed in the
// order they were received. Under IgnoresCompaction no compaction is made
// known (none took effect); under UntrackedVersions the validators see every
// Version as 0, in the history and in the responses.
func (res *Result) validateWatches(t *traces.Trace, final kv.State, a allow, expect watch.Expectations) {
	full := final.History()
	h := &kv.History{}
	h.SetBase(full.Base())
	for _, c := range full.Commits() {
		if a.untrackedVersions {
			z := kv.Commit{Revision: c.Revision, Events: make([]kv.Event, len(c.Events))}
			for i, e := range c.Events {
				z.Events[i] = zeroEvent(e)
			}
			c = z
		}
		h.Append(c)
	}
	h.Skip(full.Head())
	res.History = full
	type item struct {
		time    int64
		compact int64
		w       int
		r       int
	}
	var timeline []item
	// Compaction revisions a watch was cancelled with: evidence that a
	// compaction of unknown outcome at that revision took effect.
	cancelledAt := map[int64]bool{}
	for _, w := range t.Watches {
		for _, r := range w.Responses {
			if r.Response.Canceled && r.Response.CompactRevision > 0 {
				cancelledAt[r.Response.CompactRevision] = true
			}
		}
	}
	for _, o := range t.Ops {
		if o.Request.Compact == nil || a.ignoreCompaction {
			continue
		}
		rev := o.Request.Compact.Revision
		applied := o.Response != nil && o.Response.Err == nil
		if o.Response == nil && (rev <= final.CompactRevision() || cancelledAt[rev]) {
			// Unknown outcome, but the final state is compacted at least
			// this far, or a watch was cancelled for exactly this
			// compaction: it took effect (after its call).
			applied = true
		}
		if applied {
			timeline = append(timeline, item{time: o.Call, compact: rev, w: -1})
		}
	}
	validators := make([]*watch.Validator, len(t.Watches))
	for i, w := range t.Watches {
		validators[i] = watch.NewValidatorWith(h, w.Request, watch.Config{Expect: expect})
		for j, r := range w.Responses {
			timeline = append(timeline, item{time: r.Time, w: i, r: j})
		}
	}
	sort.SliceStable(timeline, func(i, j int) bool {
		if timeline[i].time != timeline[j].time {
			return timeline[i].time < timeline[j].time
		}
		return timeline[i].w < 0 && timeline[j].w >= 0 // compactions first
	})
	for _, it := range timeline {
		if it.w < 0 {
			if it.compact > h.CompactRevision() {
				_ = h.Compact(it.compact)
			}
			continue
		}
		w := t.Watches[it.w]
		r := w.Responses[it.r]
		resp := r.Response
		if a.untrackedVersions && len(resp.Events) > 0 {
			evs := make([]kv.Event, len(resp.Events))
			for i, e := range resp.Events {
				evs[i] = zeroEvent(e)
			}
			resp.Events = evs
		}
		for _, v := range validators[it.w].Observe(resp) {
			res.Violations = append(res.Violations, Violation{Violation: v,
				Where: fmt.Sprintf("watch %d of client %d (line %d), response at line %d", w.ID, w.Client, w.Line, r.Line)})
		}
	}
	for _, v := range validators {
		for p, n := range v.Checks() {
			res.Checks[p] += n
		}
	}
}
