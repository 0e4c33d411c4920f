package spec_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/model/spec"
)

const root = "../.."

func readSpec(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var heading = regexp.MustCompile(`(?m)^#{2,3} §(\d+(?:\.\d+)?) (\S+)`)

// TestCatalogMatchesSpecDoc: every property of the catalogue heads the
// section of docs/SPEC.md the catalogue says, and every property heading of
// SPEC.md is in the catalogue. One name everywhere.
func TestCatalogMatchesSpecDoc(t *testing.T) {
	doc := readSpec(t)
	headings := map[string]string{} // name -> section
	for _, m := range heading.FindAllStringSubmatch(doc, -1) {
		headings[m[2]] = m[1]
	}
	seen := map[string]bool{}
	for _, e := range spec.Catalog() {
		if seen[e.Section] {
			t.Errorf("section %s used twice in the catalogue", e.Section)
		}
		seen[e.Section] = true
		sec, ok := headings[string(e.Property)]
		if !ok {
			t.Errorf("%s has no heading \"### §%s %s\" in docs/SPEC.md", e.Property, e.Section, e.Property)
			continue
		}
		if sec != e.Section {
			t.Errorf("%s is §%s in docs/SPEC.md but §%s in the catalogue", e.Property, sec, e.Section)
		}
		if !strings.Contains(doc, "§"+e.Section+" "+string(e.Property)) {
			t.Errorf("docs/SPEC.md never cites \"§%s %s\"", e.Section, e.Property)
		}
	}
	for name, sec := range headings {
		if _, ok := spec.Lookup(spec.Property(name)); !ok && looksLikeProperty(name) {
			t.Errorf("docs/SPEC.md §%s %s is not in the catalogue", sec, name)
		}
	}
}

// Property headings are single CamelCase words; other sections have titles
// of several words.
func looksLikeProperty(name string) bool {
	return regexp.MustCompile(`^[A-Z][a-z]+[A-Z][A-Za-z]*$|^(Ordered|Unique|Reliable|Atomic|Resumable|Bookmarkable|Filtered)$`).MatchString(name)
}

var modelRef = regexp.MustCompile(`^(\w+)\.(?:\(\*(\w+)\)\.)?(\w+)$`)

// TestModelFunctionsExist: each model function the catalogue names for a
// property (one, or several separated by ", ") exists in model/.
func TestModelFunctionsExist(t *testing.T) {
	for _, e := range spec.Catalog() {
		for _, ref := range strings.Split(e.Model, ", ") {
			m := modelRef.FindStringSubmatch(ref)
			if m == nil {
				t.Errorf("%s: model reference %q is not pkg.Func or pkg.(*Type).method", e.Property, ref)
				continue
			}
			pkg, typ, fn := m[1], m[2], m[3]
			decl := "func " + fn + "("
			if typ != "" {
				decl = ") " + fn + "("
			}
			if !sourceContains(t, filepath.Join(root, "model", pkg), decl, typ) {
				t.Errorf("%s: %s not found in model/%s", e.Property, ref, pkg)
			}
		}
	}
}

// TestStatementsMatchSpecDoc: the statement `watchspec spec` prints for
// each property (Entry.Summary) is the italic statement under its heading
// in docs/SPEC.md, word for word (whitespace aside). One statement, one
// wording (issue 19).
func TestStatementsMatchSpecDoc(t *testing.T) {
	doc := readSpec(t)
	space := regexp.MustCompile(`\s+`)
	for _, e := range spec.Catalog() {
		h := "### §" + e.Section + " " + string(e.Property) + "\n"
		i := strings.Index(doc, h)
		if i < 0 {
			continue // TestCatalogMatchesSpecDoc reports it
		}
		rest := strings.TrimLeft(doc[i+len(h):], "\n")
		if !strings.HasPrefix(rest, "*") {
			t.Errorf("§%s %s: the section does not open with its italic statement", e.Section, e.Property)
			continue
		}
		end := strings.Index(rest, "*\n")
		if end < 0 {
			t.Errorf("§%s %s: the italic statement does not end", e.Section, e.Property)
			continue
		}
		stmt := space.ReplaceAllString(strings.TrimSpace(rest[1:end]), " ")
		if stmt != e.Summary {
			t.Errorf("§%s %s: docs/SPEC.md says\n\t%s\nbut the catalogue says\n\t%s", e.Section, e.Property, stmt, e.Summary)
		}
	}
}

func sourceContains(t *testing.T, dir, decl, typ string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "func ") && strings.Contains(line, decl) &&
				(typ == "" || strings.Contains(line, "*"+typ+")")) {
				return true
			}
		}
	}
	return false
}

var testRef = regexp.MustCompile("`((?:Test|Fuzz|Example)\\w*)(?:/[^`]*)?`")
var fileRef = regexp.MustCompile("`((?:model|impl|traces|linearizability|proptest|cmd)/[^`]+\\.(?:txt|go|ndjson|json))`")

// TestSpecDocReferencesExist: every test and file docs/SPEC.md cites exists,
// so the document cannot drift from the code unnoticed.
func TestSpecDocReferencesExist(t *testing.T) {
	doc := readSpec(t)
	tests := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Example)\w*)\(`).FindAllStringSubmatch(string(b), -1) {
				tests[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range testRef.FindAllStringSubmatch(doc, -1) {
		if !tests[m[1]] {
			t.Errorf("docs/SPEC.md cites %s, which no test file defines", m[1])
		}
	}
	for _, m := range fileRef.FindAllStringSubmatch(doc, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("docs/SPEC.md cites %s: %v", m[1], err)
		}
	}
}

func TestViolationString(t *testing.T) {
	v := spec.Violation{Property: spec.Reliable, Revisions: []int64{7}, Keys: []string{"a\x00"}, Message: "skipped"}
	if got, want := v.String(), `Reliable §3.3 revisions=[7] keys=["a\x00"]: skipped`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	long := make([]int64, 12)
	if got := spec.FormatRevisions(long); !strings.Contains(got, "…(4 more)") {
		t.Errorf("long lists are elided: %s", got)
	}
	if spec.Property("Nope").Section() != "§?" {
		t.Error("an unknown property has no section")
	}
}
