package apiservertest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/watchspec/watchspec/conform/kube"
	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
)

// backend starts the apiserver's etcd: a real etcd 3.7.3 or the reference
// server, and returns its endpoints.
func backend(t *testing.T, name string) []string {
	t.Helper()
	switch name {
	case "etcd":
		cl, err := etcdtest.Start(etcdtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl.Endpoints
	case "reference":
		r, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return []string{r.Endpoint()}
	}
	t.Fatalf("unknown backend %q", name)
	return nil
}

var duration = flag.Duration("apiserver.duration", 3*time.Second, "how long TestConform's workload runs (make conform-kube runs it longer)")

var recordCorpus = flag.Bool("record-corpus", false, "write the runs of TestConform to traces/corpus (docs/CORPUS.md)")

// corpusFile is the corpus trace of a TestConform run over backend b.
func corpusFile(b string) string {
	if b == "etcd" {
		return "../../traces/corpus/apiserver-http-0.37.2-over-etcd-3.7.3.ndjson.gz"
	}
	return "../../traces/corpus/apiserver-http-0.37.2-over-watchspec-reference.ndjson.gz"
}

// TestConform: the Kubernetes conformance workload (conform/kube, as
// `watchspec conform --kubeconfig` runs it) against the real apiserver,
// over a real etcd 3.7.3 and over watchspec's reference server as its
// etcd, passes every property of SPEC §4–§5 (and §2–§3 on the history
// learnt from the writes). Issue 15. With -record-corpus it writes the two
// runs to traces/corpus.
func TestConform(t *testing.T) {
	for _, b := range []string{"etcd", "reference"} {
		t.Run(b, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+2*(*duration))
			defer cancel()
			eps := backend(t, b)
			s, err := Start(ctx, Options{Etcd: eps, Name: b})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			comp, err := NewCompactor(eps)
			if err != nil {
				t.Fatal(err)
			}
			defer comp.Close()
			var buf bytes.Buffer
			cfg := kube.Config{REST: s.Config(), Resource: GVR, Namespace: "conform", Duration: *duration, Seed: 1, Exclusive: true,
				System: "k8s.io/apiserver generic server (internal/apiservertest) over " + b, SystemVersion: Version, Progress: t.Logf,
				Compact: comp.Compact, CompactEvery: 700 * time.Millisecond}
			if *recordCorpus {
				// Small: the corpus is checked on every run.
				cfg.Duration, cfg.Objects, cfg.Readers = 2*time.Second, 4, 1
			}
			stats, err := kube.Record(ctx, cfg, &buf)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v", stats)
			defer saveOnFailure(t, buf.Bytes())
			tr, err := traces.Read(bytes.NewReader(buf.Bytes()), "trace")
			if err != nil {
				t.Fatal(err)
			}
			res, err := linearizability.Check(tr, linearizability.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range res.Violations {
				t.Errorf("%s %s: %s", v.Property, v.Where, v.Message)
			}
			if res.Verdict != linearizability.Linearizable {
				t.Errorf("verdict %s", res.Verdict)
			}
			if *recordCorpus && !t.Failed() {
				tr.Name = ""
				if err := traces.WriteFile(corpusFile(b), tr); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %s", corpusFile(b))
			}
		})
	}
}

// saveOnFailure keeps the trace of a failed test in its artifact directory.
func saveOnFailure(t *testing.T, trace []byte) {
	if !t.Failed() {
		return
	}
	path := filepath.Join(t.ArtifactDir(), "trace.ndjson")
	if err := os.WriteFile(path, trace, 0o644); err != nil {
		t.Log(err)
		return
	}
	t.Logf("trace: %s", path)
}

// TestConformSharedCluster: as on a real cluster, others write to the
// apiserver's etcd while the run lasts (here: objects of the same resource
// in another namespace, created, changed and deleted as fast as the
// apiserver takes them). The run is not exclusive: the revisions it did not
// write enter the history as writes outside its prefix, and it passes.
func TestConformSharedCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Etcd: backend(t, "etcd"), Name: "etcd"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := s.Dynamic("other")
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; wctx.Err() == nil; i++ {
			name := fmt.Sprintf("o%d", i%3)
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.apiserver.k8s.io/v1", "kind": "Pod",
				"metadata": map[string]any{"name": name, "annotations": map[string]any{"other": fmt.Sprint(i)}}}}
			if _, err := other.Create(wctx, obj, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				other.Delete(wctx, name, metav1.DeleteOptions{})
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var buf bytes.Buffer
	stats, err := kube.Record(ctx, kube.Config{REST: s.Config(), Resource: GVR, Namespace: "conform", Duration: 3 * time.Second, Seed: 3}, &buf)
	stop()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", stats)
	defer saveOnFailure(t, buf.Bytes())
	if stats.Foreign == 0 {
		t.Errorf("no revision was written by the other writer")
	}
	tr, err := traces.Read(bytes.NewReader(buf.Bytes()), "trace")
	if err != nil {
		t.Fatal(err)
	}
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Violations {
		t.Errorf("%s %s: %s", v.Property, v.Where, v.Message)
	}
}

// TestMutantsCaught: a broken list, watch or bookmark behaviour, injected
// by a proxy in front of the real apiserver (over etcd), is caught by the
// conformance check with the property that names it.
func TestMutantsCaught(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Etcd: backend(t, "etcd"), Name: "etcd"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, m := range []struct {
		mutant Mutant
		want   spec.Property
	}{
		{DropEvent, spec.Reliable},         // SPEC §3.3
		{StaleExact, spec.ListSnapshot},    // SPEC §4.2
		{BookmarkAhead, spec.Bookmarkable}, // SPEC §3.6
	} {
		t.Run(string(m.mutant), func(t *testing.T) {
			p, err := NewProxy(s, m.mutant)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var buf bytes.Buffer
			_, err = kube.Record(ctx, kube.Config{REST: p.Config(), Resource: GVR, Namespace: string(m.mutant), Duration: 3 * time.Second, Seed: 2, Exclusive: true}, &buf)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Damaged() {
				t.Fatalf("the proxy never injected %s", m.mutant)
			}
			tr, err := traces.Read(bytes.NewReader(buf.Bytes()), "trace")
			if err != nil {
				t.Fatal(err)
			}
			res, err := linearizability.Check(tr, linearizability.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[spec.Property]int{}
			for _, v := range res.Violations {
				got[v.Property]++
			}
			t.Logf("violations: %v", got)
			defer saveOnFailure(t, buf.Bytes())
			if got[m.want] == 0 || len(got) != 1 {
				t.Errorf("%s was not caught as %s alone: %v", m.mutant, m.want, res.Violations)
			}
		})
	}
}
