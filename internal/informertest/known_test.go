package informertest_test

import (
	"path/filepath"
	"testing"

	"github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// corpusRun checks a corpus trace and returns its informer run and the
// violations of the run.
func corpusRun(t *testing.T, file string) (k8s.Run, []spec.Violation) {
	t.Helper()
	tr, err := traces.ReadFile(filepath.Join("..", "..", "traces", "corpus", file))
	if err != nil {
		t.Fatal(err)
	}
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var vs []spec.Violation
	for _, v := range res.Violations {
		if v.Where == "informer run" {
			vs = append(vs, v.Violation)
		}
	}
	return *tr.K8s, vs
}

// SPEC §5.5 HasSyncedDelivered; docs/FINDINGS.md informer-2. The recording
// of client-go's HasSynced race is recognized as that race, and nothing
// else is: the same run without the initial-list add the handler got
// before it reported HasSynced (no Finished could have raced), another
// key, another property.
func TestClientGoSyncTrackerRace(t *testing.T) {
	run, vs := corpusRun(t, "informer-client-go-0.37.2-hassynced-before-initial-list.ndjson")
	if len(vs) != 1 || vs[0].Property != spec.HasSyncedDelivered {
		t.Fatalf("the recording's violations: %v, want one of §5.5", vs)
	}
	v := vs[0]
	if !informertest.ClientGoSyncTrackerRace(run, v) {
		t.Fatalf("the recorded race is not recognized: %v", v)
	}

	// Handler 1's initial-list add of a/y, before its HasSynced, removed.
	var without k8s.Run = run
	without.Entries = nil
	removed := false
	for _, e := range run.Entries {
		if n := e.Notification; n != nil && n.Handler == 1 && n.InInitialList && n.Key() == "/registry/configmaps/a/y" && !removed {
			removed = true
			continue
		}
		without.Entries = append(without.Entries, e)
	}
	if !removed {
		t.Fatal("the recording has no initial-list add of a/y to handler 1")
	}
	if informertest.ClientGoSyncTrackerRace(without, v) {
		t.Error("recognized on a handler that had no initial-list add before its HasSynced")
	}

	other := v
	other.Keys = []string{"/registry/configmaps/b/y"}
	if informertest.ClientGoSyncTrackerRace(run, other) {
		t.Error("recognized for a key no late initial-list add carried")
	}
	other = v
	other.Property = spec.InformerConverges
	if informertest.ClientGoSyncTrackerRace(run, other) {
		t.Error("recognized for another property")
	}
}
