package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
)

// report prints one FAIL line per violation, then the per-property table,
// and returns the exit status: 0 when every property holds, 1 otherwise.
// It says which profile each result was checked under, and what it allows;
// html holds the visualisations written, by result.
func report(w io.Writer, results []*linearizability.Result, html map[*linearizability.Result]string) int {
	failed := map[spec.Property]int{}
	checked := map[spec.Property]int{}
	status := 0
	for _, r := range results {
		for _, v := range r.Violations {
			failed[v.Property]++
			status = 1
			fmt.Fprintf(w, "FAIL %s %s %s", v.Property, r.Trace, v.Where)
			if len(v.Revisions) > 0 {
				fmt.Fprintf(w, " revisions=%s", spec.FormatRevisions(v.Revisions))
			}
			if len(v.Keys) > 0 {
				fmt.Fprintf(w, " keys=%s", spec.FormatKeys(v.Keys))
			}
			fmt.Fprintf(w, ": %s\n", v.Message)
		}
		if r.Verdict == linearizability.Unknown {
			status = 1
			fmt.Fprintf(w, "UNKNOWN %s %s: porcupine ran out of time; rerun with a larger --timeout\n", spec.Linearizable, r.Trace)
		}
		if path := html[r]; path != "" {
			fmt.Fprintf(w, "visualisation of %s: %s\n", r.Trace, path)
		}
		for p, n := range r.Checks {
			checked[p] += n
		}
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%s: %d operations, %d watches, %d watch responses; %s (%s)\n",
			r.Trace, r.Ops, r.Watches, r.WatchResponses, r.Verdict, r.Method)
	}
	printProfiles(w, results)
	informer := false
	for _, r := range results {
		informer = informer || r.Informer
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "§\tproperty\tchecked\tverdict")
	for _, e := range spec.Catalog() {
		if !informer && kubernetesSection(e.Section) && failed[e.Property] == 0 {
			continue // the Kubernetes rules need an informer run
		}
		verdict := "ok"
		switch {
		case failed[e.Property] > 0:
			verdict = fmt.Sprintf("FAIL (%d)", failed[e.Property])
		case e.Property == spec.Linearizable && anyUnknown(results):
			verdict = "unknown"
		case checked[e.Property] == 0:
			verdict = "not exercised"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", e.Section, e.Property, checked[e.Property], verdict)
	}
	tw.Flush()
	return status
}

func anyUnknown(results []*linearizability.Result) bool {
	for _, r := range results {
		if r.Verdict == linearizability.Unknown {
			return true
		}
	}
	return false
}

// kubernetesSection reports whether a section is one of the Kubernetes
// rules (§4, §5), which only traces with an informer run exercise.
func kubernetesSection(sec string) bool {
	return strings.HasPrefix(sec, "4.") || strings.HasPrefix(sec, "5.")
}

// printProfiles says which profile the results were checked under — one
// "profile:" line per profile, naming the traces when they differ — and
// lists each allowance in force with the rule it relaxes, and each
// expectation with the upstream behaviour it differs from (docs/SPEC.md §9).
func printProfiles(w io.Writer, results []*linearizability.Result) {
	var order []*linearizability.Profile
	traces := map[*linearizability.Profile][]string{}
	for _, r := range results {
		if _, ok := traces[r.Profile]; !ok {
			order = append(order, r.Profile)
		}
		traces[r.Profile] = append(traces[r.Profile], r.Trace)
	}
	for _, p := range order {
		which := ""
		if len(order) > 1 {
			which = " for " + strings.Join(traces[p], ", ")
		}
		if p == nil {
			fmt.Fprintf(w, "profile: none (full conformance)%s\n", which)
			continue
		}
		switch {
		case len(p.Allowances) > 0 && len(p.Expectations) > 0:
			fmt.Fprintf(w, "profile: %s (allowances and expectations in force: NOT full conformance)%s\n", p.Name, which)
		case len(p.Allowances) > 0:
			fmt.Fprintf(w, "profile: %s (allowances in force: NOT full conformance)%s\n", p.Name, which)
		default:
			fmt.Fprintf(w, "profile: %s (expectations beyond etcd's guarantees: a FAIL may be correct etcd behaviour)%s\n", p.Name, which)
		}
		for _, e := range p.Expectations {
			fmt.Fprintf(w, "  expectation %s: strengthens %s (etcd differs: %s)\n", e.Name, e.Rule, e.Source)
		}
		for _, a := range p.Allowances {
			var weakens []string
			for _, prop := range a.Weakens {
				weakens = append(weakens, prop.Section()+" "+string(prop))
			}
			fmt.Fprintf(w, "  allowance %s: relaxes %s (weakens %s)\n", a.Name, a.Rule, strings.Join(weakens, ", "))
		}
	}
}
