package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/watchspec/watchspec/internal/certtest"
)

// httpGet fetches url and returns the status, the Content-Type and the body.
func httpGet(t *testing.T, c *http.Client, url string) (int, string, string) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func activateAlarm(t *testing.T, rc *rawConn, member uint64, typ pb.AlarmType, on bool) {
	t.Helper()
	action := pb.AlarmRequest_ACTIVATE
	if !on {
		action = pb.AlarmRequest_DEACTIVATE
	}
	if _, err := pb.NewMaintenanceClient(rc.conn).Alarm(testCtx(t), &pb.AlarmRequest{Action: action, MemberID: member, Alarm: typ}); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPEndpoints: etcd's HTTP endpoints on the client port, beside gRPC
// (issue 17): /health with etcd's answers, /livez, /readyz, /version,
// /metrics; and /metrics, /health, /livez, /readyz on a metrics URL
// (etcd's --listen-metrics-urls). TestHTTPSameAsEtcd compares them with
// etcd's.
func TestHTTPEndpoints(t *testing.T) {
	opts := testOptions()
	opts.MetricsURLs = []string{"http://127.0.0.1:0"}
	r := startTest(t, opts)
	rc := dialRaw(t, r.Addr())
	ep := r.Endpoint()
	for _, tc := range []struct {
		path, ctype, body string
		code              int
	}{
		{"/health", "text/plain; charset=utf-8", `{"health":"true","reason":""}`, 200},
		{"/health?serializable=true", "text/plain; charset=utf-8", `{"health":"true","reason":""}`, 200},
		{"/version", "application/json", `{"etcdserver":"3.7.3","etcdcluster":"3.7.0","storage":"3.7.0"}`, 200},
		{"/livez", "text/plain; charset=utf-8", "ok\n", 200},
		{"/readyz", "text/plain; charset=utf-8", "ok\n", 200},
		{"/readyz?verbose", "text/plain; charset=utf-8", "[+]data_corruption ok\n[+]linearizable_read ok\n[+]non_learner ok\n[+]serializable_read ok\nok\n", 200},
		{"/readyz?verbose&exclude=non_learner", "text/plain; charset=utf-8", "[+]data_corruption ok\n[+]linearizable_read ok\n[+]serializable_read ok\nok\n", 200},
		{"/livez/serializable_read?verbose", "text/plain; charset=utf-8", "[+]serializable_read ok\nok\n", 200},
	} {
		if code, ctype, body := httpGet(t, nil, ep+tc.path); code != tc.code || ctype != tc.ctype || body != tc.body {
			t.Errorf("GET %s: %d %q %q, want %d %q %q", tc.path, code, ctype, body, tc.code, tc.ctype, tc.body)
		}
	}
	resp, err := http.Post(ep+"/health", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Errorf("POST /health: %d, Allow %q; want 405, GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if code, _, body := httpGet(t, nil, ep+"/metrics"); code != 200 || !strings.Contains(body, "etcd_server_has_leader 1") {
		t.Errorf("GET /metrics: %d, %.200q", code, body)
	}

	// Alarms make /health and /readyz fail, as in etcd.
	activateAlarm(t, rc, 7, pb.AlarmType_CORRUPT, true)
	if code, _, body := httpGet(t, nil, ep+"/health"); code != 503 || body != `{"health":"false","reason":"ALARM CORRUPT"}`+"\n" {
		t.Errorf("GET /health under CORRUPT: %d %q", code, body)
	}
	if code, _, body := httpGet(t, nil, ep+"/readyz"); code != 503 || !strings.Contains(body, "[-]data_corruption failed: alarm activated: CORRUPT\n") {
		t.Errorf("GET /readyz under CORRUPT: %d %q", code, body)
	}
	if code, _, _ := httpGet(t, nil, ep+"/readyz?exclude=data_corruption"); code != 200 {
		t.Errorf("GET /readyz?exclude=data_corruption under CORRUPT: %d", code)
	}
	activateAlarm(t, rc, 7, pb.AlarmType_CORRUPT, false)
	activateAlarm(t, rc, DefaultMemberID, 9, true)
	if code, _, body := httpGet(t, nil, ep+"/health"); code != 503 || body != `{"health":"false","reason":"ALARM UNKNOWN"}`+"\n" {
		t.Errorf("GET /health under alarm 9: %d %q", code, body)
	}
	activateAlarm(t, rc, DefaultMemberID, 9, false)

	// The metrics URL: etcd's metrics mux, without /version.
	murls := r.MetricsURLs()
	if len(murls) != 1 || !strings.HasPrefix(murls[0], "http://127.0.0.1:") {
		t.Fatalf("metrics URLs %v", murls)
	}
	for path, want := range map[string]int{"/metrics": 200, "/health": 200, "/livez": 200, "/readyz": 200, "/version": 404} {
		if code, _, _ := httpGet(t, nil, murls[0]+path); code != want {
			t.Errorf("GET %s on the metrics URL: %d, want %d", path, code, want)
		}
	}

	// A stopping server is not healthy.
	r.Server().stopping()
	if h := r.Server().checkHealth(context.Background(), nil); h != (healthStatus{"false", "RANGE ERROR:etcdserver: server stopped"}) {
		t.Errorf("health of a stopping server: %+v", h)
	}
}

// scrape fetches /metrics and parses it.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	_, _, body := httpGet(t, nil, url+"/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels
// include labels (name=value pairs), or -1 if there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return -1
}

// TestMetrics: the metrics issue 17 asks for, under etcd's names, count
// what happened — requests and their latencies, log fsyncs and data file
// commits, database size, watch streams and watchers, alarms. Durable
// writes (fsync on), so that the disk histograms fill.
func TestMetrics(t *testing.T) {
	r := startTest(t, Options{})
	cli := newClient(t, r.Endpoint())
	ctx := testCtx(t)
	for i := range 5 {
		if _, err := cli.Put(ctx, fmt.Sprint("k", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Get(ctx, "k", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpGet("k0")).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "", "v"); err == nil {
		t.Fatal("a put of an empty key succeeded")
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	w := clientv3.NewWatcher(cli)
	defer w.Close()
	for _, k := range []string{"a", "b", "c"} {
		wch := w.Watch(clientv3.WithRequireLeader(wctx), k, clientv3.WithCreatedNotify())
		<-wch // created
	}
	if err := r.Store().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	activateAlarm(t, dialRaw(t, r.Addr()), DefaultMemberID, pb.AlarmType_NOSPACE, true)
	// The store's figures may move during the scrape (a periodic
	// checkpoint): what the metrics say must lie between before and after.
	before := r.Store().Stats()
	fams := scrape(t, r.Endpoint())
	after := r.Store().Stats()
	id := fmt.Sprintf("%x", DefaultMemberID)
	for _, c := range []struct {
		name     string
		labels   []string
		min, max float64 // min -2: any value > 0
	}{
		{"grpc_server_handled_total", []string{"grpc_service", "etcdserverpb.KV", "grpc_method", "Put", "grpc_code", "OK"}, 5, 5},
		{"grpc_server_handled_total", []string{"grpc_method", "Put", "grpc_code", "InvalidArgument"}, 1, 1},
		{"grpc_server_handled_total", []string{"grpc_method", "Txn", "grpc_code", "OK"}, 1, 1},
		{"grpc_server_started_total", []string{"grpc_service", "etcdserverpb.Watch", "grpc_method", "Watch", "grpc_type", "bidi_stream"}, 1, 1},
		{"grpc_server_msg_received_total", []string{"grpc_method", "Watch"}, 3, 3},
		{"etcd_server_request_duration_seconds", []string{"type", "Put", "success", "true"}, 5, 5},
		{"etcd_server_request_duration_seconds", []string{"type", "Put", "success", "false"}, 1, 1},
		{"etcd_server_request_duration_seconds", []string{"type", "Range", "success", "true"}, 1, 1},
		{"etcd_server_request_duration_seconds", []string{"type", "ReadonlyTxn", "success", "true"}, 1, 1},
		{"etcd_server_client_requests_total", []string{"type", "unary", "client_api_version", "3.7"}, -2, 0},
		{"etcd_server_client_requests_total", []string{"type", "stream", "client_api_version", "3.7"}, 1, 1},
		{"etcd_network_client_grpc_received_bytes_total", nil, -2, 0},
		{"etcd_network_client_grpc_sent_bytes_total", nil, -2, 0},
		{"etcd_disk_wal_fsync_duration_seconds", nil, float64(before.LogSyncs), float64(after.LogSyncs)},
		{"etcd_disk_backend_commit_duration_seconds", nil, -2, 0},
		{"etcd_mvcc_db_total_size_in_bytes", nil, float64(min(before.DBSize, after.DBSize)), float64(max(before.DBSize, after.DBSize))},
		{"etcd_mvcc_db_total_size_in_use_in_bytes", nil, float64(min(before.DBSizeInUse, after.DBSizeInUse)), float64(max(before.DBSizeInUse, after.DBSizeInUse))},
		{"etcd_debugging_mvcc_current_revision", nil, 6, 6},
		{"etcd_debugging_mvcc_compact_revision", nil, 0, 0},
		{"etcd_debugging_mvcc_watch_stream_total", nil, 1, 1},
		{"etcd_debugging_mvcc_watcher_total", nil, 3, 3},
		{"etcd_debugging_mvcc_slow_watcher_total", nil, 0, 0},
		{"etcd_server_has_leader", nil, 1, 1},
		{"etcd_server_is_leader", nil, 1, 1},
		{"etcd_server_id", []string{"server_id", id}, 1, 1},
		{"etcd_server_version", []string{"server_version", "3.7.3"}, 1, 1},
		{"etcd_debugging_server_alarms", []string{"server_id", id, "alarm_type", "NOSPACE"}, 1, 1},
		{"etcd_debugging_server_alarms", []string{"server_id", id, "alarm_type", "CORRUPT"}, 0, 0},
		{"watchspec_mvcc_group_commits_total", nil, float64(before.GroupCommits), float64(after.GroupCommits)},
		{"watchspec_mvcc_checkpoints_total", nil, -2, 0},
		{"watchspec_mvcc_memory_waits_total", nil, 0, 0}, // a few puts never wait for room
		{"go_goroutines", nil, -2, 0},
		{"process_open_fds", nil, -2, 0},
	} {
		got := value(fams, c.name, c.labels...)
		if c.min == -2 && got > 0 || got >= c.min && got <= c.max {
			continue
		}
		t.Errorf("%s%v = %v, want %v..%v", c.name, c.labels, got, c.min, c.max)
	}
	if before.LogSyncs == 0 || before.DBSize == 0 {
		t.Errorf("the store counts %d log syncs and a %d-byte data file: the comparisons above mean nothing", before.LogSyncs, before.DBSize)
	}
	if fams["grpc_server_handling_seconds"] != nil {
		t.Error("grpc_server_handling_seconds without ExtensiveMetrics (etcd has it only with --metrics=extensive)")
	}

	ext := testOptions()
	ext.ExtensiveMetrics = true
	r2 := startTest(t, ext)
	if _, err := newClient(t, r2.Endpoint()).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got := value(scrape(t, r2.Endpoint()), "grpc_server_handling_seconds", "grpc_method", "Put"); got != 1 {
		t.Errorf("grpc_server_handling_seconds{grpc_method=Put} with ExtensiveMetrics: %v, want 1", got)
	}
}

// TestTLS: a TLS-only server that requires client certificates (etcd's
// --cert-file, --key-file, --trusted-ca-file, --client-cert-auth; issue 17)
// serves clientv3 — KV, watch — and HTTP (HTTP/1.1 and HTTP/2) to a client
// with a certificate from its CA, and refuses a client without one, one
// with another CA's, and plaintext; its metrics URL serves HTTPS.
func TestTLS(t *testing.T) {
	certs, err := certtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := transport.TLSInfo{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, TrustedCAFile: certs.CA, ClientCertAuth: true}.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	opts := testOptions()
	opts.TLS = serverTLS
	opts.MetricsURLs = []string{"https://127.0.0.1:0"}
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	r := startTest(t, opts)
	if !strings.HasPrefix(r.Endpoint(), "https://") {
		t.Fatalf("endpoint %s, want https://", r.Endpoint())
	}
	clientTLS := func(cert, key string) *tls.Config {
		cfg, err := transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: certs.CA}.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	good := clientTLS(certs.ClientCert, certs.ClientKey)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{r.Endpoint()}, TLS: good, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := testCtx(t)
	wch := cli.Watch(ctx, "k", clientv3.WithRev(1))
	put, err := cli.Put(ctx, "k", "v")
	if err != nil {
		t.Fatalf("put over TLS: %v", err)
	}
	if wr := <-wch; wr.Err() != nil || len(wr.Events) != 1 || wr.Events[0].Kv.ModRevision != put.Header.Revision {
		t.Fatalf("watch over TLS: %+v %v", wr, wr.Err())
	}
	if al, err := cli.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarm list over TLS: %v %v", al, err)
	}

	// HTTP over the same port, HTTP/1.1 and HTTP/2 (curl negotiates h2).
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: good.Clone(), ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		c := &http.Client{Transport: tr}
		resp, err := c.Get(r.Endpoint() + "/health")
		if err != nil {
			t.Fatalf("GET /health over TLS (h2 %v): %v", h2, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"health":"true","reason":""}` || (resp.ProtoMajor == 2) != h2 {
			t.Errorf("GET /health over TLS (h2 %v): %s %d %q", h2, resp.Proto, resp.StatusCode, b)
		}
		tr.CloseIdleConnections()
	}
	mc := &http.Client{Transport: &http.Transport{TLSClientConfig: good.Clone()}}
	if code, _, body := httpGet(t, mc, r.MetricsURLs()[0]+"/metrics"); code != 200 || !strings.Contains(body, "etcd_server_has_leader 1") {
		t.Errorf("https metrics URL: %d", code)
	}

	// Refused: no client certificate, another CA's, plaintext. (Each put
	// is retried by clientv3 until its deadline; they run side by side.)
	var wg sync.WaitGroup
	for name, cfg := range map[string]*tls.Config{
		"no client certificate":     clientTLS("", ""),
		"another CA's certificate":  clientTLS(certs.StrangerCert, certs.StrangerKey),
		"plaintext to the TLS port": nil,
	} {
		ep := r.Endpoint()
		if cfg == nil {
			ep = "http://" + r.Addr()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			bad, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: cfg, DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				return // refused while dialing
			}
			defer bad.Close()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := bad.Put(cctx, "intruder", "v"); err == nil {
				t.Errorf("%s: a put succeeded", name)
			}
		}()
	}
	wg.Wait()
	if g, err := cli.Get(ctx, "intruder"); err != nil || len(g.Kvs) != 0 {
		t.Errorf("intruder: %v %v", g, err)
	}
	eventually(t, 10*time.Second, func() string {
		if !strings.Contains(logs.String(), "TLS handshake error") {
			return "the refused handshakes were not logged:\n" + logs.String()
		}
		return ""
	})
}

// syncBuf is a bytes.Buffer for concurrent writers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogs: the server's structured logs — a warning for plaintext on an
// address other than loopback (issue 17), none on loopback; alarms,
// compactions, stop.
func TestLogs(t *testing.T) {
	var logs syncBuf
	opts := testOptions()
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := startTest(t, opts)
	cli := newClient(t, r.Endpoint())
	ctx := testCtx(t)
	cli.Put(ctx, "a", "1")
	cli.Put(ctx, "a", "2")
	if _, err := cli.Compact(ctx, 2); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, r.Addr())
	activateAlarm(t, rc, DefaultMemberID, pb.AlarmType_NOSPACE, true)
	cli.Put(ctx, "a", "3") // refused
	activateAlarm(t, rc, DefaultMemberID, pb.AlarmType_NOSPACE, false)
	if strings.Contains(logs.String(), "insecurely") {
		t.Errorf("a warning about plaintext on loopback:\n%s", logs.String())
	}

	// Plaintext on every address: warned.
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("cannot listen on 0.0.0.0: %v", err)
	}
	go r.Server().Serve(l)
	eventually(t, 10*time.Second, func() string {
		if !strings.Contains(logs.String(), `"msg":"serving client traffic insecurely`) {
			return "no warning for plaintext on 0.0.0.0"
		}
		return ""
	})
	r.Close()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		msgs = append(msgs, m.Msg)
	}
	sort.Strings(msgs)
	for _, want := range []string{"alarm activated", "alarm deactivated", "compacted", "mvcc: alarm raised: no space left; puts are refused until the alarm is disarmed",
		"write refused: an alarm is raised", "server stopping", "server stopped"} {
		if i := sort.SearchStrings(msgs, want); i == len(msgs) || msgs[i] != want {
			t.Errorf("no %q in the logs:\n%s", want, logs.String())
		}
	}
}

