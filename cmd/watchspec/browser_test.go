package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/report"
	"github.com/watchspec/watchspec/traces"
)

var screenshot = flag.String("screenshot", "", "write a screenshot (PNG) of the trace viewer on the etcd#15220 corpus trace to `PATH` (docs/viewer-watch-violation.png)")

// The environment variables of the browser test.
const (
	requireBrowserEnv = "WATCHSPEC_REQUIRE_BROWSER" // set (CI sets it): no Chromium is a failure, not a skip
	chromiumEnv       = "WATCHSPEC_CHROMIUM"        // the browser to use, when not on the PATH
)

// chromium finds a Chromium to drive: $WATCHSPEC_CHROMIUM, or one on the
// PATH. With none, the test is skipped — unless WATCHSPEC_REQUIRE_BROWSER
// is set, as .ci/run sets it, and then it fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(requireBrowserEnv) != "" {
		t.Fatalf("no Chromium found (chromium, chromium-browser, google-chrome on the PATH, or $%s) and $%s is set: install Debian's chromium (apt-get install chromium), as .ci/run does", chromiumEnv, requireBrowserEnv)
	}
	t.Skipf("no Chromium found (chromium, chromium-browser, google-chrome on the PATH, or $%s): skipping the browser test; install Debian's chromium (apt-get install chromium) to run it. CI sets $%s, so it never skips there", chromiumEnv, requireBrowserEnv)
	return ""
}

// browser opens a headless Chromium tab that records every script error,
// console error and request that leaves the page's own files.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1400, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	if err := chromedp.Listen(ctx, b.observe); err != nil {
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *browser) observe(ev any) {
	var problem string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		problem = fmt.Sprintf("script exception: %s", d.Text)
		if d.Exception != nil {
			problem += " " + d.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			problem = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError {
			problem = fmt.Sprintf("browser error (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		if u := ev.Request.URL; !strings.HasPrefix(u, "file://") && !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, "about:") {
			problem = "the page fetched " + u
		}
	}
	if problem != "" {
		b.mu.Lock()
		b.problems = append(b.problems, problem)
		b.mu.Unlock()
	}
}

// open loads a page and waits until its script has run.
func (b *browser) open(t *testing.T, path string) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b.ctx,
		chromedp.Navigate("file://"+abs),
		chromedp.WaitReady(chromedp.CSS(`body[data-viewer-ready="1"]`)),
	); err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// noProblems fails the test for every script error, console error or
// fetch seen so far.
func (b *browser) noProblems(t *testing.T, page string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("%s: %s", page, p)
	}
	b.problems = nil
}

// highlighted is what the page shows of its highlighted row.
type highlighted struct {
	ID, Line, Text, Background string
	Height, Width              float64
	InPanel                    string
}

const findHighlighted = `(() => {
  const r = document.querySelector(%q);
  if (!r) { return null; }
  const box = r.getBoundingClientRect();
  const cell = r.querySelector("td");
  return { ID: r.id, Line: r.dataset.line, Text: r.textContent, Background: getComputedStyle(cell).backgroundColor,
           Height: box.height, Width: box.width, InPanel: r.closest("article.violation").id };
})()`

