package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/internal/corpus"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// The spec table lists every property with its section number.
func TestSpecPrintsEveryProperty(t *testing.T) {
	code, out, _ := runCLI("spec")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, e := range spec.Catalog() {
		found := false
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == e.Section && f[1] == string(e.Property) {
				found = true
			}
		}
		if !found {
			t.Errorf("no row \"%s %s\" in:\n%s", e.Section, e.Property, out)
		}
	}
	_, long, _ := runCLI("spec", "-long")
	if !strings.Contains(long, "watch.(*Validator).ordered") {
		t.Errorf("-long omits the model functions:\n%s", long)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"spec", "extra"}, {"spec", "-nope"}} {
		if code, _, _ := runCLI(args...); code != 2 {
			t.Errorf("watchspec %v: exit %d, want 2", args, code)
		}
	}
	if code, out, _ := runCLI("help"); code != 0 || !strings.Contains(out, "spec") {
		t.Errorf("help: exit %d, output %q", code, out)
	}
}

// `watchspec check` passes every valid corpus trace (exit 0) and fails every
// bug trace (exit 1) with FAIL lines naming exactly the expected properties
// (docs/CORPUS.md).
func TestCheckCorpus(t *testing.T) {
	rows, err := corpus.ReadTable("../../docs/CORPUS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		t.Run(row.File, func(t *testing.T) {
			code, out, errOut := runCLI("check", "-q", filepath.Join("../../traces/corpus", row.File))
			failed := map[string]bool{}
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) > 2 && f[0] == "FAIL" {
					failed[f[1]] = true
					if !strings.Contains(line, row.File) {
						t.Errorf("a FAIL line does not name the trace: %s", line)
					}
				}
			}
			want := map[string]bool{}
			for _, p := range row.Expected {
				want[string(p)] = true
			}
			if len(want) == 0 && code != 0 || len(want) > 0 && code != 1 {
				t.Errorf("exit %d\n%s%s", code, out, errOut)
			}
			if !reflect.DeepEqual(failed, want) {
				t.Errorf("FAIL lines name %v, want %v\n%s", failed, want, out)
			}
			// The trace's own profile, from its header; none means full conformance.
			tr, err := traces.ReadFile(filepath.Join("../../traces/corpus", row.File))
			if err != nil {
				t.Fatal(err)
			}
			wantProfile := "profile: none (full conformance)"
			if tr.Header.Profile != "" {
				wantProfile = "profile: " + tr.Header.Profile + " (allowances in force: NOT full conformance)"
				if p, err := linearizability.LookupProfile(tr.Header.Profile); err == nil && len(p.Allowances) == 0 {
					wantProfile = "profile: " + tr.Header.Profile + " (expectations beyond etcd's guarantees"
				}
			}
			if !strings.Contains(out, wantProfile) {
				t.Errorf("the report does not say which profile was in force (want %q):\n%s", wantProfile, out)
			}
		})
	}
}

// Malformed or unreadable traces exit 2 with file:line.
func TestCheckMalformed(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.ndjson")
	os.WriteFile(bad, []byte(`{"format":"watchspec-trace","version":1,"system":"x","start":"2026-11-29T21:00:00Z"}`+"\n{nope\n"), 0o644)
	code, _, errOut := runCLI("check", bad)
	if code != 2 || !strings.Contains(errOut, bad+":2: invalid JSON") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLI("check", filepath.Join(dir, "missing.ndjson"))
	if code != 2 || !strings.Contains(errOut, "missing.ndjson") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runCLI("check"); code != 2 {
		t.Errorf("no trace: exit %d", code)
	}
}

// A non-linearizable trace with --html gets the trace viewer's page, and
// porcupine's visualisation beside it, which the page links.
func TestCheckWritesHTML(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := runCLI("check", "-q", "--html", dir, "../../traces/corpus/stale-read.ndjson")
	if code != 1 || !strings.Contains(out, "report of ") || !strings.Contains(out, "porcupine's visualisation of") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	page, err := os.ReadFile(filepath.Join(dir, "stale-read.ndjson.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `href="stale-read.ndjson.porcupine.html"`) {
		t.Errorf("the page does not link porcupine's view")
	}
	if _, err := os.Stat(filepath.Join(dir, "stale-read.ndjson.porcupine.html")); err != nil {
		t.Fatal(err)
	}
}

// The README's main command: conform against the embedded reference server
// completes, prints the table and exits 0; a bad flag exits 2.
func TestConformEmbedded(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI("conform", "-q", "--duration", "1s", "--clients", "2", "--watchers", "2", "--report", dir, "--restart-every", "400ms")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"3.6   Bookmarkable", "profile: none (full conformance)", "report: " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"trace.ndjson.gz", "report.txt", "report.json", "report.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// SPEC §2.9–§2.11: the default run has lease clients (--leases 2).
	if tr, err := traces.ReadFile(filepath.Join(dir, "trace.ndjson.gz")); err != nil {
		t.Error(err)
	} else if len(tr.LeaseOps) == 0 {
		t.Errorf("the default run recorded no lease operations; want --leases 2's clients")
	}
	for _, args := range [][]string{{"conform", "--duration", "0s"}, {"conform", "--clients", "0"}, {"conform", "--endpoints", "x", "--restart-every", "1s"}, {"conform", "extra"}} {
		if code, _, _ := runCLI(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	// The default --restart-every (10s) applies to the embedded server only:
	// with --endpoints, the error is the endpoint's, not the flag's.
	if code, _, errOut := runCLI("conform", "-q", "--endpoints", "http://127.0.0.1:1", "--duration", "1s"); code != 2 || errOut == "" || strings.Contains(errOut, "restart-every") {
		t.Errorf("an unreachable endpoint: exit %d, stderr %q", code, errOut)
	}
}
