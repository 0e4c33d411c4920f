package informer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/internal/informertest"
)

// openStore opens a store in a temporary directory (inside or outside a
// synctest bubble).
func openStore(t *testing.T) *store.Store {
	t.Helper()
	dir, err := os.MkdirTemp("", "informer-test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}, Watch: watchhub.Options{ProgressInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		os.RemoveAll(dir)
	})
	return st
}

// recorder collects what a handler is told.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

func (r *recorder) handler() informer.HandlerFuncs {
	return informer.HandlerFuncs{
		AddFunc: func(o informer.Object, _ bool) { r.add("add " + o.Name) },
		UpdateFunc: func(old, new informer.Object) {
			r.add("update " + new.Name + " " + informer.RV(old.ResourceVersion) + "→" + informer.RV(new.ResourceVersion))
		},
		DeleteFunc: func(o informer.Object, _ bool) { r.add("delete " + o.Name) },
	}
}

// An update that does not change the resourceVersion — a resync's — goes
// only to the handlers whose resync period is due (kubernetes#87957,
// client-go's sharedProcessor.shouldResync).
func TestResyncGoesToDueHandlersOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		cms := informer.NewClient(st, informer.ConfigMaps)
		ctx := context.Background()
		if _, err := cms.Create(ctx, "ns", "a", "v1"); err != nil {
			t.Fatal(err)
		}
		inf := informer.NewSharedInformer(cms.ListWatch("", informer.StoreOptions{}), informer.Options{ResyncPeriod: 10 * time.Second})
		var fast, slow recorder
		inf.AddEventHandler(fast.handler())
		inf.AddEventHandlerWithResyncPeriod(slow.handler(), time.Minute)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { inf.Run(runCtx); close(done) }()
		synctest.Wait()
		if f, s := fast.take(), slow.take(); !slices.Equal(f, []string{"add a"}) || !slices.Equal(s, []string{"add a"}) {
			t.Fatalf("initial list: %v and %v", f, s)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if f, s := fast.take(), slow.take(); !slices.Equal(f, []string{"update a 2→2"}) || len(s) != 0 {
			t.Fatalf("after 10 s: the 10 s handler got %v, the 1 min handler %v", f, s)
		}
		time.Sleep(50 * time.Second)
		synctest.Wait()
		if f, s := fast.take(), slow.take(); len(f) != 5 || !slices.Equal(s, []string{"update a 2→2"}) {
			t.Fatalf("after 1 min: the 10 s handler got %v, the 1 min handler %v", f, s)
		}
		stop()
		<-done
	})
}

// A handler's HasSynced waits until its initial-list notifications have
// been delivered, not only until the informer synced (kubernetes#113985,
// issue #113763); a handler added late gets the cache's contents.
func TestHandlerHasSynced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		cms := informer.NewClient(st, informer.ConfigMaps)
		ctx := context.Background()
		for _, n := range []string{"a", "b"} {
			if _, err := cms.Create(ctx, "ns", n, "v1"); err != nil {
				t.Fatal(err)
			}
		}
		inf := informer.NewSharedInformer(cms.ListWatch("", informer.StoreOptions{}), informer.Options{})
		var gate informertest.Gate
		gate.Close()
		var slow, late recorder
		h := slow.handler()
		reg, _ := inf.AddEventHandler(informer.HandlerFuncs{AddFunc: func(o informer.Object, in bool) { gate.Wait(nil); h.OnAdd(o, in) }})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { inf.Run(runCtx); close(done) }()
		synctest.Wait()
		if !inf.HasSynced() || reg.HasSynced() {
			t.Fatalf("informer synced %v, stalled handler synced %v: want true, false", inf.HasSynced(), reg.HasSynced())
		}
		lateReg, _ := inf.AddEventHandler(late.handler())
		synctest.Wait()
		if !lateReg.HasSynced() || !slices.Equal(late.take(), []string{"add a", "add b"}) {
			t.Fatalf("the late handler: synced %v", lateReg.HasSynced())
		}
		gate.Open()
		synctest.Wait()
		if !reg.HasSynced() || !slices.Equal(slow.take(), []string{"add a", "add b"}) {
			t.Fatalf("the released handler is not synced, or missed its adds")
		}
		if err := inf.RemoveEventHandler(lateReg); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Create(ctx, "ns", "c", "v1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := late.take(); len(got) != 0 {
			t.Fatalf("a removed handler was told %v", got)
		}
		stop()
		<-done
		if _, err := inf.AddEventHandler(late.handler()); err == nil {
			t.Fatal("a handler was added to a stopped informer")
		}
	})
}

