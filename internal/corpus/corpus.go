// Package corpus reads the table of docs/CORPUS.md, which gives the expected
// verdict of every trace in traces/corpus. Tests of the checker and of the
// command line both hold the corpus to it.
package corpus

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/watchspec/watchspec/model/spec"
)

// Row is one trace of the corpus and the properties it must break (none:
// every property holds).
type Row struct {
	File     string
	Expected []spec.Property
}

var rowRE = regexp.MustCompile("^\\| `([^`]+)` \\| ([^|]+) \\|")

// ReadTable reads the trace table of the CORPUS.md at path.
func ReadTable(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []Row
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		m := rowRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		row := Row{File: m[1]}
		if verdict := strings.TrimSpace(m[2]); verdict != "pass" {
			for _, p := range strings.Split(verdict, ",") {
				p = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p), "FAIL "))
				if _, ok := spec.Lookup(spec.Property(p)); !ok {
					return nil, fmt.Errorf("%s:%d: %q is not a property", path, line, p)
				}
				row.Expected = append(row.Expected, spec.Property(p))
			}
		}
		rows = append(rows, row)
	}
	return rows, sc.Err()
}
