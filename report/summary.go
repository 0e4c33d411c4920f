package report

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// SchemaJSON is the JSON Schema (draft 2020-12) of a [Summary] as
// [Summary.WriteJSON] writes it: summary.schema.json in this package's
// directory, documented in docs/REPORTS.md.
//
//go:embed summary.schema.json
var SchemaJSON []byte

// The values of a summary's "format" and "version" fields.
const (
	Format  = "watchspec-summary"
	Version = 1
)

// The exit statuses a summary reports, worst last: the exit codes of
// `watchspec check` and `watchspec conform`.
const (
	StatusOK        = 0 // every property holds
	StatusViolated  = 1 // a property is violated, or linearizability is undecided
	StatusMalformed = 2 // a trace is unreadable or malformed
)

// Summary is the machine-readable report of one run of the checker over
// one or more traces: what each trace held, the profile it was checked
// under, every violation with the trace lines that show it, and a verdict
// per property. Build one with [NewSummary] and [Summary.Add] (one trace at
// a time: a summary holds no trace), then [Summary.Finish]; write it with
// [Summary.WriteJSON] or [Summary.WriteText].
type Summary struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Tool is what checked, such as "watchspec check".
	Tool string `json:"tool"`
	// Status is the worst status of the traces: [StatusOK],
	// [StatusViolated] or [StatusMalformed].
	Status int      `json:"status"`
	Traces []*Trace `json:"traces"`
	// Properties is one verdict per property of docs/SPEC.md, in its
	// order, over every trace checked.
	Properties []PropertyVerdict `json:"properties"`
	// Reproduce is the command that repeats the run, when there is one
	// (a conformance run's workload).
	Reproduce string `json:"reproduce,omitempty"`
	// Interrupted says the run was cut short, and when.
	Interrupted *Interruption `json:"interrupted,omitempty"`
	// ReportDir is the directory the report's files were written to, if any.
	ReportDir string `json:"report_dir,omitempty"`
}

// Interruption says a run was interrupted (Ctrl-C) and what was checked.
type Interruption struct {
	// AfterSeconds is how long the run had been going.
	AfterSeconds float64 `json:"after_seconds"`
	// While says what the run was doing, such as "recording".
	While string `json:"while"`
}

// String says "interrupted after N s while …".
func (i *Interruption) String() string {
	return fmt.Sprintf("interrupted after %.0f s while %s", i.AfterSeconds, i.While)
}

// Trace is what the check of one trace found, or why it could not be checked.
type Trace struct {
	// Name is the trace's name: its file, or "-" for standard input.
	Name string `json:"name"`
	// Status is this trace's exit status (see [Summary.Status]).
	Status int `json:"status"`
	// Error says why the trace could not be checked (Status 2); Line is
	// the line it names, 0 when none.
	Error *InputError `json:"error,omitempty"`
	// System, SystemVersion, Recorder and Seed come from the trace's header.
	System        string `json:"system,omitempty"`
	SystemVersion string `json:"system_version,omitempty"`
	Recorder      string `json:"recorder,omitempty"`
	Seed          int64  `json:"seed,omitempty"`
	Counts        Counts `json:"counts"`
	// Linearizability is the verdict on the key-value history.
	Linearizability *Linearizability `json:"linearizability,omitempty"`
	// Profile is the profile the trace was checked under; nil means none:
	// full conformance.
	Profile    *Profile    `json:"profile"`
	Violations []Violation `json:"violations"`
	// Checks counts how often each property was checked, by name.
	Checks map[string]int `json:"checks"`
	// HTML and Porcupine are the pages drawn for the trace, when written
	// (paths, as the writer named them).
	HTML      string `json:"html,omitempty"`
	Porcupine string `json:"porcupine_html,omitempty"`

	informer bool
}

// InputError is why a trace could not be checked.
type InputError struct {
	Message string `json:"message"`
	// Line is the line of the trace the message names (0: none).
	Line int `json:"line,omitempty"`
}

