// Command watchspec is the command-line face of watchspec, the executable
// specification of etcd's MVCC store and watch (docs/SPEC.md).
//
// Usage:
//
//	watchspec spec [-long]      print the numbered properties of docs/SPEC.md
//	watchspec check TRACE...    check recorded traces against the specification
//
// Exit codes: 0 success, 1 a property is violated, 2 usage or input error.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand: it returns the process exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"spec":    {"print the numbered properties of docs/SPEC.md", runSpec},
	"check":   {"check recorded traces against the specification", runCheck},
	"conform": {"run the conformance workload against an etcd-v3 endpoint and check it", runConform},
	"serve":   {"serve the reference store on the etcd v3 gRPC API", runServe},
	"bench":   {"measure the reference server side by side with etcd", runBench},
	// Hidden (not in order): one server under test, run by bench.
	"bench-server": {"", runBenchServer},
}

// order lists the subcommands in the order help shows them.
var order = []string{"spec", "check", "conform", "serve", "bench"}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "watchspec: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "watchspec: the executable specification of etcd's MVCC store and watch")
	fmt.Fprintln(w, "\nUsage: watchspec <command> [flags]")
	fmt.Fprintln(w, "\nCommands:")
	for _, name := range order {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'watchspec <command> -h' for a command's flags.")
}
