package linearizability

import (
	"errors"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/model/spec"
)

// Result.Err is nil exactly when every property holds; otherwise it holds
// every violation, found by errors.As, and says undecided for a verdict of
// Unknown. SPEC §2.7 Linearizable, §3.3 Reliable (the properties named are
// only labels here).
func TestResultErr(t *testing.T) {
	if err := (&Result{Verdict: Linearizable}).Err(); err != nil {
		t.Errorf("a result with no violation: Err() = %v, want nil", err)
	}
	if err := (&Result{Trace: "t", Verdict: Unknown}).Err(); err == nil || !strings.Contains(err.Error(), "did not decide") {
		t.Errorf("an undecided result: Err() = %v, want an error saying so", err)
	}
	res := &Result{Trace: "t", Verdict: NotLinearizable, Violations: []Violation{
		{Violation: spec.Violation{Property: spec.Linearizable, Message: "m1"}, Where: "op at line 3"},
		{Violation: spec.Violation{Property: spec.Reliable, Message: "m2"}},
		{Violation: spec.Violation{Property: spec.Linearizable, Message: "m3"}},
	}}
	var verr *ViolationsError
	if !errors.As(res.Err(), &verr) || len(verr.Violations) != 3 {
		t.Fatalf("Err() = %v, want a *ViolationsError with the 3 violations", res.Err())
	}
	if got := verr.Properties(); len(got) != 2 || got[0] != spec.Linearizable || got[1] != spec.Reliable {
		t.Errorf("Properties() = %v, want [Linearizable Reliable]", got)
	}
	msg := res.Err().Error()
	for _, want := range []string{"3 violations", "not linearizable", "op at line 3: Linearizable §2.7", "Reliable §3.3: m2", "m3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Error() lacks %q:\n%s", want, msg)
		}
	}
}
