package mutate

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// Subject is one trace the campaign mutates, with its verdict and what the
// operators need to know about it. Operators never modify Trace.
type Subject struct {
	// Name is the trace's file name.
	Name  string
	Trace *traces.Trace
	// Base is the checker's verdict on the unchanged trace.
	Base *linearizability.Result
	// H is the committed history of Base's linearization, nil when the
	// trace is not linearizable: semantic operators then have nothing to
	// judge against and do not apply.
	H *kv.History
	// KH replays H for the Kubernetes rules (zero when H is nil).
	KH k8s.History

	opts    linearizability.Options
	base    map[spec.Property]int
	profile *linearizability.Profile
	// watchClean: no base violation names the watch; semantic operators
	// mutate only clean watches, whose context they can trust.
	watchClean []bool
	// k8sClean: the informer run (if any) has no base violation.
	k8sClean bool
	// informer: the run has informer entries (not just lists and watches).
	informer    bool
	compactions []compactOp
	final       int64 // the compact revision of the final state
	cancelledAt map[int64]bool
	returns     []timeRev // known responses by return time
	winfo       map[int]*watchInfo
	// firstPage[i]: a later continuation names Kubernetes list i its first page.
	firstPage []bool

	strictOnce sync.Once
	strictBase *strictBase

	// What §2.7's evidence shows of the writes (forget-outcomes).
	evidenceOnce sync.Once
	shownPut     map[[2]string]bool
	shownDelete  map[string]map[int64]bool
}

// strictBase is the subject's verdict under the strict profile
// (docs/SPEC.md §9.3), for the operators of kind Strict.
type strictBase struct {
	opts linearizability.Options
	base map[spec.Property]int
	// watchClean[i]: no strict violation names watch i (nor a default one).
	watchClean []bool
	// k8sClean: the informer run has no strict violation.
	k8sClean bool
}

// strict returns the subject's verdict under the strict profile, checking
// it on first use; nil when the subject is not judged against etcd's and
// Kubernetes' guarantees alone (its header or the options name a profile),
// or not linearizable.
func (s *Subject) strict() *strictBase {
	s.strictOnce.Do(func() {
		if s.H == nil || s.Trace.Header.Profile != "" || s.opts.Profile != nil {
			return
		}
		p, err := linearizability.LookupProfile("strict")
		if err != nil {
			return
		}
		opts := s.opts
		opts.Profile = p
		res, err := linearizability.Check(s.Trace, opts)
		if err != nil || res.Verdict != linearizability.Linearizable {
			return
		}
		sb := &strictBase{opts: opts, base: counts(res), watchClean: make([]bool, len(s.Trace.Watches)), k8sClean: s.k8sClean}
		for i, w := range s.Trace.Watches {
			sb.watchClean[i] = s.watchClean[i]
			prefix := watchWhere(w)
			for _, v := range res.Violations {
				if strings.HasPrefix(v.Where, prefix) {
					sb.watchClean[i] = false
				}
			}
		}
		for _, v := range res.Violations {
			if v.Where == "informer run" {
				sb.k8sClean = false
			}
		}
		s.strictBase = sb
	})
	return s.strictBase
}

type compactOp struct {
	rev, call int64
	known     bool // success known (an error answer is left out)
}

type timeRev struct{ time, rev int64 }

// LoadCorpus reads every trace under dir (*.ndjson and *.ndjson.gz) and
// checks it once; see [NewSubject].
func LoadCorpus(dir string, opts linearizability.Options) ([]*Subject, error) {
	files, err := CorpusFiles(dir)
	if err != nil {
		return nil, err
	}
	return LoadFiles(files, opts)
}

// CorpusFiles lists the traces under dir (*.ndjson and *.ndjson.gz), sorted.
func CorpusFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.ndjson*"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no trace (*.ndjson, *.ndjson.gz) in %s", dir)
	}
	sort.Strings(files)
	return files, nil
}

