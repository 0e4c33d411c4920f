package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/watchspec/watchspec/internal/corpus"
	"github.com/watchspec/watchspec/internal/jsonschema"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

// checked is one corpus trace and what the checker found.
type checked struct {
	row corpus.Row
	t   *traces.Trace
	res *linearizability.Result
}

var (
	corpusOnce    sync.Once
	corpusChecked []checked
	corpusErr     error
)

// checkCorpus checks every corpus trace, once for all the tests.
func checkCorpus(t *testing.T) []checked {
	t.Helper()
	corpusOnce.Do(func() {
		rows, err := corpus.ReadTable("../docs/CORPUS.md")
		if err != nil {
			corpusErr = err
			return
		}
		for _, row := range rows {
			tr, err := traces.ReadFile(filepath.Join("../traces/corpus", row.File))
			if err != nil {
				corpusErr = err
				return
			}
			res, err := linearizability.Check(tr, linearizability.Options{})
			if err != nil {
				corpusErr = err
				return
			}
			corpusChecked = append(corpusChecked, checked{row, tr, res})
		}
	})
	if corpusErr != nil {
		t.Fatal(corpusErr)
	}
	return corpusChecked
}

// Every violation of the corpus is located: a watch violation names the
// watch and a response of it that exists, an operation's its line, an
// informer violation the lines of the log entries at its revisions.
func TestSummaryLocatesEveryViolation(t *testing.T) {
	for _, c := range checkCorpus(t) {
		s := NewSummary("test")
		tr := s.Add(c.res, c.t)
		if len(tr.Violations) != len(c.res.Violations) {
			t.Fatalf("%s: %d violations summarised of %d", c.row.File, len(tr.Violations), len(c.res.Violations))
		}
		for _, v := range tr.Violations {
			switch v.Kind {
			case "watch":
				found := false
				for _, w := range c.t.Watches {
					if w.Client != v.Watch.Client || w.ID != v.Watch.ID || w.Line != v.Watch.Line {
						continue
					}
					for _, r := range w.Responses {
						found = found || r.Line == v.ResponseLine
					}
				}
				if !found || !reflect.DeepEqual(v.Lines, []int{v.ResponseLine, v.Watch.Line}) {
					t.Errorf("%s: %s at %q: no such watch response (lines %v)", c.row.File, v.Property, v.Where, v.Lines)
				}
			case "op":
				found := false
				for _, o := range c.t.Ops {
					found = found || o.Line == v.Op.Line && o.Client == v.Op.Client
				}
				if !found {
					t.Errorf("%s: %s at %q: no such operation", c.row.File, v.Property, v.Where)
				}
			case "informer":
				if len(v.Lines) == 0 {
					t.Errorf("%s: %s: no line of the informer log shows it", c.row.File, v.Property)
				}
			default:
				t.Errorf("%s: %s at %q: not located (kind %q)", c.row.File, v.Property, v.Where, v.Kind)
			}
			if v.Section == "" || v.Statement == "" {
				t.Errorf("%s: %s has no section or statement", c.row.File, v.Property)
			}
		}
	}
}

// The schema names exactly the fields the summary writes, definition by
// definition: it cannot drift from the code.
func TestSchemaMatchesSummaryTypes(t *testing.T) {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Defs       map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(SchemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	props := func(def string) map[string]json.RawMessage {
		if def == "" {
			return schema.Properties
		}
		d, ok := schema.Defs[def]
		if !ok {
			t.Errorf("the schema has no definition %q", def)
		}
		return d.Properties
	}
	for def, v := range map[string]any{
		"": Summary{}, "interruption": Interruption{}, "trace": Trace{}, "counts": Counts{}, "profile": Profile{},
		"violation": Violation{}, "property_verdict": PropertyVerdict{},
	} {
		have := props(def)
		var fields []string
		for _, f := range reflect.VisibleFields(reflect.TypeOf(v)) {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			fields = append(fields, name)
			if _, ok := have[name]; !ok {
				t.Errorf("schema %q lacks field %q", def, name)
			}
		}
		for name := range have {
			found := false
			for _, f := range fields {
				found = found || f == name
			}
			if !found {
				t.Errorf("schema %q has field %q that the summary does not write", def, name)
			}
		}
	}
}

// A summary validates against its schema, malformed traces and keys that
// are not UTF-8 included: such a key is written in base64, never rewritten.
func TestWriteJSONValidates(t *testing.T) {
	schema, err := jsonschema.Compile(SchemaJSON)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSummary("test")
	for _, c := range checkCorpus(t)[:6] {
		s.Add(c.res, c.t)
	}
	res := &linearizability.Result{Trace: "bytes", Verdict: linearizability.Linearizable, Method: "revision order"}
	res.Violations = []linearizability.Violation{{Where: "op at line 3 (client 1)"}}
	res.Violations[0].Property, res.Violations[0].Keys, res.Violations[0].Revisions = "WriteRevision", []string{"k\xff", "k\xfe"}, []int64{2}
	s.Add(res, nil)
	s.AddError("broken.ndjson", fmt.Errorf("broken.ndjson:7: invalid JSON at byte 3"))
	var buf bytes.Buffer
	if err := s.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(buf.Bytes()); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for _, want := range []string{`"base64": "a/8="`, `"base64": "a/4="`, `"line": 7`, `"status": 2`} {
		if !strings.Contains(regexp.MustCompile(`\s+`).ReplaceAllString(buf.String(), " "), want) {
			t.Errorf("the JSON lacks %s", want)
		}
	}
	var back Summary
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	bad := back.Traces[len(back.Traces)-2].Violations[0].Keys
	if string(bad[0]) != "k\xff" || string(bad[1]) != "k\xfe" {
		t.Errorf("keys read back as %q", bad)
	}
}

// The text report of a summary is the command's: FAIL lines with
// revisions and keys, counts, profile, table.
func TestWriteText(t *testing.T) {
	var fail checked
	for _, c := range checkCorpus(t) {
		if c.row.File == "etcd-15220-progress-overtakes-events.ndjson" {
			fail = c
		}
	}
	s := NewSummary("test")
	s.Add(fail.res, fail.t)
	s.Interrupted = &Interruption{AfterSeconds: 12.4, While: "recording"}
	var buf bytes.Buffer
	if err := s.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"FAIL Bookmarkable ../traces/corpus/etcd-15220-progress-overtakes-events.ndjson watch 1 of client 2 (line 5), response at line 8 revisions=[4 3 4] keys=[\"/registry/pods/default/a\"]: progress notification at revision 4",
		": 3 operations, 1 watches, 5 watch responses; linearizable (revision order)",
		"profile: none (full conformance)",
		"interrupted after 12 s while recording",
		"3.6   Bookmarkable       1        FAIL (1)",
		"3.11  CompactedCancel    0        not exercised",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "4.1") {
		t.Errorf("the Kubernetes rows are shown without an informer run:\n%s", buf.String())
	}
}