// TestIdleConnectionDoesNotBlockStop: a client that connects and sends
// nothing (so that the port cannot tell gRPC from HTTP yet) does not hold a
// stop up.
func TestIdleConnectionDoesNotBlockStop(t *testing.T) {
	r, err := Start(t.TempDir(), "127.0.0.1:0", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() { done <- r.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(sniffTimeout / 2):
		t.Fatal("Close waits for a connection that sent nothing")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("the idle connection is still open (read %d bytes)", n)
	}
}

// TestStopTLSWithStuckWatcher: over TLS (gRPC through the HTTP server, as
// etcd), Close ends a watch stream whose client stops reading, frees the
// address, and a new server starts there at once.
func TestStopTLSWithStuckWatcher(t *testing.T) {
	certs, err := certtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := transport.TLSInfo{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, TrustedCAFile: certs.CA}.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := transport.TLSInfo{CertFile: certs.ClientCert, KeyFile: certs.ClientKey, TrustedCAFile: certs.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.TLS = serverTLS
	opts.StopTimeout = 100 * time.Millisecond
	dir := t.TempDir()
	r, err := Start(dir, "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+r.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := &rawConn{conn: conn, kv: pb.NewKVClient(conn), watch: pb.NewWatchClient(conn)}
	w := openWatch(t, rc)
	w.create(&pb.WatchCreateRequest{Key: []byte("k")})
	if got := shape(w.recv()); got != "id=0 rev=1 created" {
		t.Fatalf("created: %s", got)
	}
	ctx := testCtx(t)
	big := strings.Repeat("x", 1<<20)
	for range 16 { // unread, beyond the flow-control windows
		if _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte(big)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, err := Start(dir, r.Addr(), opts)
	if err != nil {
		t.Fatalf("starting again on %s: %v", r.Addr(), err)
	}
	defer r2.Close()
	if rev := r2.Store().Revision(); rev != 17 {
		t.Errorf("revision %d after the restart, want 17", rev)
	}
}