// Counts says what a trace held.
type Counts struct {
	// Operations counts every key-value operation; Serializable and
	// UnknownOutcome count the serializable reads and the operations whose
	// outcome the client never learnt, among them.
	Operations     int `json:"operations"`
	Serializable   int `json:"serializable_reads"`
	UnknownOutcome int `json:"unknown_outcome"`
	Watches        int `json:"watches"`
	WatchResponses int `json:"watch_responses"`
	// Events counts the events the watch responses delivered.
	Events           int `json:"events"`
	ProgressRequests int `json:"progress_requests"`
	// InformerEntries counts the entries of the informer run's log (0: no
	// informer run).
	InformerEntries int `json:"informer_entries"`
}

// Linearizability is the verdict on a trace's key-value history and how it
// was reached.
type Linearizability struct {
	Verdict string `json:"verdict"`
	Method  string `json:"method"`
}

// Profile is a profile of allowances and expectations (docs/SPEC.md §9).
type Profile struct {
	Name string `json:"name"`
	// FullConformance is false when an allowance relaxes a rule.
	FullConformance bool          `json:"full_conformance"`
	Allowances      []Allowance   `json:"allowances"`
	Expectations    []Expectation `json:"expectations"`
}

// Allowance is one relaxed rule of a profile.
type Allowance struct {
	Name    string   `json:"name"`
	Rule    string   `json:"rule"`
	Weakens []string `json:"weakens"`
}

// Expectation is one strengthened rule of a profile.
type Expectation struct {
	Name        string   `json:"name"`
	Rule        string   `json:"rule"`
	Strengthens []string `json:"strengthens"`
	Source      string   `json:"source"`
}

// Violation is one broken property and where the trace shows it.
type Violation struct {
	Property string `json:"property"`
	// Section and Statement are the property's in docs/SPEC.md.
	Section   string `json:"section"`
	Statement string `json:"statement"`
	// Kind says what shows it: "watch" (a watch response), "op" (a
	// key-value operation), "informer" (the informer run) or "other".
	Kind string `json:"kind"`
	// Where is the checker's own words for the place.
	Where string `json:"where"`
	// Lines are the trace's lines that show it, the most telling first:
	// the response, then its watch; the operation; the informer log's
	// entries at the violation's revisions. Empty when the checker names
	// none.
	Lines []int `json:"lines"`
	// Watch is the watch, for Kind "watch"; ResponseLine its response.
	Watch        *WatchRef `json:"watch,omitempty"`
	ResponseLine int       `json:"response_line,omitempty"`
	// Op is the operation, for Kind "op".
	Op        *OpRef         `json:"op,omitempty"`
	Revisions []int64        `json:"revisions"`
	Keys      []traces.Bytes `json:"keys"`
	Message   string         `json:"message"`
}

// WatchRef names a watch of a trace.
type WatchRef struct {
	Client int `json:"client"`
	ID     int `json:"id"`
	Line   int `json:"line"`
}

// OpRef names an operation of a trace.
type OpRef struct {
	Client int `json:"client"`
	Line   int `json:"line"`
}

// PropertyVerdict is the verdict on one property over every trace.
type PropertyVerdict struct {
	Section   string `json:"section"`
	Property  string `json:"property"`
	Statement string `json:"statement"`
	// Checked counts the checks, Failed the violations.
	Checked int `json:"checked"`
	Failed  int `json:"failed"`
	// Verdict is "ok", "FAIL", "unknown" (linearizability undecided) or
	// "not exercised" (never checked).
	Verdict string `json:"verdict"`
}

// NewSummary starts an empty summary of a run of tool.
func NewSummary(tool string) *Summary {
	return &Summary{Format: Format, Version: Version, Tool: tool, Traces: []*Trace{}}
}

