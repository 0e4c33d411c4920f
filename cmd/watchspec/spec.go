package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/watchspec/watchspec/model/spec"
)

const specUsage = `Usage: watchspec spec [-long]

Prints the numbered properties of docs/SPEC.md: section, name, and the
statement, word for word as SPEC.md has it. With -long, also the model
function that decides each property and where it comes from (etcd's and
Kubernetes' documentation, upstream issues).

Exit status: 0; 2 when the command line is wrong.

Flags:
`

func runSpec(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watchspec spec", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), specUsage); fs.PrintDefaults() }
	long := fs.Bool("long", false, "also print the model function and the source of each property")
	rest, code, ok := parseFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "watchspec spec: unexpected argument %q\n", rest[0])
		return 2
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "§\tproperty\tstatement")
	for _, e := range spec.Catalog() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Section, e.Property, e.Summary)
		if *long {
			fmt.Fprintf(tw, "\t\tmodel: %s\n\t\tsource: %s\n", e.Model, e.Source)
		}
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(stderr, "watchspec spec: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "\n%d properties; the full statements are in docs/SPEC.md.\n", len(spec.Catalog()))
	return 0
}
