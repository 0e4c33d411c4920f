package cachertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
)

func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	must := func(_ int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.Create(ctx, "ns1", "a"))
	must(h.Create(ctx, "ns1", "b"))
	if err := h.StartCacher(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := h.Watch(ctx, WatchOptions{AllowWatchBookmarks: true, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	must(h.Update(ctx, "ns1", "a"))
	must(h.Create(ctx, "ns2", "c"))
	p1, err := h.List(ctx, ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page 1: %+v", p1)
	must(h.Update(ctx, "ns1", "b"))
	must(h.Delete(ctx, "ns2", "c"))
	head, _ := h.Head(ctx)
	if err := h.Compact(ctx, head); err != nil {
		t.Fatal(err)
	}
	for _, o := range []ListOptions{
		{ResourceVersion: itoa(p1.ResourceVersion), ResourceVersionMatch: "Exact"},
		{ResourceVersion: itoa(p1.ResourceVersion), Limit: 2},
		{Continue: p1.Continue},
		{ResourceVersion: "2", ResourceVersionMatch: "Exact"},
		{ResourceVersion: "0"},
		{},
		{ResourceVersionMatch: "Exact"},
	} {
		r, err := h.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("list %+v: %+v (cacher compaction %d)", o, r, h.CacherCompactRevision())
	}
	w2, _ := h.Watch(ctx, WatchOptions{ResourceVersion: "1", Timeout: time.Second})
	<-w2.Done()
	<-w.Done()
	tr, err := h.Trace(ctx, "smoke")
	if err != nil {
		t.Fatal(err)
	}
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s; %s", res.Verdict, res.Method, h.Rec.Stats())
	for _, v := range res.Violations {
		t.Logf("FAIL %s %s: %s", v.Property, v.Where, v.Violation.Message)
	}
	for i, wc := range tr.K8s.Watches {
		t.Logf("watch %d %+v status %+v", i, wc.Options, wc.Status)
		for _, e := range wc.Events {
			t.Logf("   %s %s rv=%d end=%v %+v", e.Type, e.Object.Key, e.Object.ResourceVersion, e.InitialEventsEnd, e.Status)
		}
	}
}

func itoa(n int64) string { return k8s.RV(n) }

func TestExplore(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { explore(t, seed) })
	}
}

func explore(t *testing.T, seed int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := time.Now()
	out, err := Run(ctx, h, Config{Seed: seed, Prepopulate: 10, Writes: 300, CompactEvery: 30, Lists: 250, Watches: 50, SlowWatches: 2, Namespaces: 2, Names: 5})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := h.Trace(ctx, "explore")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ran %v: %+v, %s", time.Since(start), out, h.Rec.Stats())
	res, err := linearizability.Check(tr, linearizability.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s", res.Verdict, res.Method)
	for _, v := range res.Violations {
		if v.Property == "Expired" && strings.Contains(v.Message, "was served instead") {
			continue
		}
		t.Errorf("FAIL %s %s", v.Property, v.Violation)
	}
}
