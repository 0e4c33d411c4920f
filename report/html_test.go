package report

import (
	"bytes"
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// external finds anything a page would fetch: a src or href that is not a
// fragment or a relative file, a stylesheet link, an @import.
var external = regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:|//)|<link\b|@import|<script[^>]+src=`)

// panelOf returns the HTML of violation panel id.
func panelOf(page, id string) string {
	start := strings.Index(page, `<article class="violation" id="`+id+`"`)
	if start < 0 {
		return ""
	}
	end := strings.Index(page[start+1:], "<article")
	if end < 0 {
		end = strings.Index(page[start:], "</article>")
		return page[start : start+end]
	}
	return page[start : start+1+end]
}

// Every corpus trace gets a self-contained page: the verdict table, and for
// every violation a panel with the violating response, operation or
// informer log entry highlighted, and the SPEC statement beside it.
func TestWriteHTMLCorpus(t *testing.T) {
	for _, c := range checkCorpus(t) {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, c.res, c.t, nil); err != nil {
			t.Fatalf("%s: %v", c.row.File, err)
		}
		page := buf.String()
		if m := external.FindString(page); m != "" {
			t.Errorf("%s: the page fetches something: %q", c.row.File, m)
		}
		if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.Contains(page, "</html>") {
			t.Errorf("%s: not a whole page", c.row.File)
		}
		s := NewSummary("")
		tr := s.Add(c.res, c.t)
		for i, v := range tr.Violations {
			id := fmt.Sprintf("v%d", i+1)
			panel := panelOf(page, id)
			if panel == "" {
				t.Errorf("%s: no panel %s for %s", c.row.File, id, v.Property)
				continue
			}
			if !strings.Contains(panel, "<blockquote>"+html.EscapeString(v.Statement)+"</blockquote>") {
				t.Errorf("%s: panel %s lacks the statement of %s", c.row.File, id, v.Property)
			}
			var want string
			switch v.Kind {
			case "watch":
				want = fmt.Sprintf(`<tr class="answer violating" id="%s-response" data-line="%d">`, id, v.ResponseLine)
			case "op":
				want = fmt.Sprintf(`<tr class="op violating" id="%s-op" data-line="%d">`, id, v.Op.Line)
			case "informer":
				want = fmt.Sprintf(`<tr class="entry violating" id="%s-log0" data-line="%d">`, id, v.Lines[0])
			}
			if !strings.Contains(panel, want) {
				t.Errorf("%s: panel %s (%s, %s) lacks the highlighted row %s", c.row.File, id, v.Property, v.Kind, want)
			}
			if !strings.Contains(page, `<a href="#`+id+`">`) {
				t.Errorf("%s: the index does not link %s", c.row.File, id)
			}
		}
		if (c.res.Verdict == linearizability.NotLinearizable) != strings.Contains(page, `id="porcupine-src"`) {
			t.Errorf("%s: porcupine's view embedded %v, verdict %s", c.row.File, !strings.Contains(page, "porcupine-src"), c.res.Verdict)
		}
	}
}

// synthetic builds a trace of n puts on 10 keys and one watch on them all,
// each event in a response of its own followed by a progress notification:
// n operations, 2n+1 responses. drop removes the events of those responses
// (by event number), each a Reliable violation.
func synthetic(n int, drop map[int]bool) *traces.Trace {
	t := &traces.Trace{Name: "synthetic", Header: traces.Header{Format: traces.Format, Version: traces.Version, System: "synthetic", Start: "2026-12-01T00:00:00Z", UniqueValues: true}}
	w := &traces.Watch{Line: 2, Client: 2, ID: 1, Time: 1, Request: watch.Request{Key: "k/", RangeEnd: kv.PrefixEnd("k/"), StartRevision: 2, ProgressNotify: true}}
	w.Responses = append(w.Responses, traces.WatchResponse{Line: 3, Time: 2, Response: watch.Response{Revision: 1, Created: true}})
	line := 4
	created := map[string]int64{}
	version := map[string]int64{}
	for i := 0; i < n; i++ {
		rev := int64(i + 2)
		key := fmt.Sprintf("k/%d", i%10)
		value := fmt.Sprintf("v%d", i)
		call := int64(10 + 100*i)
		t.Ops = append(t.Ops, traces.Op{Line: line, Client: 1, Call: call, Return: call + 10,
			Request:  kv.Request{Put: &kv.PutRequest{Key: key, Value: value}},
			Response: &kv.Response{Revision: rev, Put: &kv.PutResponse{}}})
		line++
		if created[key] == 0 {
			created[key] = rev
		}
		version[key]++
		ev := kv.Event{Type: kv.Put, KV: kv.KeyValue{Key: key, Value: value, CreateRevision: created[key], ModRevision: rev, Version: version[key]}}
		if !drop[i] {
			w.Responses = append(w.Responses, traces.WatchResponse{Line: line, Time: call + 20, Response: watch.Response{Revision: rev, Events: []kv.Event{ev}}})
			line++
		}
		w.Responses = append(w.Responses, traces.WatchResponse{Line: line, Time: call + 30, Response: watch.Response{Revision: rev}})
		line++
	}
	t.Watches = []*traces.Watch{w}
	return t
}

// A page shows the neighbourhood of each violation, never the whole trace:
// on a trace of 20,000 operations and 40,000 responses one violation makes
// a small page, and a thousand make a page that draws the first
// DefaultMaxViolations and lists the rest.
func TestWriteHTMLStaysSmallOnLargeTraces(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 4000
	}
	one := synthetic(n, map[int]bool{n / 2: true})
	res, err := linearizability.Check(one, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) == 0 {
		t.Fatal("no violation in the synthetic trace")
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, res, one, nil); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 100<<10 {
		t.Errorf("one violation in %d operations: a page of %d bytes", n, buf.Len())
	}
	if !strings.Contains(buf.String(), `class="answer violating"`) || !strings.Contains(buf.String(), " not shown</th>") {
		t.Errorf("the page does not show the violating response in its neighbourhood")
	}

	drop := map[int]bool{}
	for i := 100; i < n; i += n / 1000 {
		drop[i] = true
	}
	many := synthetic(n, drop)
	res, err = linearizability.Check(many, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) < 500 {
		t.Fatalf("%d violations", len(res.Violations))
	}
	buf.Reset()
	if err := WriteHTML(&buf, res, many, nil); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if got := strings.Count(page, `<article class="violation"`); got != DefaultMaxViolations {
		t.Errorf("%d panels drawn, want %d", got, DefaultMaxViolations)
	}
	if got := strings.Count(page, "<li>"); got != len(res.Violations) {
		t.Errorf("%d violations listed of %d", got, len(res.Violations))
	}
	if !strings.Contains(page, "listed here only") {
		t.Errorf("the page does not say that violations are not drawn")
	}
	if buf.Len() > 4<<20 {
		t.Errorf("%d violations: a page of %d bytes", len(res.Violations), buf.Len())
	}
}

// BenchmarkWriteHTMLLarge draws one violation in a trace of the size of a
// long conform run: 100,000 operations, 200,000 responses.
func BenchmarkWriteHTMLLarge(b *testing.B) {
	tr := synthetic(100000, map[int]bool{50000: true})
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var size int
	for i := 0; i < b.N; i++ {
		var buf bytes.Buffer
		if err := WriteHTML(&buf, res, tr, nil); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(size), "page-bytes")
}
