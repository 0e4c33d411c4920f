package informertest

import (
	"testing"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
)

type plainSubject struct{}

func (plainSubject) New(informer.ListerWatcher, Config) Informer { return nil }

type knowsConverges struct{ plainSubject }

func (knowsConverges) Known(_ k8s.Run, v spec.Violation) string {
	if v.Property == spec.InformerConverges {
		return "finding-1"
	}
	return ""
}

// The harness excuses exactly what a subject's KnownBugs names, and
// nothing for a subject without it (docs/FINDINGS.md informer-2).
func TestKnownBugsExcuseOnlyWhatTheSubjectNames(t *testing.T) {
	vs := []spec.Violation{{Property: spec.InformerConverges, Message: "a"}, {Property: spec.HasSyncedDelivered, Message: "b"}}
	rest, excused := known(knowsConverges{}, k8s.Run{}, vs)
	if len(rest) != 1 || rest[0].Property != spec.HasSyncedDelivered || len(excused) != 1 {
		t.Errorf("rest %v, excused %v: want the §5.5 violation kept and the §5.2 one excused", rest, excused)
	}
	if rest, excused := known(plainSubject{}, k8s.Run{}, vs); len(rest) != 2 || len(excused) != 0 {
		t.Errorf("a subject without KnownBugs: rest %v, excused %v", rest, excused)
	}
}
