package informer_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/watchspec/watchspec"

// The implementation stands on its own (README, ARCHITECTURE.md): neither
// this package nor anything it imports from the module imports the model.
// Tests may (they hold the implementation to the model).
func TestDoesNotImportModel(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	var visit func(pkg string, via []string)
	visit = func(pkg string, via []string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(pkg, module)))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !strings.HasPrefix(path, module+"/") {
					continue
				}
				chain := append(append([]string(nil), via...), path)
				if strings.HasPrefix(path, module+"/model") {
					t.Errorf("%s imports the model: %s", name, strings.Join(chain, " → "))
					continue
				}
				visit(path, chain)
			}
		}
	}
	visit(module+"/impl/informer", []string{module + "/impl/informer"})
	if len(seen) < 3 {
		t.Fatalf("only %d packages visited: the walk is broken", len(seen))
	}
}
