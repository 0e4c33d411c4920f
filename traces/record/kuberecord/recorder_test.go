package kuberecord_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchspec/watchspec/conform/informertest"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	harness "github.com/watchspec/watchspec/internal/informertest"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/model/spec"
	"github.com/watchspec/watchspec/traces"
	"github.com/watchspec/watchspec/traces/record/kuberecord"
)

var configMaps = k8s.GVR{Version: "v1", Resource: "configmaps"}

// configMapObject is the model's view of the ConfigMaps that
// conform/informertest's client-go adapter serves from the reference
// store: the value in data.value, the UID the creating revision.
func configMapObject(obj runtime.Object) (k8s.Object, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return k8s.Object{}, fmt.Errorf("%T is not an unstructured ConfigMap", obj)
	}
	value, _, _ := unstructured.NestedString(u.Object, "data", "value")
	rv, ok := k8s.ParseRV(u.GetResourceVersion())
	if !ok {
		return k8s.Object{}, fmt.Errorf("%s/%s has resourceVersion %q", u.GetNamespace(), u.GetName(), u.GetResourceVersion())
	}
	uid, err := strconv.ParseInt(string(u.GetUID()), 10, 64)
	if err != nil {
		return k8s.Object{}, fmt.Errorf("%s/%s has UID %q, not a revision", u.GetNamespace(), u.GetName(), u.GetUID())
	}
	return k8s.Object{Key: configMaps.Key(u.GetNamespace(), u.GetName()), Value: value, ResourceVersion: rv, UID: uid}, nil
}

var neverCompacted int64 = -1

