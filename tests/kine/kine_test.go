package kine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/tests/kinetest"
	"github.com/watchspec/watchspec/traces"
)

// kine v0.17.5 (github.com/k3s-io/kine) over SQLite, driven as the
// Kubernetes apiserver drives it and checked under its profile (docs/SPEC.md
// §9), gets the verdict docs/FINDINGS.md documents: not linearizable
// (§2.7), possibly also §2.6 WriteRevision, and nothing else — the
// linearizability check stops at kine's first KV difference, so the watch
// findings are shown by the corpus traces instead. The test also checks
// that the finding that makes every run fail is still there (kine-2: a
// conditional delete answers with an unrequested prev_kv that is its own
// tombstone); when kine fixes it, this test fails: update FINDINGS.md.
func TestKine(t *testing.T) {
	for _, tc := range []struct {
		profile          string
		clientCompaction bool
		seed             int64
	}{
		{"kine", false, 11},
		{"kine-compacting", true, 12},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			srv, err := kinetest.Start(kinetest.Options{ClientCompaction: tc.clientCompaction})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := srv.Close(); err != nil {
					t.Error(err)
				}
			}()
			cfg := conform.Config{Endpoints: srv.Endpoints, Duration: 2 * time.Second, Seed: tc.seed, Clients: 3, Watchers: 3,
				Workload: conform.WorkloadKubernetes, Profile: tc.profile, System: "kine", SystemVersion: kinetest.Version, Progress: t.Logf}
			var buf bytes.Buffer
			stats, err := conform.Record(context.Background(), cfg, &buf)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("stats %+v", stats)
			if f := kinetest.Fatals(); len(f) > 0 {
				t.Errorf("kine logged fatal errors: %q", f)
			}
			tr, err := traces.Read(&buf, t.Name()+".ndjson")
			if err != nil {
				t.Fatal(err)
			}
			res, err := linearizability.Check(tr, linearizability.Options{Timeout: 2 * time.Minute, Progress: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			if res.Profile == nil || res.Profile.Name != tc.profile {
				t.Fatalf("checked under %v, not the trace's profile %s", res.Profile, tc.profile)
			}
			if res.Verdict != linearizability.NotLinearizable || !hasViolation(res, spec.Linearizable) {
				t.Errorf("verdict %s, violations %v; docs/FINDINGS.md documents FAIL Linearizable", res.Verdict, res.Violations)
			}
			for _, v := range res.Violations {
				if v.Property != spec.Linearizable && v.Property != spec.WriteRevision {
					t.Errorf("a violation docs/FINDINGS.md does not document for this run: %s %s", v.Where, v.Violation)
				}
			}
			if !deleteAnswersTombstone(tr) {
				t.Errorf("no successful delete answered with its own tombstone as prev_kv (finding kine-2): has kine changed? Update docs/FINDINGS.md")
			}
			if stats.Ops < 100 || stats.WatchResponses == 0 || stats.Compactions == 0 {
				t.Errorf("the run did too little to judge: %+v", stats)
			}
		})
	}
}

func hasViolation(res *linearizability.Result, p spec.Property) bool {
	for _, v := range res.Violations {
		if v.Property == p {
			return true
		}
	}
	return false
}

// deleteAnswersTombstone reports whether some successful delete of the
// trace, which asked for no prev_kv, was answered with one: the deleted
// key with the delete's own revision and nothing else (finding kine-2).
func deleteAnswersTombstone(tr *traces.Trace) bool {
	for _, o := range tr.Ops {
		if o.Response == nil || o.Response.Txn == nil || !o.Response.Txn.Succeeded || len(o.Response.Txn.Responses) != 1 {
			continue
		}
		d := o.Response.Txn.Responses[0].Delete
		if d == nil || d.Deleted != 1 || len(d.PrevKVs) != 1 || o.Request.Txn.Success[0].Delete.PrevKV {
			continue
		}
		p := d.PrevKVs[0]
		if p.Key == o.Request.Txn.Success[0].Delete.Key && p.ModRevision == o.Response.Revision && p.Value == "" && p.CreateRevision == 0 {
			return true
		}
	}
	return false
}
