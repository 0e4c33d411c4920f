package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/model/spec"
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