// recordRun runs client-go's SharedIndexInformer (resync on, two handlers,
// one with its own resync period) over the reference store served as
// ConfigMaps through conform/informertest's adapter — wrapped by wrap, to
// break it on purpose —, records it with a Recorder while writes go on,
// writes the trace with traces.WriteFile, reads it back and checks it.
// With noRevision the recorder is given no Options.Revision.
func recordRun(t *testing.T, watchList, noRevision bool, wrap func(informertest.Subject) informertest.Subject) (*linearizability.Result, *traces.Trace) {
	t.Helper()
	klog.SetLogger(logr.Discard()) // client-go logs every watch it restarts
	var res *linearizability.Result
	var back *traces.Trace
	synctest.Test(t, func(t *testing.T) {
		st, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		prefix := configMaps.Prefix("")
		writes := harness.NewRecorder(st, prefix) // records every write of the store
		ctx := context.Background()
		values := 0
		put := func(ns, name string) {
			values++
			if _, err := writes.Put(ctx, configMaps.Key(ns, name), fmt.Sprintf("v%d", values)); err != nil {
				t.Fatal(err)
			}
		}
		del := func(ns, name string) {
			if _, err := writes.Delete(ctx, configMaps.Key(ns, name)); err != nil {
				t.Fatal(err)
			}
		}
		put("a", "x")
		put("a", "y")

		opts := kuberecord.Options{Prefix: prefix, Object: configMapObject, Revision: st.Revision}
		if noRevision {
			opts.Revision = nil
		}
		rec, err := kuberecord.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		var inf cache.SharedIndexInformer
		var subject informertest.Subject = informertest.ClientGo{NewInformer: func(lw cache.ListerWatcher, example runtime.Object, opts cache.SharedIndexInformerOptions) cache.SharedIndexInformer {
			inf = cache.NewSharedIndexInformerWithOptions(rec.NewListerWatcher(lw), example, opts)
			return inf
		}}
		if wrap != nil {
			subject = wrap(subject)
		}
		subject.New(informer.NewStoreListWatch(st, informer.ConfigMaps, "", informer.StoreOptions{}),
			informertest.Config{ResyncPeriod: 10 * time.Second, WatchList: watchList})
		if _, err := rec.AddEventHandler(inf, cache.ResourceEventHandlerFuncs{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.AddEventHandlerWithResyncPeriod(inf, cache.ResourceEventHandlerFuncs{}, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			rec.Run(rctx, inf)
		}()
		synctest.Wait()
		put("a", "x")
		del("a", "y")
		put("b", "z")
		time.Sleep(time.Second)
		put("b", "z")
		del("a", "x")
		put("a", "y")
		time.Sleep(time.Minute) // resyncs: the informer's and handler 1's
		synctest.Wait()
		rec.Quiesced()
		cancel()
		<-done
		rec.Finish(inf)

		tr, err := rec.Trace(traces.Header{System: "client-go", UniqueValues: true, BaseCompactRevision: &neverCompacted}, writes.Trace("", "").Ops)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "informer.ndjson")
		if err := traces.WriteFile(path, tr); err != nil {
			t.Fatal(err)
		}
		if back, err = traces.ReadFile(path); err != nil {
			t.Fatal(err)
		}
		if res, err = linearizability.Check(back, linearizability.Options{}); err != nil {
			t.Fatal(err)
		}
	})
	return res, back
}

// A recorded client-go informer run passes the checker, and the checks
// were made: the run is not vacuous. Without Options.Revision (bounds from
// the writes only) it passes too. SPEC §4 and §5 (InformerConverges
// §5.2, HasSynced §5.3, LateHandler §5.4, SameRVUpdate §5.7).
func TestRecordedClientGoPasses(t *testing.T) {
	for _, c := range []struct{ watchList, noRevision bool }{{false, false}, {true, false}, {false, true}} {
		t.Run(fmt.Sprintf("watchList=%v,noRevision=%v", c.watchList, c.noRevision), func(t *testing.T) {
			watchList := c.watchList
			res, tr := recordRun(t, watchList, c.noRevision, nil)
			if err := res.Err(); err != nil {
				t.Fatalf("the recorded run of client-go fails the check: %v", err)
			}
			if res.Checks[spec.InformerConverges] == 0 {
				t.Errorf("InformerConverges was not checked: %v", res.Checks)
			}
			count := map[string]int{}
			for _, e := range tr.K8s.Entries {
				switch {
				case e.Notification != nil:
					count[string(e.Notification.Type)]++
					if e.Notification.InInitialList {
						count["initial"]++
					}
				case e.Resync:
					count["resync"]++
				case e.HasSynced != nil:
					count["synced"]++
				case e.List != nil:
					count["list"]++
				case e.WatchEvent != nil:
					count["event"]++
				}
			}
			// Two handlers, each told of a/x and a/y in the initial list, of
			// the writes after, and of resyncs; the informer and both
			// handlers synced.
			for _, k := range []string{"OnAdd", "OnUpdate", "OnDelete", "initial", "resync", "event"} {
				if count[k] == 0 {
					t.Errorf("no %s recorded: %v", k, count)
				}
			}
			if count["synced"] != 3 {
				t.Errorf("%d HasSynced recorded, want 3 (the informer, 2 handlers): %v", count["synced"], count)
			}
			if !watchList && count["list"] == 0 {
				t.Errorf("no list recorded: %v", count)
			}
			streamed := false
			for _, w := range tr.K8s.Watches {
				streamed = streamed || (w.Options.SendInitialEvents != nil && *w.Options.SendInitialEvents)
			}
			if streamed != watchList {
				t.Errorf("a WatchList (sendInitialEvents) recorded = %v, want %v: the wrapper must keep the source's WatchList support", streamed, watchList)
			}
		})
	}
}

// The same run over a source that drops every DELETED watch event fails,
// naming InformerConverges §5.2 (a/y and a/x, deleted while the informer
// watched, stay in its cache) and, since the recorded watch shows the
// gap, Reliable §3.3 for the source.
func TestRecordedDroppedDeletesFail(t *testing.T) {
	res, _ := recordRun(t, false, false, informertest.DropsEvents)
	err := res.Err()
	if err == nil {
		t.Fatal("a client-go informer that never saw a DELETED event passed the check")
	}
	if !strings.Contains(err.Error(), "InformerConverges") || !strings.Contains(err.Error(), "5.2") {
		t.Errorf("the violations do not name InformerConverges §5.2: %v", err)
	}
	if !strings.Contains(err.Error(), "Reliable §3.3") {
		t.Errorf("the violations do not name the source's skipped events, Reliable §3.3: %v", err)
	}
}

// Lists made through the recorded ListerWatcher — a paginated list, whose
// continue tokens become the keys the pages continue after, and a list of
// a compacted revision answered 410 Expired — are recorded as the checker
// reads them, and pass it. SPEC §4.1 ListResourceVersion (a continuation
// stays at its first page's revision), §4.2 ListSnapshot, §4.5 Expired.
func TestRecordedListsPaginatedAndExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := store.Open(t.TempDir(), store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		prefix := configMaps.Prefix("")
		writes := harness.NewRecorder(st, prefix)
		ctx := context.Background()
		for i, name := range []string{"x", "y", "z"} {
			if _, err := writes.Put(ctx, configMaps.Key("a", name), fmt.Sprintf("v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := kuberecord.New(kuberecord.Options{Prefix: prefix, Object: configMapObject, Revision: st.Revision})
		if err != nil {
			t.Fatal(err)
		}
		var lw cache.ListerWatcher
		var inf cache.SharedIndexInformer
		informertest.ClientGo{NewInformer: func(inner cache.ListerWatcher, example runtime.Object, opts cache.SharedIndexInformerOptions) cache.SharedIndexInformer {
			lw = rec.NewListerWatcher(inner)
			inf = cache.NewSharedIndexInformerWithOptions(lw, example, opts)
			return inf
		}}.New(informer.NewStoreListWatch(st, informer.ConfigMaps, "", informer.StoreOptions{}), informertest.Config{})

		var keys []string
		for o := (metav1.ListOptions{Limit: 1}); ; {
			l, err := lw.List(o)
			if err != nil {
				t.Fatal(err)
			}
			la, _ := meta.ListAccessor(l)
			items, _ := meta.ExtractList(l)
			for _, it := range items {
				m, _ := meta.Accessor(it)
				keys = append(keys, m.GetName())
			}
			if o.Continue = la.GetContinue(); o.Continue == "" {
				break
			}
		}
		if got := strings.Join(keys, ","); got != "x,y,z" {
			t.Fatalf("the pages listed %s, want x,y,z", got)
		}
		if err := writes.Compact(ctx, st.Revision()); err != nil {
			t.Fatal(err)
		}
		if _, err := lw.List(metav1.ListOptions{ResourceVersion: "2", ResourceVersionMatch: metav1.ResourceVersionMatchExact}); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("a list of compacted revision 2 answered %v, want 410 Expired", err)
		}
		rec.Finish(inf)
		tr, err := rec.Trace(traces.Header{System: "client-go", UniqueValues: true, BaseCompactRevision: &neverCompacted}, writes.Trace("", "").Ops)
		if err != nil {
			t.Fatal(err)
		}
		ls := tr.K8s.Lists
		if len(ls) != 4 {
			t.Fatalf("%d lists recorded, want 4 (three pages, one 410)", len(ls))
		}
		for i, want := range []string{"", configMaps.Key("a", "x"), configMaps.Key("a", "y")} {
			if got := ls[i].Options.Continue; got != want {
				t.Errorf("page %d continues after %q, want %q", i, got, want)
			}
			if (i > 0) != (ls[i].First != nil) {
				t.Errorf("page %d: first page recorded = %v", i, ls[i].First != nil)
			}
		}
		if s := ls[3].Result.Status; s == nil || s.Code != 410 {
			t.Errorf("the list of a compacted revision was recorded with status %+v, want 410", s)
		}
		path := filepath.Join(t.TempDir(), "lists.ndjson")
		if err := traces.WriteFile(path, tr); err != nil {
			t.Fatal(err)
		}
		back, err := traces.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := linearizability.Check(back, linearizability.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Err(); err != nil {
			t.Fatalf("the recorded lists fail the check: %v", err)
		}
		t.Logf("checks: %v", res.Checks)
	})
}

// New without Options.Object is refused with an error saying what to set.
func TestNewNeedsObject(t *testing.T) {
	if _, err := kuberecord.New(kuberecord.Options{Prefix: "/registry/configmaps/"}); err == nil || !strings.Contains(err.Error(), "Options.Object") {
		t.Errorf("New without Object: %v, want an error naming Options.Object", err)
	}
}