// LoadFiles reads the trace files and checks each once; see [NewSubject].
// Each subject is named by its file's base name.
func LoadFiles(files []string, opts linearizability.Options) ([]*Subject, error) {
	out := make([]*Subject, len(files))
	errs := make([]error, len(files))
	// Read and check the traces concurrently, GOMAXPROCS at a time.
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t, err := traces.ReadFile(f)
			if err == nil {
				out[i], err = NewSubject(filepath.Base(f), t, opts)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// NewSubject checks t with opts (as `watchspec check` would, under the
// profile its header names) and prepares it for mutation. opts.Timeout
// bounds porcupine's search on every mutant (default 5 minutes, as for
// `watchspec check`: a mutant the search cannot decide is reported
// Undecided, so the bound must not depend on the machine's load).
func NewSubject(name string, t *traces.Trace, opts linearizability.Options) (*Subject, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	s := &Subject{Name: name, Trace: t, opts: opts, winfo: map[int]*watchInfo{}, cancelledAt: map[int64]bool{}}
	res, err := linearizability.Check(t, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	s.Base, s.base = res, counts(res)
	if s.profile, err = linearizability.LookupProfile(t.Header.Profile); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if res.Verdict == linearizability.Linearizable && res.History != nil {
		s.H = res.History
		if s.KH, err = k8s.NewHistory(s.H); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		s.final = s.H.CompactRevision()
	}
	s.watchClean = make([]bool, len(t.Watches))
	for i, w := range t.Watches {
		s.watchClean[i] = s.H != nil
		prefix := watchWhere(w)
		for _, v := range res.Violations {
			if strings.HasPrefix(v.Where, prefix) {
				s.watchClean[i] = false
			}
		}
		for _, r := range w.Responses {
			if r.Response.Canceled && r.Response.CompactRevision > 0 {
				s.cancelledAt[r.Response.CompactRevision] = true
			}
		}
	}
	s.k8sClean = s.H != nil && t.K8s != nil
	for _, v := range res.Violations {
		if v.Where == "informer run" {
			s.k8sClean = false
		}
	}
	if t.K8s != nil {
		for _, e := range t.K8s.Entries {
			if e.List == nil && e.WatchEvent == nil {
				s.informer = true
			}
		}
		s.firstPage = make([]bool, len(t.K8s.Lists))
		for i := range t.K8s.Lists {
			s.firstPage[i] = len(continuationsOf(t.K8s, i)) > 0
		}
	}
	for _, o := range t.Ops {
		if o.Request.Compact != nil && (o.Response == nil || o.Response.Err == nil) {
			s.compactions = append(s.compactions, compactOp{rev: o.Request.Compact.Revision, call: o.Call, known: o.Response != nil})
		}
		if o.Response != nil && o.Response.Err == nil {
			s.returns = append(s.returns, timeRev{o.Return, o.Response.Revision})
		}
	}
	sort.Slice(s.returns, func(i, j int) bool { return s.returns[i].time < s.returns[j].time })
	for i := 1; i < len(s.returns); i++ {
		s.returns[i].rev = max(s.returns[i].rev, s.returns[i-1].rev)
	}
	// Read off every clean watch now: afterwards a Subject is read-only,
	// and operators may run on it concurrently.
	for i := range t.Watches {
		if s.watchClean[i] {
			s.winfo[i] = s.readWatch(i)
		}
	}
	return s, nil
}

// watchWhere is how the checker's violations name a watch.
func watchWhere(w *traces.Watch) string {
	return fmt.Sprintf("watch %d of client %d (line %d)", w.ID, w.Client, w.Line)
}

func counts(res *linearizability.Result) map[spec.Property]int {
	m := map[spec.Property]int{}
	for _, v := range res.Violations {
		m[v.Property]++
	}
	return m
}

// Properties returns the properties the base verdict breaks, sorted.
func (s *Subject) Properties() []spec.Property { return keys(s.base) }

func keys(m map[spec.Property]int) []spec.Property {
	var ps []spec.Property
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// allows reports whether the subject's profile has the named allowance.
func (s *Subject) allows(name string) bool { return s.profile.Allows(name) }

// checkerCompact is the compact revision the checker's watch validators
// know at time t: compactions known to have succeeded, and those of unknown
// outcome the final state or a cancel shows applied, from their call on
// (linearizability.validateWatches).
func (s *Subject) checkerCompact(t int64) int64 {
	if s.allows(linearizability.IgnoresCompaction) {
		return -1
	}
	c := int64(-1)
	for _, o := range s.compactions {
		if o.call <= t && (o.known || o.rev <= s.final || s.cancelledAt[o.rev]) {
			c = max(c, o.rev)
		}
	}
	return c
}

// anyCompact is the highest compaction that may have taken effect by time
// t, whatever its outcome. Where it and checkerCompact disagree, the SPEC's
// answer depends on what the recording does not say, and operators choose
// another site.
func (s *Subject) anyCompact(t int64) int64 {
	if s.allows(linearizability.IgnoresCompaction) {
		return -1
	}
	c := int64(-1)
	for _, o := range s.compactions {
		if o.call <= t {
			c = max(c, o.rev)
		}
	}
	return c
}

// maxCompact is the highest compaction anyone asked for in the trace.
func (s *Subject) maxCompact() int64 {
	c := int64(-1)
	for _, o := range s.compactions {
		c = max(c, o.rev)
	}
	return c
}

// committedBy returns a revision known committed at time t: the highest
// header of a response returned by then.
func (s *Subject) committedBy(t int64) int64 {
	i := sort.Search(len(s.returns), func(i int) bool { return s.returns[i].time > t })
	if i == 0 {
		return 0
	}
	return s.returns[i-1].rev
}

// head is the highest committed revision.
func (s *Subject) head() int64 { return s.H.Head() }
