package mutate

import (
	"fmt"
	"math/rand"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
)

// Outcome is how the checker answered one mutant.
type Outcome string

const (
	// Caught: a semantic mutant failed with exactly an expected set of properties.
	Caught Outcome = "caught"
	// OtherName: a semantic mutant failed, but not (only) under an expected name.
	OtherName Outcome = "other name"
	// Missed: a semantic mutant passed every property that passed before.
	Missed Outcome = "missed"
	// Kept: an equivalence or weakening mutant kept its verdict.
	Kept Outcome = "kept"
	// FalsePositive: an equivalence or weakening mutant failed a property
	// that held before.
	FalsePositive Outcome = "false positive"
	// Lost: an equivalence mutant no longer fails a property that failed before.
	Lost Outcome = "lost verdict"
	// Undecided: porcupine timed out.
	Undecided Outcome = "undecided"
	// Error: the checker refused the mutant (a bug of the operator or the checker).
	Error Outcome = "error"
)

// Good reports whether the outcome is what the operator's kind demands.
func (o Outcome) Good() bool { return o == Caught || o == Kept }

// Result is the checker's answer to one mutant, judged.
type Result struct {
	Mutant  *Mutant
	Outcome Outcome
	// New lists the properties with more violations than in the base
	// verdict; Gone those that failed before and now hold.
	New, Gone []spec.Property
	// Default lists, for a strict mutant, the properties the default check
	// (no profile) found new: it must find none.
	Default []spec.Property
	// Violations are the mutant's violations of the New (and Default) properties.
	Violations []linearizability.Violation
	Err        error
}

func (r Result) String() string {
	m := r.Mutant
	s := fmt.Sprintf("%s [%s] on %s (seed %d): %s", m.Op.Name, m.Op.Kind, m.Subject.Name, m.Seed, r.Outcome)
	if m.Op.Kind == Semantic || m.Op.Kind == Strict {
		s += fmt.Sprintf("; expected %s", expectString(m.Expect))
	}
	if m.Op.Kind == Strict {
		s += " under the strict profile, nothing by default"
	}
	if len(r.New) > 0 {
		s += fmt.Sprintf("; new FAIL %v", r.New)
	}
	if len(r.Default) > 0 {
		s += fmt.Sprintf("; new FAIL by default %v", r.Default)
	}
	if len(r.Gone) > 0 {
		s += fmt.Sprintf("; no longer FAIL %v", r.Gone)
	}
	if r.Err != nil {
		s += fmt.Sprintf("; error: %v", r.Err)
	}
	s += "\n    change: " + m.What
	if len(m.Tags) > 0 {
		s += fmt.Sprintf("\n    tags: %v", m.Tags)
	}
	for _, v := range r.Violations {
		s += fmt.Sprintf("\n    FAIL %s %s: %s", v.Property, v.Where, v.Message)
	}
	return s
}

// Judge checks the mutant and judges the verdict against its kind. A strict
// mutant is checked twice: under the strict profile, where it must be
// caught, and by default, where it must add nothing (a new default
// violation is a false positive: the change breaks no guarantee of etcd or
// Kubernetes).
func Judge(m *Mutant) Result {
	s := m.Subject
	if m.Err != nil {
		return Result{Mutant: m, Outcome: Error, Err: m.Err}
	}
	opts, base := s.opts, s.base
	if m.Op.Kind == Strict {
		sb := s.strict()
		if sb == nil {
			return Result{Mutant: m, Outcome: Error, Err: fmt.Errorf("%s cannot be checked under the strict profile", s.Name)}
		}
		opts, base = sb.opts, sb.base
	}
	r, res, err := compare(m, opts, base)
	if err != nil {
		return Result{Mutant: m, Outcome: Error, Err: err}
	}
	if res.Verdict == linearizability.Unknown {
		return Result{Mutant: m, Outcome: Undecided}
	}
	switch m.Op.Kind {
	case Strict:
		switch {
		case len(r.New) == 0:
			r.Outcome = Missed
		case slices.ContainsFunc(m.Expect, func(set []spec.Property) bool { return sameSet(set, r.New) }):
			r.Outcome = Caught
		default:
			r.Outcome = OtherName
		}
		d, dres, err := compare(m, s.opts, s.base)
		switch {
		case err != nil:
			return Result{Mutant: m, Outcome: Error, Err: err}
		case dres.Verdict == linearizability.Unknown:
			return Result{Mutant: m, Outcome: Undecided}
		case len(d.New) > 0:
			r.Outcome, r.Default, r.Violations = FalsePositive, d.New, append(r.Violations, d.Violations...)
		}
	case Semantic:
		switch {
		case len(r.New) == 0:
			r.Outcome = Missed
		case slices.ContainsFunc(m.Expect, func(set []spec.Property) bool { return sameSet(set, r.New) }):
			r.Outcome = Caught
		default:
			r.Outcome = OtherName
		}
	case Equivalence, Weakening:
		switch {
		case m.Op.Kind == Weakening && renamedSkip(m, r):
			r.Outcome = Kept
		case len(r.New) > 0:
			r.Outcome = FalsePositive
		case len(r.Gone) > 0 && m.Op.Kind == Equivalence:
			r.Outcome = Lost
		default:
			r.Outcome = Kept
		}
	}
	return r
}

