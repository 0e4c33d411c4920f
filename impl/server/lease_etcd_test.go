package server

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/watchspec/watchspec/internal/etcdtest"
)

// The comparisons of the Lease service with a real etcd (SPEC §2.9
// Lease operations). They use only internal/etcdtest's exported
// API (Start, Cluster.Endpoints, Close).

// TestLeaseServiceSameAsEtcd runs leaseScript against a real etcd 3.7: its
// transcript is wantLeaseScript, which TestLeaseService demands of this
// server.
func TestLeaseServiceSameAsEtcd(t *testing.T) {
	ep := startEtcd(t)
	rc := dialRaw(t, strings.TrimPrefix(ep, "http://"))
	compareTranscripts(t, "etcd "+etcdtest.Version, leaseScript(t, rc), wantLeaseScript)
}

// leaseIDRE matches the lease IDs etcdctl prints: 16 hex digits.
var leaseIDRE = regexp.MustCompile(`\b[0-9a-f]{16}\b`)

// attachedRE matches the keys etcdctl's lease timetolive --keys prints.
var attachedRE = regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)

// remainingRE matches etcdctl's remaining TTL, which depends on timing.
var remainingRE = regexp.MustCompile(`remaining\((\d+)s\)`)

// etcdctlLeaseSession runs etcdctl's lease commands against endpoint —
// grant, put --lease (a granted lease and an unknown one), timetolive
// --keys, keep-alive --once, list, revoke — and returns the transcript with
// the server-chosen lease ID replaced by LEASE, a remaining TTL of 30 to
// 60 s replaced by R (etcdctl is slow under -race), and the attached keys
// sorted (etcd lists them in map order).
func etcdctlLeaseSession(t *testing.T, endpoint string) []string {
	rc := dialRaw(t, strings.TrimPrefix(endpoint, "http://"))
	st, err := pb.NewMaintenanceClient(rc.conn).Status(testCtx(t), &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	member := st.Header.MemberId
	var id string
	run := func(args ...string) string {
		out := etcdctl(t, endpoint, member, args...)
		if id == "" {
			if m := regexp.MustCompile(`lease ([0-9a-f]{16}) granted`).FindStringSubmatch(out); m != nil {
				id = m[1]
			}
		}
		if id != "" {
			out = strings.ReplaceAll(out, id, "LEASE")
		}
		out = remainingRE.ReplaceAllStringFunc(out, func(s string) string {
			n, _ := strconv.Atoi(remainingRE.FindStringSubmatch(s)[1])
			if n <= 60 && n >= 30 {
				return "remaining(R)"
			}
			return s
		})
		return attachedRE.ReplaceAllStringFunc(out, func(s string) string {
			keys := strings.Fields(attachedRE.FindStringSubmatch(s)[1])
			sort.Strings(keys)
			return "attached keys([" + strings.Join(keys, " ") + "])"
		})
	}
	out := []string{run("lease", "grant", "60")}
	if id == "" {
		t.Fatalf("etcdctl lease grant printed no lease ID:\n%s", out[0])
	}
	out = append(out,
		run("put", "k1", "v1", "--lease="+id),
		run("put", "k2", "v2", "--lease="+id),
		run("put", "k3", "v3", "--lease=1234abcd"),
		run("get", "k", "--prefix"),
		run("lease", "timetolive", id, "--keys"),
		run("lease", "timetolive", id),
		run("lease", "timetolive", "1234abcd", "--keys"),
		run("lease", "keep-alive", "--once", id),
		run("lease", "keep-alive", "--once", "1234abcd"),
		run("lease", "list"),
		run("lease", "revoke", id),
		run("get", "k", "--prefix"),
		run("lease", "revoke", id),
		run("lease", "timetolive", id, "--keys"),
		run("lease", "list"),
		run("lease", "grant", "9000000001"),
	)
	if leaseIDRE.MatchString(strings.ReplaceAll(strings.Join(out, "\n"), "000000001234abcd", "")) {
		t.Errorf("a lease ID other than the granted one:\n%s", strings.Join(out, "\n"))
	}
	return out
}

// TestEtcdctlLeaseSameAsEtcd (issue 16 acceptance): etcdctl 3.7.3's lease
// commands — grant, put --lease, keep-alive --once, timetolive --keys,
// list, revoke — print the same against this server as against etcd,
// with etcd's own etcdctl, but for the lease ID the server chose.
func TestEtcdctlLeaseSameAsEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcdctl 34 times")
	}
	want := etcdctlLeaseSession(t, startEtcd(t))
	r := startTest(t, testOptions())
	got := etcdctlLeaseSession(t, r.Endpoint())
	compareTranscripts(t, "etcdctl lease against watchspec", got, want)
	if !t.Failed() && testing.Verbose() {
		t.Logf("etcdctl against etcd %s and against watchspec:\n%s", etcdtest.Version, strings.Join(got, "\n"))
	}
	// The comparison means something only if etcd's session went as planned.
	joined := strings.Join(want, "\n")
	for _, must := range []string{"lease LEASE granted with TTL(60s)", "attached keys([k1 k2])", "keepalived with TTL(60)",
		"found 1 leases", "lease LEASE revoked", "requested lease not found", "too large lease TTL", fmt.Sprintf("exit %d", 0)} {
		if !strings.Contains(joined, must) {
			t.Errorf("etcd's session has no %q: it did not go as designed:\n%s", must, joined)
		}
	}
}
