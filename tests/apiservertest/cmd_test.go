package apiservertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConformKubeconfigCommand: `watchspec conform --kubeconfig FILE`
// works from the command line against the test apiserver (over etcd): the
// test writes a kubeconfig, builds the command, runs it, and reads its
// report.
func TestConformKubeconfigCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "watchspec")
	args := []string{"build", "-o", bin}
	if raceBuild {
		args = append(args, "-race")
	}
	build := exec.CommandContext(ctx, "go", append(args, "github.com/watchspec/watchspec/cmd/watchspec")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s, err := Start(ctx, Options{Etcd: backend(t, "etcd"), Name: "etcd"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "report")
	cmd := exec.CommandContext(ctx, bin, "conform", "--kubeconfig", kubeconfig, "--resource", GVR.Group+"/"+GVR.Version+"/"+GVR.Resource,
		"--namespace", "cli", "--exclusive", "--duration", "2s", "--seed", "7", "--report", report)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("watchspec conform --kubeconfig: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"ListResourceVersion", "InitialEventsEnd", "InformerConverges", "WatchLists", "report: " + report} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("a property failed:\n%s", out)
	}
	for _, f := range []string{"trace.ndjson.gz", "report.txt", "report.json", "report.html"} {
		if _, err := os.Stat(filepath.Join(report, f)); err != nil {
			t.Error(err)
		}
	}
	t.Logf("%s", out)

	// A bad kubeconfig is a usage error, exit status 2.
	bad := exec.CommandContext(ctx, bin, "conform", "--kubeconfig", filepath.Join(dir, "missing"), "-q")
	if err := bad.Run(); err == nil || bad.ProcessState.ExitCode() != 2 {
		t.Errorf("a missing kubeconfig: %v, want exit status 2", err)
	}
}
