package linearizability

import (
	"fmt"
	"strings"

	"github.com/watchspec/watchspec/model/spec"
)

// ViolationsError is what [Result.Err] returns for a trace that does not
// conform: every violation found, each naming its property and SPEC
// section, and the verdict. Get it back with errors.As to read the
// violations one by one.
type ViolationsError struct {
	// Trace names the trace checked.
	Trace string
	// Verdict is the linearizability verdict; Unknown means porcupine ran
	// out of time and the trace is neither passed nor failed.
	Verdict    Verdict
	Violations []Violation
}

// Error lists the violations, one a line: property, section, where and what.
func (e *ViolationsError) Error() string {
	var b strings.Builder
	switch {
	case len(e.Violations) == 0:
		fmt.Fprintf(&b, "%s: verdict %s: the check did not decide (raise Options.Timeout)", e.Trace, e.Verdict)
		return b.String()
	case len(e.Violations) == 1:
		fmt.Fprintf(&b, "%s: 1 violation", e.Trace)
	default:
		fmt.Fprintf(&b, "%s: %d violations", e.Trace, len(e.Violations))
	}
	if e.Verdict != Linearizable {
		fmt.Fprintf(&b, " (verdict %s)", e.Verdict)
	}
	for _, v := range e.Violations {
		b.WriteString("\n\t")
		if v.Where != "" {
			b.WriteString(v.Where + ": ")
		}
		b.WriteString(v.Violation.String())
	}
	return b.String()
}

// Properties lists the properties broken, each once, in the order first
// reported.
func (e *ViolationsError) Properties() []spec.Property {
	var out []spec.Property
	seen := map[spec.Property]bool{}
	for _, v := range e.Violations {
		if !seen[v.Property] {
			seen[v.Property] = true
			out = append(out, v.Property)
		}
	}
	return out
}

// Err is the result as an error: nil when every property holds (the
// history is linearizable and nothing is violated), otherwise a
// *[ViolationsError] holding every violation. An undecided check (verdict
// Unknown) is an error too: nothing was shown to hold.
func (r *Result) Err() error {
	if r.Verdict == Linearizable && len(r.Violations) == 0 {
		return nil
	}
	return &ViolationsError{Trace: r.Trace, Verdict: r.Verdict, Violations: r.Violations}
}

// Unwrap returns the violations as errors (each a spec.Violation), so that
// errors.As finds the first.
func (e *ViolationsError) Unwrap() []error {
	out := make([]error, len(e.Violations))
	for i, v := range e.Violations {
		out[i] = v.Violation
	}
	return out
}
