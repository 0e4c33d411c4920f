package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/internal/certtest"
)

// Issue 17 acceptance: a TLS-only `watchspec serve` that requires client
// certificates passes `watchspec conform` through TLS (etcdctl's --cacert,
// --cert, --key); without a client certificate conform cannot connect
// (exit 2), and TLS flags that do not fit the endpoints are usage errors.
func TestConformTLS(t *testing.T) {
	certs, err := certtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--cert-file", certs.ServerCert, "--key-file", certs.ServerKey, "--trusted-ca-file", certs.CA, "--client-cert-auth")
	defer p.stop(t)
	ep := p.endpoint(t)
	dir := t.TempDir()
	code, out, errOut := runCLI("conform", "--endpoints", ep, "--cacert", certs.CA, "--cert", certs.ClientCert, "--key", certs.ClientKey,
		"--duration", "2s", "--clients", "3", "--watchers", "3", "--catch-up-watches", "50", "--seed", "17", "--single-server", "--report", dir)
	t.Logf("conform through TLS: exit %d; %s", code, recordedRE.FindString(errOut))
	if code != 0 {
		saved := filepath.Join(t.ArtifactDir(), "tls-trace.ndjson.gz")
		if raw, err := os.ReadFile(filepath.Join(dir, traceFile)); err == nil && os.WriteFile(saved, raw, 0o644) == nil {
			t.Logf("trace saved as %s", saved)
		}
		t.Fatalf("conform through TLS: exit %d\n%s\n%s", code, out, errOut)
	}
	if m := recordedRE.FindString(errOut); !strings.Contains(m, "recorded ") || strings.Contains(m, "recorded 0 operations") {
		t.Fatalf("the run recorded nothing: %q", m)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		// The server requires a client certificate (one of another CA is
		// refused the same way: impl/server's TestTLS).
		{[]string{"--endpoints", ep, "--cacert", certs.CA}, "watchspec conform:"},
		{[]string{"--endpoints", ep}, "needs TLS: give --cacert"},
		{[]string{"--endpoints", "http://" + strings.TrimPrefix(ep, "https://"), "--cacert", certs.CA}, "is plaintext (http://) but TLS flags were given"},
		{[]string{"--cacert", certs.CA}, "are for --endpoints"},
		{[]string{"--endpoints", ep, "--cacert", certs.CA, "--cert", certs.ClientCert}, "--cert and --key go together"},
		{[]string{"--endpoints", ep, "--cacert", "/nonexistent-ca.pem"}, "/nonexistent-ca.pem"},
	} {
		args := append([]string{"conform", "--duration", "1s", "--clients", "1", "--watchers", "1", "-q", "--report", t.TempDir()}, tc.args...)
		code, _, errOut := runCLI(args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("watchspec %v: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
		t.Logf("%v: %s", tc.args, strings.TrimSpace(errOut))
	}
}