// compare checks the mutant's trace with opts and compares the verdict with
// base: the properties with more violations (New), and those that failed
// before and now hold (Gone).
func compare(m *Mutant, opts linearizability.Options, base map[spec.Property]int) (Result, *linearizability.Result, error) {
	res, err := linearizability.Check(m.Trace, opts)
	if err != nil {
		return Result{}, nil, err
	}
	r := Result{Mutant: m}
	if res.Verdict == linearizability.Unknown {
		return r, res, nil
	}
	got := counts(res)
	for p, n := range got {
		if n > base[p] {
			r.New = append(r.New, p)
		}
	}
	for p := range base {
		if got[p] == 0 {
			r.Gone = append(r.Gone, p)
		}
	}
	slices.Sort(r.New)
	slices.Sort(r.Gone)
	for _, v := range res.Violations {
		if slices.Contains(r.New, v.Property) {
			r.Violations = append(r.Violations, v)
		}
	}
	return r, res, nil
}

// renamedSkip reports whether a weakening mutant only renamed a skip: it
// removed the evidence that a compaction took effect (a compaction's
// outcome, a compaction cancel), and a skip the checker named
// CompactedCancel now has another of §3's skip names; or it removed what
// made a progress notification bind (§3.6), and a skip it named
// Bookmarkable is now named by the event that reveals it. The SPEC names a
// skip by what is known (§3, "One fault, one name", "Compaction
// knowledge"): that is no new fault.
func renamedSkip(m *Mutant, r Result) bool {
	var was spec.Property
	switch {
	case slices.Contains(m.Tags, "compaction") || slices.Contains(m.Tags, "drops-cancel"):
		was = spec.CompactedCancel
	case slices.Contains(m.Tags, "binding"):
		was = spec.Bookmarkable
	default:
		return false
	}
	if len(r.New) == 0 || !slices.Contains(r.Gone, was) {
		return false
	}
	for _, p := range r.New {
		if !slices.Contains([]spec.Property{spec.Reliable, spec.Resumable, spec.StartRevision, spec.Bookmarkable}, p) {
			return false
		}
	}
	return true
}

func sameSet(a, b []spec.Property) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// Config is a campaign's draw.
type Config struct {
	// Seed seeds every mutant (see [Seed]).
	Seed int64
	// N is the number of mutants to draw per operator.
	N int
	// Only, when set, keeps the operators whose name it matches.
	Only *regexp.Regexp
	// Progress, when set, hears about every mutant judged.
	Progress func(Result)
}

// Report is a campaign's outcome.
type Report struct {
	Seed    int64
	N       int
	Results []Result
	// Unapplied counts, per operator, the draws no subject gave anything to change.
	Unapplied map[string]int
	// Operators are the operators drawn, in order.
	Operators []*Operator
}

// Run draws cfg.N mutants of every operator over the subjects. Draw i of an
// operator starts at a subject chosen by its seed and takes the first
// subject, in order from there, that gives the operator something to change,
// so every subject is tried across the draws. Mutants are made in order and
// judged concurrently (GOMAXPROCS at a time) as they are made; the report is
// the same whatever the schedule. A mutant judged as its kind demands keeps
// no trace in the report (Result.Mutant.Trace is nil; its seed remakes it):
// the campaign holds at a time only the traces being judged and those of
// failures, not one per draw (make mutate's 50 draws per operator over the
// whole corpus held 7.5 GB).
func Run(subjects []*Subject, ops []*Operator, cfg Config) *Report {
	rep := &Report{Seed: cfg.Seed, N: cfg.N, Unapplied: map[string]int{}}
	type job struct {
		i int
		m *Mutant
	}
	work := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[int]Result{}
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				r := Judge(j.m)
				if r.Outcome.Good() {
					j.m.Trace = nil
				}
				mu.Lock()
				results[j.i] = r
				if cfg.Progress != nil {
					cfg.Progress(r)
				}
				mu.Unlock()
			}
		}()
	}
	n := 0
	for _, op := range ops {
		if cfg.Only != nil && !cfg.Only.MatchString(op.Name) {
			continue
		}
		rep.Operators = append(rep.Operators, op)
		for i := range cfg.N {
			seed := Seed(cfg.Seed, op.Name, i)
			start := rand.New(rand.NewSource(seed)).Intn(len(subjects))
			applied := false
			for k := range subjects {
				if m, ok := op.Apply(subjects[(start+k)%len(subjects)], seed); ok {
					work <- job{n, m}
					n++
					applied = true
					break
				}
			}
			if !applied {
				rep.Unapplied[op.Name]++
			}
		}
	}
	close(work)
	wg.Wait()
	rep.Results = make([]Result, n)
	for i, r := range results {
		rep.Results[i] = r
	}
	return rep
}

