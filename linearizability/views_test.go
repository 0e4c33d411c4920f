package linearizability

import (
	"strings"
	"testing"

	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// gapTrace: revisions 2 and 3 put a/1 and a/2; revision 4 was created by
// one of two writes of unknown outcome — a delete of a/1 (client 3) or a
// put of b/x (client 2) — that no watch saw; revision 5, a delete of the
// range a/ whose answer was lost, reached a watch of a/ as the delete of
// a/2 alone. extra lines are added before the watch.
func gapTrace(t *testing.T, extra ...string) *traces.Trace {
	t.Helper()
	lines := []string{
		`{"format":"watchspec-trace","version":1,"system":"test","start":"2026-12-02T12:00:00Z","tool":"views_test.go","unique_values":true}`,
		`{"type":"op","client":1,"call":1000,"return":2000,"request":{"put":{"key":"a/1","value":"v2"}},"response":{"revision":2,"put":{}}}`,
		`{"type":"op","client":1,"call":3000,"return":4000,"request":{"put":{"key":"a/2","value":"v3"}},"response":{"revision":3,"put":{}}}`,
		`{"type":"op","client":2,"call":5000,"return":9000,"request":{"put":{"key":"b/x","value":"vb"}},"error":"connection lost"}`,
		`{"type":"op","client":3,"call":5000,"return":9000,"request":{"delete":{"key":"a/1"}},"error":"connection lost"}`,
		`{"type":"op","client":1,"call":10000,"return":11000,"request":{"delete":{"key":"a/","range_end":"a0"}},"error":"connection lost"}`,
		`{"type":"op","client":1,"call":12000,"return":13000,"request":{"put":{"key":"c","value":"v6"}},"response":{"revision":6,"put":{}}}`,
	}
	lines = append(lines, extra...)
	lines = append(lines,
		`{"type":"watch","client":4,"watch":1,"time":9500,"request":{"key":"a/","range_end":"a0"}}`,
		`{"type":"watch_response","client":4,"watch":1,"time":9600,"response":{"revision":4,"created":true}}`,
		`{"type":"watch_response","client":4,"watch":1,"time":11500,"response":{"revision":5,"events":[{"type":"DELETE","kv":{"key":"a/2","mod_revision":5}}]}}`,
	)
	tr, err := traces.Read(strings.NewReader(strings.Join(lines, "\n")+"\n"), "gap.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// withoutWatchEvidence runs f with the linearization blind to the watches,
// as the checker was before views.go.
func withoutWatchEvidence(f func()) {
	watchEvidence = false
	defer func() { watchEvidence = true }()
	f()
}

// SPEC §2.7 Linearizable, §3.4 Atomic; regression for issue 14's seed 334:
// a revision that one of two writes of unknown outcome created, seen by no
// watch, is filled with the write every watch agrees with. The watch of a/
// delivered the range delete of revision 5 as the delete of a/2 alone, so
// a/1 was gone before: the delete of a/1 created revision 4, not the put of
// b/x. Blind to that, the linearization took the put, and the checker
// blamed the watch for an event of a/1 the store never had to send.
func TestUnknownWriteChosenByWatches(t *testing.T) {
	res, err := Check(gapTrace(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Linearizable || len(res.Violations) > 0 {
		t.Errorf("a history every watch agrees with: %s, %v", res.Verdict, res.Violations)
	}
	withoutWatchEvidence(func() {
		res, err = Check(gapTrace(t), Options{})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !hasProperty(res.Violations, spec.Atomic) {
		t.Errorf("blind to the watches, the linearization no longer takes the put of b/x at revision 4 (%s, %v): this test shows nothing",
			res.Verdict, res.Violations)
	}
}

// SPEC §3.4 Atomic: the evidence only chooses among linearizations. A read
// that saw a/1 alive at revision 4 leaves only the put of b/x there, so the
// range delete at 5 deleted both keys and the watch that delivered a/2
// alone lost a/1's event: still a FAIL, named by its property.
func TestWatchEvidenceDoesNotHideLostEvents(t *testing.T) {
	read := `{"type":"op","client":5,"call":9700,"return":9800,"request":{"range":{"key":"a/1","revision":4}},"response":{"revision":4,"range":{"kvs":[{"key":"a/1","value":"v2","create_revision":2,"mod_revision":2,"version":1}],"count":1}}}`
	res, err := Check(gapTrace(t, read), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Linearizable || !hasProperty(res.Violations, spec.Atomic) {
		t.Errorf("the watch lost a/1's delete: %s, %v, want linearizable and §3.4 Atomic", res.Verdict, res.Violations)
	}
}

// SPEC §3.3 Reliable: a watch that delivered revisions 3 and 5 one after
// the other says that revision 4 held nothing it selects, so the put of
// a/9 (unknown outcome) did not create revision 4; the put of b/y did.
func TestQuietWatchRulesOutAWrite(t *testing.T) {
	lines := []string{
		`{"format":"watchspec-trace","version":1,"system":"test","start":"2026-12-02T12:00:00Z","tool":"views_test.go","unique_values":true}`,
		`{"type":"op","client":1,"call":1000,"return":2000,"request":{"put":{"key":"a/1","value":"v2"}},"response":{"revision":2,"put":{}}}`,
		`{"type":"op","client":1,"call":3000,"return":4000,"request":{"put":{"key":"a/2","value":"v3"}},"response":{"revision":3,"put":{}}}`,
		`{"type":"op","client":2,"call":5000,"return":9000,"request":{"put":{"key":"a/9","value":"v9"}},"error":"connection lost"}`,
		`{"type":"op","client":3,"call":5000,"return":9000,"request":{"put":{"key":"b/y","value":"vy"}},"error":"connection lost"}`,
		`{"type":"op","client":1,"call":10000,"return":11000,"request":{"put":{"key":"a/3","value":"v5"}},"response":{"revision":5,"put":{}}}`,
		`{"type":"watch","client":4,"watch":1,"time":500,"request":{"key":"a/","range_end":"a0"}}`,
		`{"type":"watch_response","client":4,"watch":1,"time":600,"response":{"revision":1,"created":true}}`,
		`{"type":"watch_response","client":4,"watch":1,"time":2100,"response":{"revision":2,"events":[{"type":"PUT","kv":{"key":"a/1","value":"v2","create_revision":2,"mod_revision":2,"version":1}}]}}`,
		`{"type":"watch_response","client":4,"watch":1,"time":4100,"response":{"revision":3,"events":[{"type":"PUT","kv":{"key":"a/2","value":"v3","create_revision":3,"mod_revision":3,"version":1}}]}}`,
		`{"type":"watch_response","client":4,"watch":1,"time":11100,"response":{"revision":5,"events":[{"type":"PUT","kv":{"key":"a/3","value":"v5","create_revision":5,"mod_revision":5,"version":1}}]}}`,
	}
	read := func() *traces.Trace {
		tr, err := traces.Read(strings.NewReader(strings.Join(lines, "\n")+"\n"), "quiet.ndjson")
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	res, err := Check(read(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Linearizable || len(res.Violations) > 0 {
		t.Errorf("a history every watch agrees with: %s, %v", res.Verdict, res.Violations)
	}
	withoutWatchEvidence(func() { res, err = Check(read(), Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	if !hasProperty(res.Violations, spec.Reliable) {
		t.Errorf("blind to the watches, the linearization no longer takes the put of a/9 at revision 4 (%s, %v): this test shows nothing",
			res.Verdict, res.Violations)
	}
}
