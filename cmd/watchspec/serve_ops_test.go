package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/internal/certtest"
)

// TestServeTLS runs `watchspec serve` TLS-only with client certificates
// required — etcd's --cert-file, --key-file, --trusted-ca-file,
// --client-cert-auth (issue 17) — with a metrics URL over HTTPS and JSON
// logs: a client with a certificate from the CA writes and reads, and
// /health answers over TLS; every log line is a JSON object.
func TestServeTLS(t *testing.T) {
	certs, err := certtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--cert-file", certs.ServerCert, "--key-file", certs.ServerKey, "--trusted-ca-file", certs.CA, "--client-cert-auth",
		"--listen-metrics-urls", "https://127.0.0.1:0", "--log-format", "json", "--metrics", "extensive")
	ep := p.endpoint(t)
	if !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s, want https://127.0.0.1:PORT", ep)
	}
	tlsCfg, err := transport.TLSInfo{CertFile: certs.ClientCert, KeyFile: certs.ClientKey, TrustedCAFile: certs.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tlsCfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put over TLS: %v", err)
	}
	if g, err := cli.Get(ctx, "k"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("get over TLS: %v %v", g, err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	for _, url := range []string{ep + "/health", metricsURL(t, p) + "/health"} {
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"health":"true","reason":""}` {
			t.Errorf("GET %s: %d %q", url, resp.StatusCode, b)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr)
	}
	msgs := ""
	for _, line := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("--log-format json wrote a line that is not JSON: %q", line)
		}
		msgs += m["msg"].(string) + "\n"
	}
	for _, want := range []string{"serving the etcd v3 API on https://", "stopping", "stopped"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("no %q in the logs:\n%s", want, p.stderr)
		}
	}
	if strings.Contains(msgs, "insecurely") {
		t.Errorf("a TLS server warned about plaintext:\n%s", p.stderr)
	}
}

var metricsURLRE = regexp.MustCompile(`"metrics-urls":"([^"]+)"`)

func metricsURL(t *testing.T, p *serveProcess) string {
	m := metricsURLRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no metrics URL logged: %s", p.stderr)
	}
	return m[1]
}

// TestServeOperationsUsage: the flags of issue 17 refuse what they cannot
// do, with exit 2 and a message naming the flag.
func TestServeOperationsUsage(t *testing.T) {
	certs, err := certtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cert-file", certs.ServerCert}, "--cert-file and --key-file go together"},
		{[]string{"--client-cert-auth"}, "TLS needs the server's certificate and key"},
		{[]string{"--cert-file", certs.ServerCert, "--key-file", certs.ServerKey, "--client-cert-auth"}, "--client-cert-auth needs --trusted-ca-file"},
		{[]string{"--cert-file", "/nonexistent.pem", "--key-file", certs.ServerKey}, "/nonexistent.pem"},
		{[]string{"--cert-file", certs.ServerCert, "--key-file", certs.ServerKey, "--trusted-ca-file", "/nonexistent-ca.pem"}, "/nonexistent-ca.pem"},
		{[]string{"--log-level", "loud"}, `--log-level is debug, info, warn or error, not "loud"`},
		{[]string{"--log-format", "xml"}, `--log-format is text or json, not "xml"`},
		{[]string{"--metrics", "all"}, `--metrics is basic or extensive, not "all"`},
		{[]string{"--listen-metrics-urls", "ftp://127.0.0.1:0"}, "the scheme must be http or https"},
		{[]string{"--listen-metrics-urls", "https://127.0.0.1:0"}, "https needs a certificate"},
		{[]string{"--listen-metrics-urls", "http://127.0.0.1"}, "give a host and a port"},
	} {
		args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		code, _, stderr := runCLI(args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("watchspec %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
