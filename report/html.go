package report

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// HTMLOptions tune [WriteHTML]. The zero value (or nil) embeds porcupine's
// view and draws up to [DefaultMaxViolations] violations.
type HTMLOptions struct {
	// Tool names what checked, as the page says it ("watchspec check").
	Tool string
	// Reproduce is the command that repeats the run, shown at the top.
	Reproduce string
	// Interrupted says the run was cut short.
	Interrupted *Interruption
	// PorcupineHref, when set, is where porcupine's view of a history that
	// is not linearizable was written ([linearizability.Result.Visualize]):
	// the page links to it instead of embedding it.
	PorcupineHref string
	// MaxViolations bounds how many violations are drawn (0: the default);
	// every violation is listed.
	MaxViolations int
}

// DefaultMaxViolations is how many violations a page draws by default.
const DefaultMaxViolations = 50

//go:embed viewer.css
var viewerCSS string

//go:embed viewer.js
var viewerJS string

//go:embed viewer.html
var viewerHTML string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"lines": func(ls []int) string {
		var parts []string
		for _, l := range ls {
			parts = append(parts, fmt.Sprint(l))
		}
		return strings.Join(parts, ", ")
	},
	"keys": func(v Violation) string { return spec.FormatKeys(keyStrings(v)) },
	"revs": spec.FormatRevisions,
}).Parse(viewerHTML))

// WriteHTML writes one self-contained HTML page (inline CSS and script,
// nothing fetched) that shows what the check of t found: the verdict
// table, and for each violation the committed history around it
// (revisions by keys) with the watch's responses — or the operations, or
// the informer's and its handlers' views of each key — laid against it,
// the violating one highlighted, and the property's statement from
// docs/SPEC.md beside it. A history that is not linearizable gets
// porcupine's view, embedded or linked (opts.PorcupineHref).
//
// res is what [linearizability.Check] found for t. The page shows the
// neighbourhood of each violation, never the whole trace, so it stays
// small and quick for a trace of any size. opts may be nil.
func WriteHTML(w io.Writer, res *linearizability.Result, t *traces.Trace, opts *HTMLOptions) error {
	if res == nil || t == nil {
		return errors.New("report.WriteHTML: needs the result and the trace it is about")
	}
	if opts == nil {
		opts = &HTMLOptions{}
	}
	limit := opts.MaxViolations
	if limit <= 0 {
		limit = DefaultMaxViolations
	}
	s := NewSummary(opts.Tool)
	s.Reproduce, s.Interrupted = opts.Reproduce, opts.Interrupted
	tr := s.Add(res, t)
	s.Finish()
	p := &page{Summary: s, Trace: tr, Tool: opts.Tool, CSS: template.CSS(viewerCSS), JS: template.JS(viewerJS)}
	p.Title = fmt.Sprintf("watchspec: %s", tr.Name)
	switch {
	case tr.Status == StatusOK:
		p.Verdict, p.VerdictClass = "every property holds", "ok"
	case len(tr.Violations) > 0:
		p.Verdict, p.VerdictClass = fmt.Sprintf("FAIL: %d violation%s", len(tr.Violations), plural(len(tr.Violations))), "fail"
	default:
		p.Verdict, p.VerdictClass = "UNKNOWN: porcupine ran out of time", "unknown"
	}
	p.Title += " — " + p.Verdict
	if tr.Profile != nil {
		p.Profile = tr.Profile.Name
	} else {
		p.Profile = "none (full conformance)"
	}
	firstOf := map[string]string{}
	watches := map[[2]int]*traces.Watch{}
	for _, w := range t.Watches {
		watches[[2]int{w.Client, w.ID}] = w
	}
	known := map[*traces.Watch]*watchFacts{}
	facts := func(w *traces.Watch) *watchFacts {
		if known[w] == nil {
			known[w] = watchFactsOf(w)
		}
		return known[w]
	}
	for i, v := range tr.Violations {
		id := fmt.Sprintf("v%d", i+1)
		item := indexItem{ID: id, V: v}
		if i < limit {
			item.Drawn = true
			p.Panels = append(p.Panels, buildPanel(id, v, res, t, watches, facts))
			if _, ok := firstOf[v.Property]; !ok {
				firstOf[v.Property] = id
			}
		}
		p.Index = append(p.Index, item)
	}
	p.Hidden = len(tr.Violations) - len(p.Panels)
	for _, pv := range s.Properties {
		if !tr.informer && kubernetesSection(pv.Section) && pv.Failed == 0 {
			continue
		}
		p.Properties = append(p.Properties, propertyRow{PropertyVerdict: pv, First: firstOf[pv.Property]})
	}
	if res.Verdict == linearizability.NotLinearizable {
		p.HasPorcupine = true
		if opts.PorcupineHref != "" {
			p.PorcupineHref = opts.PorcupineHref
		} else {
			var buf bytes.Buffer
			if err := res.Visualize(&buf); err == nil {
				p.PorcupineSrc = buf.String()
			} else if !errors.Is(err, linearizability.ErrNothingToDraw) {
				return fmt.Errorf("drawing porcupine's view: %v", err)
			}
		}
	}
	return pageTemplate.Execute(w, p)
}

type page struct {
	Title        string
	Tool         string
	Summary      *Summary
	Trace        *Trace
	Verdict      string
	VerdictClass string
	Profile      string
	Properties   []propertyRow
	Index        []indexItem
	Panels       []*panel
	Hidden       int
	HasPorcupine bool
	// PorcupineHref links porcupine's page; PorcupineSrc embeds it.
	PorcupineHref string
	PorcupineSrc  string
	CSS           template.CSS
	JS            template.JS
}

type propertyRow struct {
	PropertyVerdict
	First string
}

type indexItem struct {
	ID    string
	V     Violation
	Drawn bool
}

// panel is one violation drawn.
type panel struct {
	ID       string
	V        Violation
	Model    string
	Source   string
	Timeline *timeline
	Ops      []opRow
	Informer []informerTable
	Note     string
}

func buildPanel(id string, v Violation, res *linearizability.Result, t *traces.Trace, watches map[[2]int]*traces.Watch, facts func(*traces.Watch) *watchFacts) *panel {
	p := &panel{ID: id, V: v}
	if e, ok := spec.Lookup(spec.Property(v.Property)); ok {
		p.Model, p.Source = e.Model, e.Source
	}
	keys := keyStrings(v)
	switch v.Kind {
	case "watch":
		w := watches[[2]int{v.Watch.Client, v.Watch.ID}]
		if w == nil {
			p.Note = "the trace has no such watch"
			break
		}
		ri := -1
		for i, r := range w.Responses {
			if r.Line == v.ResponseLine {
				ri = i
			}
		}
		if ri < 0 {
			p.Note = "the watch has no response at that line"
			break
		}
		p.Timeline = watchTimeline(res.History, w, ri, v.Revisions, keys, id, facts)
	case "op":
		p.Timeline, p.Ops = opView(t, res.History, v.Op.Line, v.Revisions, keys, id)
		if p.Ops == nil {
			p.Note = "the trace has no operation at that line"
		}
		if v.Property == string(spec.Linearizable) {
			p.Note = "No order of the operations explains every response, so there is no committed history to draw: porcupine's view below shows the longest linearizable prefixes and where each got stuck."
		}
	case "informer":
		sv := spec.Violation{Property: spec.Property(v.Property), Revisions: v.Revisions, Keys: keys, Message: v.Message}
		p.Informer = informerTables(t, res.History, sv, id)
	}
	return p
}
