package conform

import (
	"fmt"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

// logEvidence prints, for a failed run against a real system, what the
// test log must hold to judge the first watch violation without the trace
// (a CI log is often all there is): the watch's request and its responses
// up to the violating one, every compaction with its call, return and
// outcome, and the disruptions. It prints nothing when no violation names a
// watch response.
func logEvidence(t *testing.T, tr *traces.Trace, res *linearizability.Result) {
	t.Helper()
	var b strings.Builder
	logEvidenceTo(&b, tr, res)
	if b.Len() > 0 {
		t.Log(b.String())
	}
}

// logEvidenceTo writes logEvidence's text to b.
func logEvidenceTo(b *strings.Builder, tr *traces.Trace, res *linearizability.Result) {
	for _, v := range res.Violations {
		var wline, rline int
		if _, err := fmt.Sscanf(v.Where[strings.Index(v.Where, "(line")+1:], "line %d), response at line %d", &wline, &rline); err != nil {
			continue
		}
		for _, w := range tr.Watches {
			if w.Line != wline {
				continue
			}
			fmt.Fprintf(b, "evidence for %s:\n  watch %d at %v: %+v\n", v.Where, w.ID, w.Time, w.Request)
			for _, r := range w.Responses {
				if r.Line > rline {
					break
				}
				fmt.Fprintf(b, "  response line %d at %d: header %d created %v canceled %v compact %d progress %v err %q events",
					r.Line, r.Time, r.Response.Revision, r.Response.Created, r.Response.Canceled, r.Response.CompactRevision,
					r.Response.IsProgressNotify(), r.Error)
				for _, e := range r.Response.Events {
					prev := "-"
					if e.PrevKV != nil {
						prev = fmt.Sprint(e.PrevKV.ModRevision)
					}
					fmt.Fprintf(b, " [%d %v %s c%d prev %s]", e.KV.ModRevision, e.Type, e.KV.Key[strings.LastIndex(e.KV.Key[:max(0, len(e.KV.Key)-1)], "/")+1:], e.KV.CreateRevision, prev)
				}
				b.WriteString("\n")
			}
		}
		for _, o := range tr.Ops {
			if o.Request.Compact == nil {
				continue
			}
			out := "ok"
			switch {
			case o.Response == nil:
				out = "unknown: " + o.Error
			case o.Response.Err != nil:
				out = o.Response.Err.Error()
			}
			fmt.Fprintf(b, "  compact %d: call %d return %d: %s\n", o.Request.Compact.Revision, o.Call, o.Return, out)
		}
		for _, a := range tr.Annotations {
			fmt.Fprintf(b, "  %s %d–%d: %s\n", a.Tag, a.Time, a.End, a.Text)
		}
		return
	}
}

// A failed run's log holds the violating watch's responses and the
// compactions (SPEC §3.8 PrevKV is judged from exactly these): kine-4's
// trace, a watch given prev_kv it did not ask for, shows it.
func TestLogEvidenceShowsTheWatch(t *testing.T) {
	tr, err := traces.ReadFile("../traces/corpus/kine-4-prevkv-not-asked.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	res, err := linearizability.Check(tr, linearizability.Options{Profile: linearizability.FullConformance})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) == 0 {
		t.Fatal("kine-4's trace passed: it is meant to fail §3.8 PrevKV")
	}
	var got strings.Builder
	logEvidenceTo(&got, tr, res)
	out := got.String()
	for _, want := range []string{"evidence for watch", "response line", "prev "} {
		if !strings.Contains(out, want) {
			t.Errorf("the evidence lacks %q:\n%s", want, out)
		}
	}
}
