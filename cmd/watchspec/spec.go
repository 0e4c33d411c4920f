package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/watchspec/watchspec/model/spec"
)

func runSpec(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watchspec spec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	long := fs.Bool("long", false, "also print the model function and the source of each property")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "watchspec spec: unexpected argument %q\n", fs.Arg(0))
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
