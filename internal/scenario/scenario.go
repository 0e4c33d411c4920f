// Package scenario runs scripted tests written as text files, in the manner
// of go.etcd.io/raft's data-driven tests: a file is a list of commands, each
// followed by the output it must produce.
//
//	# A comment, kept as is.
//	put a 1
//	----
//	rev=2
//
//	recv w1 events a@2
//	----
//	ok
//
// A command is one line (a line ending in a backslash continues on the next).
// Its expected output follows a line of exactly "----" and ends at the next
// blank line, so it cannot contain blank lines.
//
// When a test runs with -update (the name the traces corpus uses too), the expected outputs in the files are
// replaced by what the commands produced. Review the diff before committing:
// only commit a rewrite you understand.
//
// This package is for tests only.
package scenario

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("update", false, "rewrite the expected outputs of scenario files")

// Command is one command of a scenario file.
type Command struct {
	// Pos is "file:line" of the command, for messages.
	Pos string
	// Line is the command line, continuations joined with a space.
	Line string
	// Name is the first word of Line; Args are the others.
	Name string
	Args []string
}

// Arg returns the value of the argument "key=value", or def when absent.
func (c Command) Arg(key, def string) string {
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok && k == key {
			return v
		}
	}
	return def
}

// Flag reports whether the bare argument name is present.
func (c Command) Flag(name string) bool {
	for _, a := range c.Args {
		if a == name {
			return true
		}
	}
	return false
}

type entry struct {
	cmd      Command
	expected string
	// where the entry's lines are in the file: the command at [start, sep),
	// the "----" line at sep, the expected output up to end
	start, sep, end int
}

// Walk runs RunFile on every *.txt file in dir, each as a subtest named after the file.
func Walk(t *testing.T, dir string, handle func(t *testing.T) func(Command) string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenario files in %s", dir)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			RunFile(t, f, handle(t))
		})
	}
}

// RunFile runs the commands of one file in order through handle, comparing
// each output with the expected one (or rewriting it under -update).
func RunFile(t *testing.T, path string, handle func(Command) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	entries, err := parse(path, lines)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	prev := 0
	for _, e := range entries {
		got := strings.TrimRight(handle(e.cmd), "\n")
		if *rewrite {
			out = append(out, lines[prev:e.sep]...)
			out = append(out, "----")
			if got != "" {
				out = append(out, strings.Split(got, "\n")...)
			}
			prev = e.end
			continue
		}
		if got != e.expected {
			t.Errorf("%s: %s\nexpected:\n%s\ngot:\n%s", e.cmd.Pos, e.cmd.Line, e.expected, got)
		}
	}
	if *rewrite {
		out = append(out, lines[prev:]...)
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func parse(path string, lines []string) ([]entry, error) {
	var entries []entry
	for i := 0; i < len(lines); {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			i++
			continue
		}
		start := i
		cmdLine := strings.TrimSpace(lines[i])
		for strings.HasSuffix(cmdLine, `\`) && i+1 < len(lines) {
			i++
			cmdLine = strings.TrimSuffix(cmdLine, `\`) + " " + strings.TrimSpace(lines[i])
		}
		i++
		if i >= len(lines) || strings.TrimSpace(lines[i]) != "----" {
			return nil, fmt.Errorf("%s:%d: command %q is not followed by a line \"----\"", path, start+1, cmdLine)
		}
		sep := i
		i++
		var exp []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			exp = append(exp, lines[i])
			i++
		}
		fields := strings.Fields(cmdLine)
		entries = append(entries, entry{
			cmd: Command{
				Pos:  fmt.Sprintf("%s:%d", path, start+1),
				Line: cmdLine,
				Name: fields[0],
				Args: fields[1:],
			},
			expected: strings.Join(exp, "\n"),
			start:    start,
			sep:      sep,
			end:      i,
		})
	}
	return entries, nil
}