// Add records the check of one trace: res is what [linearizability.Check]
// found, t the trace it checked (nil when only the result is at hand: the
// counts are then the result's, and no lines are found for informer
// violations). It keeps neither res nor t. The returned Trace is the
// summary's: a caller may set its HTML fields.
func (s *Summary) Add(res *linearizability.Result, t *traces.Trace) *Trace {
	tr := &Trace{Name: res.Trace, Violations: []Violation{}, Checks: map[string]int{}, informer: res.Informer}
	tr.Counts = Counts{Operations: res.Ops, Watches: res.Watches, WatchResponses: res.WatchResponses}
	if t != nil {
		tr.System, tr.SystemVersion, tr.Recorder, tr.Seed = t.Header.System, t.Header.SystemVersion, t.Header.Tool, t.Header.Seed
		tr.Counts = CountsOf(t)
	}
	tr.Linearizability = &Linearizability{Verdict: string(res.Verdict), Method: res.Method}
	tr.Profile = profileOf(res.Profile)
	for _, v := range res.Violations {
		tr.Violations = append(tr.Violations, violationOf(v, t))
	}
	for p, n := range res.Checks {
		tr.Checks[string(p)] = n
	}
	switch {
	case len(res.Violations) > 0 || res.Verdict == linearizability.Unknown:
		tr.Status = StatusViolated
	default:
		tr.Status = StatusOK
	}
	s.add(tr)
	return tr
}

// AddError records a trace that could not be checked: err says why, as
// the trace reader says it ("name:line: what is wrong").
func (s *Summary) AddError(name string, err error) *Trace {
	tr := &Trace{Name: name, Status: StatusMalformed, Violations: []Violation{}, Checks: map[string]int{},
		Error: &InputError{Message: err.Error(), Line: errorLine(name, err.Error())}}
	s.add(tr)
	return tr
}

func (s *Summary) add(tr *Trace) {
	s.Traces = append(s.Traces, tr)
	s.Status = max(s.Status, tr.Status)
	s.Properties = nil // Finish computes them again
}

// errorLine finds the line a reader's error names: "name:LINE: ...".
func errorLine(name, msg string) int {
	rest, ok := strings.CutPrefix(msg, name+":")
	if !ok {
		return 0
	}
	n, _, ok := strings.Cut(rest, ":")
	if !ok {
		return 0
	}
	line, err := strconv.Atoi(n)
	if err != nil || line < 1 {
		return 0
	}
	return line
}

// Finish computes the verdict of every property over the traces added so
// far. [Summary.WriteJSON] and [Summary.WriteText] call it.
func (s *Summary) Finish() {
	failed := map[string]int{}
	checked := map[string]int{}
	unknown := false
	for _, tr := range s.Traces {
		for _, v := range tr.Violations {
			failed[v.Property]++
		}
		for p, n := range tr.Checks {
			checked[p] += n
		}
		if tr.Linearizability != nil && tr.Linearizability.Verdict == string(linearizability.Unknown) {
			unknown = true
		}
	}
	s.Properties = s.Properties[:0]
	for _, e := range spec.Catalog() {
		p := string(e.Property)
		pv := PropertyVerdict{Section: e.Section, Property: p, Statement: e.Summary, Checked: checked[p], Failed: failed[p], Verdict: "ok"}
		switch {
		case failed[p] > 0:
			pv.Verdict = "FAIL"
		case e.Property == spec.Linearizable && unknown:
			pv.Verdict = "unknown"
		case checked[p] == 0:
			pv.Verdict = "not exercised"
		}
		s.Properties = append(s.Properties, pv)
	}
}