// The trace viewer in a real browser: on the etcd#15220 corpus trace (a
// progress notification that overtakes events, SPEC §3.6), the violating
// response is drawn, highlighted and found from the index; on an informer
// violation and a history that is not linearizable (porcupine's view shown
// in the page) too; and no page has a script error or fetches anything.
func TestViewerInBrowser(t *testing.T) {
	b := newBrowser(t)
	t.Chdir("../..") // the traces named as a user at the repository's root names them
	dir := t.TempDir()
	watchTrace := "traces/corpus/etcd-15220-progress-overtakes-events.ndjson"
	informerTrace := "traces/corpus/kubernetes-115620-relist-leaks-object.ndjson"
	code, out, errOut := runCLI("check", "-q", "--html", dir, watchTrace, informerTrace, "traces/corpus/stale-read.ndjson")
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}

	// A watch violation.
	page := filepath.Join(dir, filepath.Base(watchTrace)+".html")
	b.open(t, page)
	h := eval[*highlighted](t, b, fmt.Sprintf(findHighlighted, "tr.answer.violating"))
	if h == nil {
		t.Fatalf("%s: no highlighted response", page)
	}
	if h.ID != "v1-response" || h.Line != "8" || h.InPanel != "v1" || !strings.Contains(h.Text, "◆") || !strings.Contains(h.Text, "progress notification") {
		t.Errorf("the highlighted response is not the violating progress notification at line 8: %+v", h)
	}
	if h.Height <= 0 || h.Width <= 0 {
		t.Errorf("the highlighted response is not drawn: %+v", h)
	}
	if h.Background != "rgb(255, 241, 168)" {
		t.Errorf("the violating response is not highlighted: background %s", h.Background)
	}
	owed := eval[int](t, b, `document.querySelectorAll("tr.answer.violating td.owed").length`)
	if owed != 2 {
		t.Errorf("%d events marked as owed by the notification, want 2 (revisions 3 and 4)", owed)
	}
	statement := eval[string](t, b, `document.querySelector("#v1 aside.spec blockquote").textContent`)
	if !strings.HasPrefix(statement, "A progress notification at revision R means") {
		t.Errorf("the SPEC statement beside the timeline: %q", statement)
	}
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent("j")); err != nil {
		t.Fatal(err)
	}
	if hash := eval[string](t, b, `location.hash`); hash != "#v1" {
		t.Errorf("j did not go to the first violation: hash %q", hash)
	}
	if *screenshot != "" {
		if err := chromedp.Do(b.ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
			t.Fatal(err)
		}
		shot, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*screenshot, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.noProblems(t, page)

	// An informer violation: the log entry that shows it.
	page = filepath.Join(dir, filepath.Base(informerTrace)+".html")
	b.open(t, page)
	h = eval[*highlighted](t, b, fmt.Sprintf(findHighlighted, "tr.entry.violating"))
	if h == nil || h.InPanel != "v1" || !strings.Contains(h.Text, "OnAdd") || h.Height <= 0 {
		t.Errorf("%s: the highlighted log entry: %+v", page, h)
	}
	if n := eval[int](t, b, `document.querySelectorAll("#v1 td.differs").length`); n != 1 {
		t.Errorf("%s: %d handler views marked as differing from the store at the end, want 1", page, n)
	}
	b.noProblems(t, page)

	// Porcupine's view, linked by check --html, and embedded by the Go API:
	// shown on demand, with porcupine's own script running error-free.
	page = filepath.Join(dir, "stale-read.ndjson.html")
	b.open(t, page)
	if href := eval[string](t, b, `document.getElementById("porcupine-link").getAttribute("href")`); href != "stale-read.ndjson.porcupine.html" {
		t.Errorf("porcupine's view is linked as %q", href)
	}
	if h := eval[*highlighted](t, b, fmt.Sprintf(findHighlighted, "tr.op.violating")); h == nil || h.Line != "4" {
		t.Errorf("%s: the highlighted operation: %+v", page, h)
	}
	b.noProblems(t, page)
	embedded := filepath.Join(dir, "embedded.html")
	tr, err := traces.ReadFile("traces/corpus/stale-read.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(embedded, func(w io.Writer) error { return report.WriteHTML(w, res, tr, nil) }); err != nil {
		t.Fatal(err)
	}
	b.open(t, embedded)
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#porcupine-show"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`(() => { const f = document.querySelector("#porcupine-frame iframe"); return !!f && !!f.contentDocument && f.contentDocument.readyState === "complete" && f.contentDocument.querySelectorAll("svg, canvas, div").length > 0; })()`)); err != nil {
		t.Errorf("porcupine's view did not load in the page: %v", err)
	}
	b.noProblems(t, embedded)
}
