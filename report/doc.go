// Package report turns what the checker found into reports: a [Summary] —
// data, written as JSON valid against its schema ([SchemaJSON],
// summary.schema.json) or as the text table `watchspec check` prints — and,
// by its own call, the trace viewer: one self-contained HTML page per trace
// ([WriteHTML]).
//
// Start from [linearizability.Check]'s Result and the trace it checked:
//
//	s := report.NewSummary("my tool")
//	res, err := linearizability.Check(t, linearizability.Options{})
//	if err != nil { ... }           // the trace cannot be checked: s.AddError(name, err)
//	s.Add(res, t)                   // one trace at a time; s keeps neither
//	s.WriteJSON(os.Stdout)          // or s.WriteText(os.Stdout)
//	report.WriteHTML(f, res, t, nil) // the page, to any io.Writer
//
// The page needs no network: its CSS and script are inline, and it fetches
// nothing. It shows the verdict table and, for each violation, the
// committed history around it (revisions by keys) with the watch's
// responses — or the operations, or the informer's and its handlers' views
// of each key — laid against it, the violating one highlighted and the
// property's statement from docs/SPEC.md beside it; porcupine's view of a
// history that is not linearizable is embedded or linked. It draws the
// neighbourhood of each violation, never the whole trace, so it stays small
// for a trace of any size. docs/REPORTS.md describes the page and every
// field of the summary.
//
// The package depends on the checker, the trace format and the model only.
package report
