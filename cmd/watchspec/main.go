// Command watchspec is the command-line face of watchspec, the executable
// specification of etcd's MVCC store and watch, and of Kubernetes
// list/watch and the informer contract (docs/SPEC.md).
//
// Usage:
//
//	watchspec spec [-long]              print the numbered properties of docs/SPEC.md
//	watchspec check [flags] TRACE...    check recorded traces against the specification ("-": standard input)
//	watchspec conform [flags]           run the conformance workload against an etcd-v3 endpoint and check it
//	watchspec serve [flags]             serve the reference store on the etcd v3 gRPC API
//	watchspec bench [flags]             measure the reference server side by side with etcd
//	watchspec help [command]            print this usage, or a command's
//
// `check` and `conform` print a FAIL line per violation and a table of the
// properties; `check --json` and every conform report give the same as JSON
// (report/summary.schema.json), and `check --html DIR` and every conform
// report draw each trace as a page (docs/REPORTS.md).
//
// Exit codes: 0 success, 1 a property is violated, 2 usage or input error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// stdin is what `check -` reads (a variable, for tests).
var stdin io.Reader = os.Stdin

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
}

// order lists the subcommands in the order help shows them.
var order = []string{"spec", "check", "conform", "serve", "bench"}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		c, ok := commands[args[1]]
		if !ok || c.summary == "" {
			fmt.Fprintf(stderr, "watchspec help: unknown command %q\n\n", args[1])
			usage(stderr)
			return 2
		}
		// A command's -h prints its usage; asked for, it goes to stdout.
		return c.run([]string{"-h"}, stdout, stdout)
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
	fmt.Fprintln(w, "watchspec: the executable specification of etcd's MVCC store and watch, and of Kubernetes list/watch and informers")
	fmt.Fprintln(w, "\nUsage: watchspec <command> [flags]")
	fmt.Fprintln(w, "\nCommands:")
	for _, name := range order {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'watchspec help <command>' or 'watchspec <command> -h' for a command's flags.")
}

// parseFlags parses args with fs, taking flags anywhere among the
// arguments: "check a.ndjson -q b.ndjson" is "check -q a.ndjson b.ndjson".
// A "--" ends the flags; "-" is an argument (standard input). It returns
// the arguments, and, when it fails, the exit status: 0 when help was asked
// for (fs's usage is then printed to stdout), 2 otherwise (the error and the
// usage to stderr). fs must write its usage with its Output.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, int, bool) {
	fs.SetOutput(io.Discard) // flag prints its error and the usage itself: let this decide where
	var rest []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil, 0, false
		}
		if err != nil {
			fs.SetOutput(stderr)
			fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
			fs.Usage()
			return nil, 2, false
		}
		consumed := len(args) - fs.NArg()
		if consumed > 0 && args[consumed-1] == "--" {
			rest = append(rest, fs.Args()...)
			break
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	fs.SetOutput(stderr)
	return rest, 0, true
}