// WriteJSON writes the summary as one indented JSON document, valid
// against [SchemaJSON].
func (s *Summary) WriteJSON(w io.Writer) error {
	s.Finish()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// CountsOf counts what t holds, as a summary and its text report count it.
func CountsOf(t *traces.Trace) Counts {
	c := Counts{Operations: len(t.Ops), Watches: len(t.Watches), ProgressRequests: len(t.ProgressRequests)}
	for _, o := range t.Ops {
		if o.Serializable {
			c.Serializable++
		}
		if o.Unknown() {
			c.UnknownOutcome++
		}
	}
	for _, w := range t.Watches {
		c.WatchResponses += len(w.Responses)
		for _, r := range w.Responses {
			c.Events += len(r.Response.Events)
		}
	}
	if t.K8s != nil {
		c.InformerEntries = len(t.K8s.Entries)
	}
	return c
}

func profileOf(p *linearizability.Profile) *Profile {
	if p == nil {
		return nil
	}
	out := &Profile{Name: p.Name, FullConformance: len(p.Allowances) == 0, Allowances: []Allowance{}, Expectations: []Expectation{}}
	for _, a := range p.Allowances {
		out.Allowances = append(out.Allowances, Allowance{Name: a.Name, Rule: a.Rule, Weakens: propertyNames(a.Weakens)})
	}
	for _, e := range p.Expectations {
		out.Expectations = append(out.Expectations, Expectation{Name: e.Name, Rule: e.Rule, Strengthens: propertyNames(e.Strengthens), Source: e.Source})
	}
	return out
}

func propertyNames(ps []spec.Property) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, string(p))
	}
	return out
}

// The checker's words for where a violation is (linearizability.Violation.Where).
var (
	whereWatch = regexp.MustCompile(`^watch (-?\d+) of client (-?\d+) \(line (\d+)\), response at line (\d+)$`)
	whereOp    = regexp.MustCompile(`^op at line (\d+) \(client (-?\d+)\)$`)
	whereLine  = regexp.MustCompile(`line (\d+)`)
)

// whereInformer is the checker's Where for a violation of the informer run.
const whereInformer = "informer run"

func violationOf(v linearizability.Violation, t *traces.Trace) Violation {
	out := Violation{Property: string(v.Property), Where: v.Where, Message: v.Message, Lines: []int{},
		Revisions: append([]int64{}, v.Revisions...), Keys: []traces.Bytes{}}
	if e, ok := spec.Lookup(v.Property); ok {
		out.Section, out.Statement = e.Section, e.Summary
	}
	for _, k := range v.Keys {
		out.Keys = append(out.Keys, traces.Bytes(k))
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	switch m := whereWatch.FindStringSubmatch(v.Where); {
	case m != nil:
		out.Kind = "watch"
		out.Watch = &WatchRef{ID: atoi(m[1]), Client: atoi(m[2]), Line: atoi(m[3])}
		out.ResponseLine = atoi(m[4])
		out.Lines = []int{out.ResponseLine, out.Watch.Line}
	case whereOp.MatchString(v.Where):
		m := whereOp.FindStringSubmatch(v.Where)
		out.Kind = "op"
		out.Op = &OpRef{Line: atoi(m[1]), Client: atoi(m[2])}
		out.Lines = []int{out.Op.Line}
	case v.Where == whereInformer:
		out.Kind = "informer"
		if t != nil && t.K8s != nil {
			out.Lines = informerLines(t, v.Violation)
		}
	default:
		out.Kind = "other"
		for _, m := range whereLine.FindAllStringSubmatch(v.Where, -1) {
			out.Lines = append(out.Lines, atoi(m[1]))
		}
	}
	return out
}

// informerLines returns the lines of the informer log's entries that show
// v: those at one of its revisions (on one of its keys, when it names
// keys), at most maxLines of them.
func informerLines(t *traces.Trace, v spec.Violation) []int {
	const maxLines = 8
	iv := newInformerView(t, nil)
	focus := iv.focus(v)
	lines := []int{}
	for _, i := range focus {
		if l := iv.line(i); l > 0 {
			lines = append(lines, l)
		}
	}
	sort.Ints(lines)
	if len(lines) > maxLines {
		lines = lines[:maxLines]
	}
	return lines
}
