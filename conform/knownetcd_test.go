package conform

import (
	"fmt"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// knownEtcdPrevKVRace reports whether v is FINDINGS etcd-1 on a trace of a
// real etcd: a §3.8 PrevKV failure ("lacks its PrevKV", its previous
// revision not compacted) on an event of the first response with events
// of a watch that was synced when it was created (from now, or from a
// revision above the created header), which asked for prev_kv. etcd
// 3.7.3's v3rpc recvLoop registers such a watch before it sets
// sws.prevKV[id]; an event sent in between goes out without its previous
// key-value. The rule stays (SPEC §3.8); watchspec's own tests against
// real etcd log this shape instead of failing on it, so that an etcd bug
// does not fail CI at random. Nothing else is excused.
func knownEtcdPrevKVRace(tr *traces.Trace, v linearizability.Violation) bool {
	if tr.Header.System != "etcd" || v.Property != spec.PrevKV || !strings.Contains(v.Message, "lacks its PrevKV") {
		return false
	}
	var wline, rline int
	i := strings.Index(v.Where, "(line")
	if i < 0 {
		return false
	}
	if _, err := fmt.Sscanf(v.Where[i+1:], "line %d), response at line %d", &wline, &rline); err != nil {
		return false
	}
	for _, w := range tr.Watches {
		if w.Line != wline || !w.Request.PrevKV {
			continue
		}
		created := int64(-1)
		for _, r := range w.Responses {
			switch {
			case r.Response.Created:
				created = r.Response.Revision
			case r.Line == rline:
				synced := w.Request.StartRevision == 0 || (created >= 0 && w.Request.StartRevision > created)
				return synced && len(r.Response.Events) > 0
			case len(r.Response.Events) > 0:
				return false // an earlier response had events: not the first
			}
		}
	}
	return false
}

// withoutKnownEtcdRaces returns res's violations less those of
// knownEtcdPrevKVRace, and logs those.
func withoutKnownEtcdRaces(t *testing.T, tr *traces.Trace, res *linearizability.Result) []linearizability.Violation {
	t.Helper()
	var out []linearizability.Violation
	for _, v := range res.Violations {
		if knownEtcdPrevKVRace(tr, v) {
			t.Logf("known etcd bug, not counted (FINDINGS.md etcd-1, SPEC §3.8): %s: %s", v.Where, v.Violation)
			continue
		}
		out = append(out, v)
	}
	return out
}

// SPEC §3.8 PrevKV; FINDINGS etcd-1: the recording of the race is
// recognised, and the same violation is not excused on another system,
// nor on a watch that started in the past (an unsynced watch's events come
// from etcd's sync loop, long after its flags are set).
func TestKnownEtcdPrevKVRace(t *testing.T) {
	check := func(tr *traces.Trace) []linearizability.Violation {
		res, err := linearizability.Check(tr, linearizability.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var prev []linearizability.Violation
		for _, v := range res.Violations {
			if v.Property == spec.PrevKV {
				prev = append(prev, v)
			}
		}
		if len(prev) != 1 {
			t.Fatalf("%d §3.8 violations, want 1: %v", len(prev), res.Violations)
		}
		return prev
	}
	const file = "../traces/corpus/etcd-3.7.3-prevkv-missing-at-creation.ndjson.gz"
	tr, err := traces.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if v := check(tr)[0]; !knownEtcdPrevKVRace(tr, v) {
		t.Errorf("the etcd-1 recording's violation is not recognised: %s: %s", v.Where, v.Violation)
	}
	other, _ := traces.ReadFile(file)
	other.Header.System = "kine"
	if v := check(other)[0]; knownEtcdPrevKVRace(other, v) {
		t.Errorf("excused on another system: %s", v.Violation)
	}
	past, _ := traces.ReadFile(file)
	past.Watches[0].Request.StartRevision = 84990
	if v := check(past)[0]; knownEtcdPrevKVRace(past, v) {
		t.Errorf("excused on a watch from the past: %s", v.Violation)
	}
}
