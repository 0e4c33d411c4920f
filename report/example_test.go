package report_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/report"
	"github.com/watchspec/watchspec/traces"
)

// Check a trace, summarise it as text and JSON, and draw its page.
func Example() {
	t, err := traces.ReadFile("../traces/corpus/etcd-17247-duplicated-event.ndjson")
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := linearizability.Check(t, linearizability.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := report.NewSummary("example")
	tr := s.Add(res, t)
	tr.WriteFailures(os.Stdout)
	fmt.Println(tr.CountsLine())

	var js bytes.Buffer
	s.WriteJSON(&js)
	fmt.Println("status", s.Status, "lines", tr.Violations[0].Lines)

	var page bytes.Buffer
	report.WriteHTML(&page, res, t, nil)
	fmt.Println(strings.Contains(page.String(), `<tr class="answer violating" id="v1-response" data-line="5">`))
	// Output:
	// FAIL Unique ../traces/corpus/etcd-17247-duplicated-event.ndjson watch 1 of client 2 (line 3), response at line 5 revisions=[2] keys=["/registry/pods/default/b"]: event at revision 2 on "/registry/pods/default/b" delivered twice
	// ../traces/corpus/etcd-17247-duplicated-event.ndjson: 1 operations, 1 watches, 2 watch responses; linearizable (revision order)
	// status 1 lines [5 3]
	// true
}
