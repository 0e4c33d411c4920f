package tree

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/watchspec/watchspec"

// pkg is what `go list -json` says of a package that this test needs.
type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
}

// goList runs `go list -json` on patterns at the repository root, in the root module alone (GOWORK=off: the tests module is not part
// of the promise).
func goList(t *testing.T, patterns ...string) []pkg {
	t.Helper()
	out := goCmd(t, append([]string{"list", "-json=ImportPath,Standard,Imports,Deps"}, patterns...)...)
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list %v: no packages", patterns)
	}
	return pkgs
}

func goCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("the go command is not on PATH: %v", err)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestTreePromises checks the README's promises about the tree (issue 12):
// model/ uses only the standard library (its packages depend on nothing
// else but model/ itself; their tests may use test libraries such as
// rapid); impl/ never imports model/, directly or through what it depends
// on (its tests may: they check impl against the model); and the root module's requirement graph
// (`go mod graph`) lists no k3s-io/kine, no k8s.io/apiserver and no
// go.etcd.io/etcd/server, so that a module requiring kine can import it.
func TestTreePromises(t *testing.T) {
	t.Run("model imports only the standard library", func(t *testing.T) {
		std := map[string]bool{}
		for _, p := range goList(t, "std") {
			std[p.ImportPath] = true
		}
		for _, p := range goList(t, "./model/...") {
			for _, dep := range p.Deps {
				if !std[dep] && dep != module+"/model" && !strings.HasPrefix(dep, module+"/model/") {
					t.Errorf("%s depends on %s, outside the standard library and model/", p.ImportPath, dep)
				}
			}
		}
	})
	t.Run("impl never imports model", func(t *testing.T) {
		for _, p := range goList(t, "./impl/...") {
			for _, imp := range p.Deps {
				if imp == module+"/model" || strings.HasPrefix(imp, module+"/model/") {
					t.Errorf("%s depends on %s: impl/ stands on its own", p.ImportPath, imp)
				}
			}
		}
	})
	t.Run("root module requires no harness server", func(t *testing.T) {
		for _, line := range strings.Split(string(goCmd(t, "mod", "graph")), "\n") {
			for _, banned := range []string{"github.com/k3s-io/kine", "k8s.io/apiserver", "go.etcd.io/etcd/server"} {
				if strings.Contains(line, banned) {
					t.Errorf("go mod graph: %q: the root module must not require %s (it belongs in the tests module)", line, banned)
				}
			}
		}
	})
}
