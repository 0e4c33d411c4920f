package mutate

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

var (
	flagSeed = flag.Int64("mutate.seed", 1, "seed of the mutation campaign (every mutant's seed derives from it)")
	flagN    = flag.Int("mutate.n", 5, "mutants drawn per operator (make mutate: 50)")
	flagOp   = flag.String("mutate.op", "", "only the operators whose name matches this regexp")
	flagOut  = flag.String("mutate.table", "", "also write the campaign's table to this file")
	flagMax  = flag.Int64("mutate.maxsize", 512<<10, "leave out corpus files larger than this many bytes (0: the whole corpus, as make mutate runs it)")
)

var (
	corpusOnce sync.Once
	corpus     []*Subject
	leftOut    []string
	corpusErr  error
)

// subjects reads and checks the corpus once per test binary: the whole
// corpus with -mutate.maxsize=0 (make mutate), and by default (go test, CI)
// the corpus without the files over 512 KiB — the two largest etcd
// recordings, etcd-3.7.3-shared-stream-catch-up and
// etcd-3.7.3-conform-defaults, whose reading alone costs more CPU under
// -race than the rest of the short draw's corpus together, and whose
// mutants each cost a second or more to check. Shared streams asked for
// progress stay in the short draw (etcd-3.7.3-3members-kills,
// etcd-3.7.3-watch-registered-after-progress-answer); what only those two
// recordings show (200 watches on one stream, victims' headers going back)
// is mutated by make mutate.
func subjects(t *testing.T) []*Subject {
	corpusOnce.Do(func() {
		var files []string
		files, corpusErr = CorpusFiles(filepath.Join("..", "..", "traces", "corpus"))
		if corpusErr != nil {
			return
		}
		var keep []string
		for _, f := range files {
			if st, err := os.Stat(f); err == nil && *flagMax > 0 && st.Size() > *flagMax {
				leftOut = append(leftOut, filepath.Base(f))
				continue
			}
			keep = append(keep, f)
		}
		corpus, corpusErr = LoadFiles(keep, linearizability.Options{})
	})
	if corpusErr != nil {
		t.Fatal(corpusErr)
	}
	return corpus
}

// TestCampaign draws -mutate.n mutants of every operator over the whole
// corpus (traces/corpus: the bug reconstructions and the recordings of real
// etcd, the apiserver cacher and client-go) and demands that the checker
// names every semantic mutant with an expected property and keeps the
// verdict of every equivalence and weakening mutant. Failures explained by
// a known defect (known_test.go) are logged, not failed. A failing mutant's
// trace is written to the test's artifact directory; its seed remakes it.
// SPEC §2.6–§2.7, §3.1–§3.12, §4, §5; issue 19.
func TestCampaign(t *testing.T) {
	cfg := Config{Seed: *flagSeed, N: *flagN}
	if *flagOp != "" {
		cfg.Only = regexp.MustCompile(*flagOp)
	}
	t.Logf("campaign seed %d, %d mutants per operator (reproduce: -mutate.seed=%d -mutate.n=%d)", cfg.Seed, cfg.N, cfg.Seed, cfg.N)
	ss := subjects(t)
	if len(leftOut) > 0 {
		t.Logf("corpus files over %d bytes left out (-mutate.maxsize=0 draws from them, as make mutate does): %v", *flagMax, leftOut)
	}
	rep := Run(ss, Operators(), cfg)
	table := rep.Table()
	t.Log("\n" + table)
	if *flagOut != "" {
		if err := os.WriteFile(*flagOut, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
	seen := map[string]map[string]int{} // defect → "operator on trace [outcome]" → mutants
	for _, f := range rep.Failures() {
		if d, ok := known(f); ok {
			if seen[d.ID] == nil {
				seen[d.ID] = map[string]int{}
				t.Logf("known defect %s (%s), for instance:\n%v", d.ID, d.Summary, f)
			}
			seen[d.ID][fmt.Sprintf("%s on %s [%s%s]", f.Mutant.Op.Name, f.Mutant.Subject.Name, f.Outcome, newString(f))]++
			continue
		}
		t.Errorf("%v\n    (reproduce: -mutate.seed=%d -mutate.n=%d -mutate.op='^%s$'; trace in %s)", f, cfg.Seed, cfg.N, f.Mutant.Op.Name, save(t, f))
	}
	if len(seen) > 0 {
		var b strings.Builder
		b.WriteString("failures explained by known defects (known_test.go; fixed by their owners, issue 19):\n")
		for _, d := range knownDefects {
			sites := seen[d.ID]
			if sites == nil {
				continue
			}
			delete(seen, d.ID)
			fmt.Fprintf(&b, "  %s %s\n", d.ID, d.Summary)
			var lines []string
			for site, n := range sites {
				lines = append(lines, fmt.Sprintf("    %3d × %s", n, site))
			}
			slices.Sort(lines)
			b.WriteString(strings.Join(lines, "\n") + "\n")
		}
		t.Log("\n" + b.String())
	}
}

func newString(f Result) string {
	if len(f.New) == 0 {
		return ""
	}
	return fmt.Sprintf(": %v", f.New)
}

// save writes a failing mutant's trace to the test's artifact directory.
func save(t *testing.T, f Result) string {
	if f.Mutant.Trace == nil {
		return "(none)"
	}
	name := fmt.Sprintf("%s-%s-%d.ndjson", f.Mutant.Op.Name, strings.TrimSuffix(strings.TrimSuffix(f.Mutant.Subject.Name, ".gz"), ".ndjson"), f.Mutant.Seed)
	path := filepath.Join(t.ArtifactDir(), name)
	if err := traces.WriteFile(path, f.Mutant.Trace); err != nil {
		return fmt.Sprintf("(not saved: %v)", err)
	}
	return path
}