// compareSections orders SPEC sections ("§3.10" after "§3.9").
func compareSections(a, b string) int {
	pa := strings.Split(strings.TrimPrefix(a, "§"), ".")
	pb := strings.Split(strings.TrimPrefix(b, "§"), ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, errx := strconv.Atoi(pa[i])
		y, erry := strconv.Atoi(pb[i])
		switch {
		case errx != nil || erry != nil:
			if c := strings.Compare(pa[i], pb[i]); c != 0 {
				return c
			}
		case x != y:
			return x - y
		}
	}
	return len(pa) - len(pb)
}

// Failures returns the results whose outcome is not what their kind demands.
func (r *Report) Failures() []Result {
	var out []Result
	for _, res := range r.Results {
		if !res.Outcome.Good() {
			out = append(out, res)
		}
	}
	return out
}

// Table renders the per-operator counts, then, per expected property, how
// many semantic mutants expected it and how many of those were caught.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mutation campaign: seed %d, %d draws per operator\n\n", r.Seed, r.N)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "operator\tkind\tapplied\ttraces\tcaught\tother name\tmissed\tfalse pos.\tlost\tundecided\terror\t")
	type row struct {
		applied int
		traces  map[string]bool
		n       map[Outcome]int
	}
	rows := map[string]*row{}
	for _, op := range r.Operators {
		rows[op.Name] = &row{traces: map[string]bool{}, n: map[Outcome]int{}}
	}
	type propKey struct {
		p      spec.Property
		strict bool
	}
	byProp := map[propKey][2]int{}
	for _, res := range r.Results {
		rw := rows[res.Mutant.Op.Name]
		rw.applied++
		rw.traces[res.Mutant.Subject.Name] = true
		rw.n[res.Outcome]++
		if k := res.Mutant.Op.Kind; k == Semantic || k == Strict {
			seen := map[spec.Property]bool{}
			for _, set := range res.Mutant.Expect {
				for _, p := range set {
					if seen[p] {
						continue
					}
					seen[p] = true
					key := propKey{p, k == Strict}
					c := byProp[key]
					c[0]++
					if res.Outcome == Caught {
						c[1]++
					}
					byProp[key] = c
				}
			}
		}
	}
	dash := func(ok bool, n int) string {
		if !ok {
			return "-"
		}
		return fmt.Sprint(n)
	}
	tot := map[Kind]map[Outcome]int{}
	for _, op := range r.Operators {
		rw := rows[op.Name]
		sem := op.Kind == Semantic || op.Kind == Strict
		if tot[op.Kind] == nil {
			tot[op.Kind] = map[Outcome]int{}
		}
		for o, n := range rw.n {
			tot[op.Kind][o] += n
		}
		tot[op.Kind]["applied"] += rw.applied
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", op.Name, op.Kind, rw.applied, len(rw.traces),
			dash(sem, rw.n[Caught]), dash(sem, rw.n[OtherName]), dash(sem, rw.n[Missed]),
			dash(op.Kind != Semantic, rw.n[FalsePositive]), dash(op.Kind == Equivalence, rw.n[Lost]), rw.n[Undecided], rw.n[Error])
	}
	for _, k := range []Kind{Semantic, Strict, Equivalence, Weakening} {
		t := tot[k]
		if t == nil {
			continue
		}
		sem := k == Semantic || k == Strict
		fmt.Fprintf(tw, "TOTAL %s\t\t%d\t\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", k, t["applied"],
			dash(sem, t[Caught]), dash(sem, t[OtherName]), dash(sem, t[Missed]),
			dash(k != Semantic, t[FalsePositive]), dash(k == Equivalence, t[Lost]), t[Undecided], t[Error])
	}
	tw.Flush()
	if len(r.Unapplied) > 0 {
		var names []string
		for n, c := range r.Unapplied {
			names = append(names, fmt.Sprintf("%s (%d)", n, c))
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "\ndraws that found nothing to change in any trace: %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, "\nsemantic and strict mutants per expected property (caught / expected):\n")
	var props []propKey
	for p := range byProp {
		props = append(props, p)
	}
	sort.Slice(props, func(i, j int) bool {
		a, b := props[i], props[j]
		if c := compareSections(a.p.Section(), b.p.Section()); c != 0 {
			return c < 0
		}
		return a.p < b.p || a.p == b.p && !a.strict && b.strict
	})
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, p := range props {
		label := string(p.p)
		if p.strict {
			label += " (strict profile)"
		}
		fmt.Fprintf(tw, "  %s %s\t%d / %d\n", p.p.Section(), label, byProp[p][1], byProp[p][0])
	}
	tw.Flush()
	return b.String()
}
