package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
)

// The bench links an embedded etcd, so it lives in the tests module
// (tests/cmd/bench, package tests/bench), not in the module third parties
// import; `watchspec bench` builds it from the checkout it is run in and
// runs it with the same flags.

// runBench is `watchspec bench`: it builds tests/cmd/bench of the checkout
// (found from the working directory, else from this program's source) and
// runs it with args, in the working directory, with this process's
// standard streams when they are the terminal's (stdout and stderr
// otherwise), and returns its exit status.
func runBench(args []string, stdout, stderr io.Writer) int {
	_, src, _, _ := runtime.Caller(0)
	wd, _ := os.Getwd()
	root, err := findCheckout(wd, filepath.Join(filepath.Dir(src), "..", ".."))
	if err != nil {
		fmt.Fprintf(stderr, "watchspec bench: %v\n", err)
		return 2
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(stderr, "watchspec bench: the bench is built with the go command, and none is on PATH (%v)\n", err)
		return 2
	}
	tmp, err := os.MkdirTemp("", "watchspec-bench-")
	if err != nil {
		fmt.Fprintf(stderr, "watchspec bench: %v\n", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bench")
	build := exec.Command(goCmd, "build", "-o", bin, "./cmd/bench")
	build.Dir = filepath.Join(root, "tests")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(stderr, "watchspec bench: building the bench (go build ./cmd/bench in %s): %v\n%s", build.Dir, err, out)
		return 2
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// An interrupt at the terminal reaches the bench too, which stops its
	// servers and exits; this process waits for it.
	signal.Ignore(os.Interrupt)
	defer signal.Reset(os.Interrupt)
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "watchspec bench: running the bench: %v\n", err)
		return 2
	}
	return 0
}

// findCheckout returns the first of dirs (or of their parents) that is the
// root of a checkout of watchspec with its tests module: go.mod names
// module github.com/watchspec/watchspec and tests/cmd/bench exists.
func findCheckout(dirs ...string) (string, error) {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		d, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		for {
			if isCheckout(d) {
				return d, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("the bench (tests/cmd/bench) is built from a checkout of github.com/watchspec/watchspec, and neither %s nor its parents is one: run it inside a clone (git clone, cd into it, go run ./cmd/watchspec bench)", strings.Join(nonEmpty(dirs), " nor "))
}

func isCheckout(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "tests", "cmd", "bench", "main.go")); err != nil {
		return false
	}
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "module github.com/watchspec/watchspec" {
			return true
		}
	}
	return false
}

func nonEmpty(s []string) []string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}
