package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
)

// WriteText writes the summary as `watchspec check` prints it: every
// trace's [Trace.WriteFailures] lines, then [Summary.WriteTable].
func (s *Summary) WriteText(w io.Writer) error {
	for _, tr := range s.Traces {
		if err := tr.WriteFailures(w); err != nil {
			return err
		}
	}
	return s.WriteTable(w)
}

// WriteFailures writes one line per violation of the trace, beginning
// "FAIL <Property> <trace> <where>", an "UNKNOWN Linearizable" line when
// porcupine ran out of time, and the paths of the pages drawn. A tool that
// checks trace after trace prints these as each is done.
func (tr *Trace) WriteFailures(w io.Writer) error {
	ew := &errWriter{w: w}
	for _, v := range tr.Violations {
		ew.printf("FAIL %s %s %s", v.Property, tr.Name, v.Where)
		if len(v.Revisions) > 0 {
			ew.printf(" revisions=%s", spec.FormatRevisions(v.Revisions))
		}
		if len(v.Keys) > 0 {
			ew.printf(" keys=%s", spec.FormatKeys(keyStrings(v)))
		}
		ew.printf(": %s\n", v.Message)
	}
	if tr.Linearizability != nil && tr.Linearizability.Verdict == string(linearizability.Unknown) {
		ew.printf("UNKNOWN %s %s: porcupine ran out of time; rerun with a larger --timeout\n", spec.Linearizable, tr.Name)
	}
	if tr.HTML != "" {
		ew.printf("report of %s: %s\n", tr.Name, tr.HTML)
	}
	if tr.Porcupine != "" {
		ew.printf("porcupine's visualisation of %s: %s\n", tr.Name, tr.Porcupine)
	}
	return ew.err
}

func keyStrings(v Violation) []string {
	keys := make([]string, len(v.Keys))
	for i, k := range v.Keys {
		keys[i] = string(k)
	}
	return keys
}

// CountsLine says what the trace held and the linearizability verdict, on
// one line: "NAME: 971 operations (32 serializable reads), 94 watches,
// 3936 watch responses; linearizable (revision order)". Progress messages
// count the same way.
func (tr *Trace) CountsLine() string {
	if tr.Error != nil {
		return fmt.Sprintf("%s: not checked: malformed or unreadable", tr.Name)
	}
	c := tr.Counts
	var parts []string
	if c.Serializable > 0 {
		parts = append(parts, fmt.Sprintf("%d serializable reads", c.Serializable))
	}
	if c.UnknownOutcome > 0 {
		parts = append(parts, fmt.Sprintf("%d with unknown outcome", c.UnknownOutcome))
	}
	ops := fmt.Sprintf("%d operations", c.Operations)
	if len(parts) > 0 {
		ops += " (" + strings.Join(parts, ", ") + ")"
	}
	line := fmt.Sprintf("%s: %s, %d watches, %d watch responses", tr.Name, ops, c.Watches, c.WatchResponses)
	if c.InformerEntries > 0 {
		line += fmt.Sprintf(", an informer run of %d entries", c.InformerEntries)
	}
	if l := tr.Linearizability; l != nil {
		line += fmt.Sprintf("; %s (%s)", l.Verdict, l.Method)
	}
	return line
}

// WriteTable writes what comes after the FAIL lines: a blank line, one
// [Trace.CountsLine] per trace, the profiles in force with what each
// allows or expects, whether the run was interrupted, and the table of
// properties: section, name, how often checked, verdict. The Kubernetes
// properties (§4, §5) are left out of the table when no trace holds an
// informer run and none failed.
func (s *Summary) WriteTable(w io.Writer) error {
	s.Finish()
	ew := &errWriter{w: w}
	ew.printf("\n")
	informer := false
	for _, tr := range s.Traces {
		ew.printf("%s\n", tr.CountsLine())
		informer = informer || tr.informer || tr.Counts.InformerEntries > 0
	}
	s.writeProfiles(ew)
	if s.Interrupted != nil {
		ew.printf("%s: only what was recorded until then was checked\n", s.Interrupted)
	}
	if ew.err != nil {
		return ew.err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "§\tproperty\tchecked\tverdict")
	for _, p := range s.Properties {
		if !informer && kubernetesSection(p.Section) && p.Failed == 0 {
			continue // the Kubernetes rules need an informer run
		}
		verdict := p.Verdict
		if p.Failed > 0 {
			verdict = fmt.Sprintf("FAIL (%d)", p.Failed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", p.Section, p.Property, p.Checked, verdict)
	}
	return tw.Flush()
}

// kubernetesSection reports whether a section is one of the Kubernetes
// rules (§4, §5), which only traces with an informer run exercise.
func kubernetesSection(sec string) bool {
	return strings.HasPrefix(sec, "4.") || strings.HasPrefix(sec, "5.")
}

// writeProfiles says which profile the traces were checked under — one
// "profile:" line per profile, naming the traces when they differ — and
// lists each allowance in force with the rule it relaxes, and each
// expectation with the upstream behaviour it differs from (docs/SPEC.md §9).
func (s *Summary) writeProfiles(ew *errWriter) {
	var order []string
	byName := map[string]*Profile{}
	names := map[string][]string{}
	for _, tr := range s.Traces {
		if tr.Error != nil {
			continue
		}
		key := ""
		if tr.Profile != nil {
			key = "profile " + tr.Profile.Name
		}
		if _, ok := names[key]; !ok {
			order = append(order, key)
			byName[key] = tr.Profile
		}
		names[key] = append(names[key], tr.Name)
	}
	for _, key := range order {
		p := byName[key]
		which := ""
		if len(order) > 1 {
			which = " for " + strings.Join(names[key], ", ")
		}
		if p == nil {
			ew.printf("profile: none (full conformance)%s\n", which)
			continue
		}
		switch {
		case len(p.Allowances) > 0 && len(p.Expectations) > 0:
			ew.printf("profile: %s (allowances and expectations in force: NOT full conformance)%s\n", p.Name, which)
		case len(p.Allowances) > 0:
			ew.printf("profile: %s (allowances in force: NOT full conformance)%s\n", p.Name, which)
		default:
			ew.printf("profile: %s (expectations beyond etcd's guarantees: a FAIL may be correct etcd behaviour)%s\n", p.Name, which)
		}
		for _, e := range p.Expectations {
			ew.printf("  expectation %s: strengthens %s (etcd differs: %s)\n", e.Name, e.Rule, e.Source)
		}
		for _, a := range p.Allowances {
			var weakens []string
			for _, prop := range a.Weakens {
				weakens = append(weakens, spec.Property(prop).Section()+" "+prop)
			}
			ew.printf("  allowance %s: relaxes %s (weakens %s)\n", a.Name, a.Rule, strings.Join(weakens, ", "))
		}
	}
}

// errWriter keeps the first error of a run of writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
