package mutate

import (
	"testing"

	"github.com/watchspec/watchspec/model/spec"
)

// TestWrongTypeJoiningTheState: an update sent as ADDED right after the
// ADDED events a state watch without an end bookmark opens with is read as
// part of its state (SPEC §4.3: "an ADDED event that is not a creation is
// read as part of that state"); the state so read holds that key twice,
// which §4.3 WatchStart names, not §3.9 IsCreate. The operator expected
// IsCreate and the long draw reported "other name" (make mutate, seed 2,
// n=50: seed 6816384458810692277 on the apiserver cacher recording).
func TestWrongTypeJoiningTheState(t *testing.T) {
	s := subjectNamed(t, "apiserver-cacher-0.37.2.ndjson.gz")
	op := operatorNamed(t, "k8s-watch-wrong-type")
	const seed = 6816384458810692277
	m, ok := op.Apply(s, seed)
	if !ok {
		t.Fatalf("seed %d: the operator no longer applies to %s", seed, s.Name)
	}
	if got := expectString(m.Expect); got != expectString(one(spec.WatchStart)) {
		t.Errorf("seed %d (%s): expects %s, want §4.3 WatchStart: the event joins the watch's opening state", seed, m.What, got)
	}
	if r := Judge(m); r.Outcome != Caught {
		t.Errorf("seed %d: %v", seed, r)
	}
}

// TestTruncateBeforeTheState: a Kubernetes watch cut before its first event
// delivered nothing, which breaks nothing (SPEC §4.3, §6: delivery may stop
// at any point). The checker named WatchStart — "the 0 ADDED events a Any
// watch opens with are not the objects of any revision" — and the long
// draw reported false positives (seed 5, n=400, -mutate.op='^(informer|k8s)-':
// seeds 7131012712880980460 and 5939155302357882217 on the apiserver cacher
// recording, its watch 46 cut at event 0).
func TestTruncateBeforeTheState(t *testing.T) {
	s := subjectNamed(t, "apiserver-cacher-0.37.2.ndjson.gz")
	op := operatorNamed(t, "k8s-truncate-watch")
	for _, seed := range []int64{7131012712880980460, 5939155302357882217} {
		m, ok := op.Apply(s, seed)
		if !ok {
			t.Fatalf("seed %d: the operator no longer applies to %s", seed, s.Name)
		}
		if r := Judge(m); r.Outcome != Kept {
			t.Errorf("seed %d: %v", seed, r)
		}
	}
}
