package kinetest

import (
	"bytes"
	"context"
	"github.com/sirupsen/logrus"
	"github.com/watchspec/watchspec/model/kv"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/watchspec/watchspec/conform"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

func TestExplore(t *testing.T) {
	if os.Getenv("KINEX") == "" {
		t.Skip()
	}
	s, err := Start(Options{ClientCompaction: os.Getenv("KINEX_CC") != ""})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if lf := os.Getenv("KINEX_LOG"); lf != "" {
		f, _ := os.Create(lf)
		logrus.SetOutput(f)
		logrus.SetLevel(logrus.InfoLevel)
	}
	seed, _ := strconv.ParseInt(os.Getenv("KINEX_SEED"), 10, 64)
	dur, _ := time.ParseDuration(os.Getenv("KINEX_DUR"))
	var buf bytes.Buffer
	stats, err := conform.Record(context.Background(), conform.Config{Endpoints: s.Endpoints, Duration: dur, Clients: 4, Watchers: 4, Seed: seed,
		System: "kine", SystemVersion: Version, Workload: os.Getenv("KINEX_WL"), Profile: os.Getenv("KINEX_PROFILE")}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v fatals %v", stats, Fatals())
	os.WriteFile(os.Getenv("KINEX_OUT"), buf.Bytes(), 0o644)
	tr, err := traces.Read(&buf, "kine.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KINEX_DIAG") != "" {
		diagnose(tr)
	}
	res, err := linearizability.Check(tr, linearizability.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.WriteHTML("/tmp/kx"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s %d violations", res.Verdict, res.Method, len(res.Violations))
	n := map[string]int{}
	for _, v := range res.Violations {
		n[string(v.Property)]++
		if n[string(v.Property)] <= 5 {
			t.Logf("%s %s", v.Where, v.Violation)
		}
	}
	t.Logf("%v", n)
}

// diagnose removes the known findings from a trace, to look past them:
// prev_kvs of deletes, and creates answered with a revision other than
// the one watches saw (made unknown outcomes).
func diagnose(tr *traces.Trace) {
	seen := map[[2]string]int64{}
	for _, w := range tr.Watches {
		for _, r := range w.Responses {
			for _, e := range r.Response.Events {
				if e.Type == kv.Put {
					seen[[2]string{e.KV.Key, e.KV.Value}] = e.KV.ModRevision
				}
			}
		}
	}
	n1, n2 := 0, 0
	for i := range tr.Ops {
		o := &tr.Ops[i]
		if o.Response != nil && o.Request.Compact != nil && os.Getenv("KINEX_DIAG") != "3" {
			o.Response = nil
			o.Error = "diagnose: compaction"
			continue
		}
		if o.Response == nil || o.Response.Txn == nil {
			continue
		}
		for j := range o.Response.Txn.Responses {
			if d := o.Response.Txn.Responses[j].Delete; d != nil && d.PrevKVs != nil {
				d.PrevKVs = nil
				n1++
			}
		}
		if o.Request.Txn != nil && o.Response.Txn.Succeeded && len(o.Request.Txn.Success) == 1 && o.Request.Txn.Success[0].Put != nil {
			p := o.Request.Txn.Success[0].Put
			if rev, ok := seen[[2]string{p.Key, p.Value}]; ok && rev != o.Response.Revision {
				o.Response = nil
				o.Error = "diagnose: wrong revision"
				n2++
			}
		}
	}
	ops := tr.Ops[:0]
	dropped := 0
	for _, o := range tr.Ops {
		if os.Getenv("KINEX_NODROP") == "" && o.Response != nil && o.Response.Txn != nil && !o.Response.Txn.Succeeded && o.Request.Txn != nil && len(o.Request.Txn.Failure) == 0 {
			dropped++
			continue
		}
		ops = append(ops, o)
	}
	tr.Ops = ops
	println("diagnose: failed creates dropped", dropped)
	println("diagnose: prev_kvs removed", n1, "wrong-revision writes made unknown", n2)
}