// An index function's error does not panic: the change is not applied, the
// informer's ErrorHandler is told, and the informer goes on.
func TestIndexErrorReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := openStore(t)
		cms := informer.NewClient(st, informer.ConfigMaps)
		ctx := context.Background()
		var mu sync.Mutex
		var errs []error
		inf := informer.NewSharedInformer(cms.ListWatch("", informer.StoreOptions{}), informer.Options{
			Indexers:     informer.Indexers{"app": byLabel},
			ErrorHandler: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
		})
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { inf.Run(runCtx); close(done) }()
		synctest.Wait()
		cms.Create(ctx, "ns", "bad", "not json")
		cms.Create(ctx, "ns", "good", `{"metadata":{"name":"good","labels":{"app":"web"}}}`)
		synctest.Wait()
		mu.Lock()
		n := len(errs)
		mu.Unlock()
		if n != 1 {
			t.Fatalf("%d errors reported, want 1: %v", n, errs)
		}
		if keys := inf.Indexer().ListKeys(); !slices.Equal(keys, []string{"ns/good"}) {
			t.Fatalf("cache %v, want only ns/good", keys)
		}
		stop()
		<-done
	})
}

// The Reflector's list resourceVersions (client-go's relistResourceVersion):
// "0" first; then the last synced resourceVersion (kubernetes#83520: never
// back in time); "" once that was answered 410 or "too large"
// (kubernetes#91073, #92537). With a page size, a list at N is Exact
// (legacy): after compaction it is answered 410, and the Reflector lists
// again at once, consistently.
func TestReflectorRelistResourceVersions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := informertest.NewHarness(t, informertest.Reference{}, informertest.Config{PageSize: 1}, watchhub.Options{ProgressInterval: -1})
		defer h.Close()
		h.Put("a", "x")
		h.Start(1)
		h.Advance(2 * time.Second)
		h.Partition(func() {
			h.Put("a", "y")
			h.Put("a", "z")
		})
		h.Advance(2 * time.Second)
		h.Quiesce()
		var got []string
		for _, l := range h.Rec.Runs()[0].Lists {
			if l.Options.Continue != "" {
				continue // the next pages
			}
			s := l.Options.ResourceVersion
			if s == "" {
				s = `""`
			}
			if l.Result.Status != nil {
				s += fmt.Sprintf(" → %d", l.Result.Status.Code)
			}
			got = append(got, s)
		}
		// 2 is the last synced resourceVersion: the watch saw nothing after
		// the first list.
		if want := []string{"0", "2 → 410", `""`}; !slices.Equal(got, want) {
			t.Fatalf("lists at %v, want %v", got, want)
		}
		for _, vs := range h.Violations() {
			if len(vs) > 0 {
				t.Fatal(vs)
			}
		}
	})
}

// The typed and dynamic clients: optimistic concurrency, 404s and 409s,
// and metadata from the store.
func TestClients(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	cms := informer.NewConfigMapClient(st)
	web, err := cms.Create(ctx, &informer.ConfigMap{ObjectMeta: informer.ObjectMeta{Namespace: "ns", Name: "web"}, Data: map[string]string{"k": "1"}})
	if err != nil || web.ResourceVersion == "" || web.UID != web.ResourceVersion {
		t.Fatalf("Create: %+v, %v", web, err)
	}
	if _, err := cms.Create(ctx, web); !informer.IsConflict(err) {
		t.Fatalf("a second Create: %v, want 409", err)
	}
	web.Data["k"] = "2"
	updated, err := cms.Update(ctx, web)
	if err != nil || updated.UID != web.UID || updated.ResourceVersion == web.ResourceVersion {
		t.Fatalf("Update: %+v, %v", updated, err)
	}
	if _, err := cms.Update(ctx, web); !informer.IsConflict(err) {
		t.Fatalf("an Update at a stale resourceVersion: %v, want 409", err)
	}
	got, err := cms.Get(ctx, "ns", "web")
	if err != nil || got.Data["k"] != "2" {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	if err := cms.Delete(ctx, "ns", "web"); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "ns", "web"); !informer.IsNotFound(err) {
		t.Fatalf("a second Delete: %v, want 404", err)
	}
	if _, err := cms.Update(ctx, updated); !informer.IsNotFound(err) {
		t.Fatalf("an Update of a deleted object: %v, want 404", err)
	}
	if _, err := cms.Decode(informer.Object{Key: "k", Value: "{"}); err == nil {
		t.Fatal("Decode of malformed JSON succeeded")
	}

	deployments := informer.NewDynamicClient(st).Resource(informer.GVR{Group: "apps", Version: "v1", Resource: "deployments"})
	d, err := deployments.Create(ctx, &informer.Unstructured{ObjectMeta: informer.ObjectMeta{Namespace: "ns", Name: "api"},
		Fields: map[string]any{"spec": map[string]any{"replicas": float64(3)}}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := deployments.Raw().Get(ctx, "ns", "api")
	if raw.Key != "/registry/apps/deployments/ns/api" {
		t.Fatalf("stored under %q", raw.Key)
	}
	if spec, _ := d.Fields["spec"].(map[string]any); spec["replicas"] != float64(3) {
		t.Fatalf("fields: %+v", d.Fields)
	}
	if _, _, err := informer.ParseContinue("garbage"); err == nil {
		t.Fatal("ParseContinue accepted garbage")
	}
	var se *informer.StatusError
	if _, err := informer.NewStoreListWatch(st, informer.ConfigMaps, "", informer.StoreOptions{}).List(ctx, informer.ListOptions{Continue: "garbage"}); !errors.As(err, &se) || !informer.IsBadRequest(err) {
		t.Fatalf("a list with a malformed continue token: %v, want 400", err)
	}
}
