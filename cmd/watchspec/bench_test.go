package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// findCheckout finds the repository root from a directory inside it, and
// says what is missing when no directory given is inside a checkout.
func TestFindCheckout(t *testing.T) {
	root, err := findCheckout("testdata-that-does-not-exist", ".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "tests", "cmd", "bench", "main.go")); err != nil {
		t.Fatalf("findCheckout(.) = %s, not the repository root: %v", root, err)
	}
	elsewhere := t.TempDir()
	if _, err := findCheckout(elsewhere); err == nil || !strings.Contains(err.Error(), "checkout") || !strings.Contains(err.Error(), elsewhere) {
		t.Fatalf("findCheckout(%s) = %v, want an error naming the directory and asking for a checkout", elsewhere, err)
	}
}

// `watchspec bench -h` builds the bench of the tests module and prints its
// usage: the command forwards to tests/cmd/bench.
func TestBenchForwards(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bench (it links etcd): skipped with -short")
	}
	code, stdout, stderr := runCLI("bench", "-h")
	if code != 0 || !strings.Contains(stdout+stderr, "Usage: watchspec bench") || !strings.Contains(stdout+stderr, "-vs-etcd") {
		t.Fatalf("watchspec bench -h: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
