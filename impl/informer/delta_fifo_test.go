package informer_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/watchspec/watchspec/impl/informer"
)

func obj(name string, rv int64) informer.Object {
	return informer.Object{Key: informer.ConfigMaps.Key("ns", name), Namespace: "ns", Name: name, Value: fmt.Sprintf("%s@%d", name, rv), ResourceVersion: rv, UID: 1}
}

// deltas renders deltas as "Type name@rv", tombstones marked "!".
func deltas(ds informer.Deltas) []string {
	var out []string
	for _, d := range ds {
		s := fmt.Sprintf("%s %s@%d", d.Type, d.Object.Name, d.Object.ResourceVersion)
		if d.FinalStateUnknown {
			s += "!"
		}
		out = append(out, s)
	}
	return out
}

// popAll pops every queued key, returning "key: deltas" in pop order.
func popAll(t *testing.T, f *informer.DeltaFIFO) []string {
	t.Helper()
	var out []string
	for f.Len() > 0 {
		ds, err := f.Pop(func(informer.Deltas, bool) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds.Newest().Object.Name+": "+strings.Join(deltas(ds), ", "))
	}
	return out
}

func known(objs ...informer.Object) *informer.Indexer {
	ix := informer.NewIndexer(nil, nil)
	for _, o := range objs {
		ix.Add(o)
	}
	return ix
}

// Client-go's DeltaFIFO contract (tools/cache/delta_fifo.go), case by case.
func TestDeltaFIFO(t *testing.T) {
	for _, tc := range []struct {
		name  string
		known []informer.Object
		do    func(f *informer.DeltaFIFO)
		want  []string
	}{
		{"a key keeps its first position; its deltas stay in order (TestDeltaFIFO_detectLineJumpers)", nil, func(f *informer.DeltaFIFO) {
			f.Add(obj("a", 1))
			f.Add(obj("b", 2))
			f.Update(obj("a", 3))
		}, []string{"a: Added a@1, Updated a@3", "b: Added b@2"}},
		{"only two consecutive deletions merge", []informer.Object{obj("a", 1)}, func(f *informer.DeltaFIFO) {
			f.Delete(obj("a", 2))
			f.Delete(obj("a", 2))
		}, []string{"a: Deleted a@2"}},
		{"deletions apart do not merge", []informer.Object{obj("a", 1)}, func(f *informer.DeltaFIFO) {
			f.Delete(obj("a", 2))
			f.Add(obj("a", 3))
			f.Delete(obj("a", 4))
		}, []string{"a: Deleted a@2, Added a@3, Deleted a@4"}},
		{"an observed deletion wins over a tombstone", []informer.Object{obj("a", 1)}, func(f *informer.DeltaFIFO) {
			f.Delete(obj("a", 2))
			f.Replace(nil, "5")
		}, []string{"a: Deleted a@2"}},
		{"a deletion of an unknown key is dropped", nil, func(f *informer.DeltaFIFO) {
			f.Delete(obj("a", 2))
		}, nil},
		{"a relist tombstones a key only queued: kubernetes#115620", nil, func(f *informer.DeltaFIFO) {
			f.Add(obj("tmp", 2))
			f.Replace([]informer.Object{obj("b", 3)}, "4")
		}, []string{"tmp: Added tmp@2, Deleted tmp@2!", "b: Replaced b@3"}},
		{"a relist tombstones a known key not queued, with its known state", []informer.Object{obj("a", 1), obj("b", 2)}, func(f *informer.DeltaFIFO) {
			f.Replace([]informer.Object{obj("b", 2)}, "4")
		}, []string{"b: Replaced b@2", "a: Deleted a@1!"}},
		{"a relist replaces a key whose last delta is a deletion: kubernetes#83810", []informer.Object{obj("a", 1)}, func(f *informer.DeltaFIFO) {
			f.Delete(obj("a", 2))
			f.Replace([]informer.Object{obj("a", 3)}, "3")
		}, []string{"a: Deleted a@2, Replaced a@3"}},
		{"a resync skips keys with queued deltas (TestDeltaFIFO_UpdateResyncRace)", []informer.Object{obj("a", 1), obj("b", 1)}, func(f *informer.DeltaFIFO) {
			f.Update(obj("a", 2))
			f.Resync()
		}, []string{"a: Updated a@2", "b: Sync b@1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := informer.NewDeltaFIFO(nil, known(tc.known...))
			tc.do(f)
			if got := popAll(t, f); !slices.Equal(got, tc.want) {
				t.Errorf("popped %q, want %q", got, tc.want)
			}
		})
	}
}

// HasSynced: the first Replace's keys (and tombstones) must all be popped;
// Pop says which deltas belong to that initial list.
func TestDeltaFIFOHasSynced(t *testing.T) {
	f := informer.NewDeltaFIFO(nil, known(obj("gone", 1)))
	if f.HasSynced() {
		t.Fatal("synced before the first Replace")
	}
	f.Replace([]informer.Object{obj("a", 2), obj("b", 2)}, "2")
	f.Add(obj("c", 3))
	var initial []bool
	for popped := 0; f.Len() > 0; popped++ {
		if got, want := f.HasSynced(), popped >= 3; got != want {
			t.Fatalf("after %d pops HasSynced = %v, want %v", popped, got, want)
		}
		f.Pop(func(_ informer.Deltas, in bool) error { initial = append(initial, in); return nil })
	}
	if want := []bool{true, true, true, false}; !slices.Equal(initial, want) {
		t.Errorf("isInInitialList %v, want %v (a, b, the tombstone of gone, then c)", initial, want)
	}
}

func TestDeltaFIFOClose(t *testing.T) {
	f := informer.NewDeltaFIFO(nil, nil)
	f.Close()
	if _, err := f.Pop(func(informer.Deltas, bool) error { return nil }); !errors.Is(err, informer.ErrFIFOClosed) {
		t.Fatalf("Pop after Close: %v", err)
	}
}

// A key function's error is returned, not panicked.
func TestDeltaFIFOKeyError(t *testing.T) {
	f := informer.NewDeltaFIFO(func(informer.Object) (string, error) { return "", errors.New("no key") }, nil)
	if err := f.Add(obj("a", 1)); err == nil {
		t.Fatal("Add with a failing key function succeeded")
	}
	if err := f.Replace([]informer.Object{obj("a", 1)}, "1"); err == nil {
		t.Fatal("Replace with a failing key function succeeded")
	}
}

func byLabel(o informer.Object) ([]string, error) {
	var cm informer.ConfigMap
	if err := informer.Decode(o, &cm); err != nil {
		return nil, err
	}
	return []string{cm.Labels["app"]}, nil
}

func cm(name, app string, rv int64) informer.Object {
	o := obj(name, rv)
	o.Value = fmt.Sprintf(`{"metadata":{"name":%q,"labels":{"app":%q}}}`, name, app)
	return o
}

// The Indexer: custom index functions, kept up to date on update and
// delete, with no empty index values left (kubernetes#84959).
func TestIndexer(t *testing.T) {
	ix := informer.NewIndexer(nil, informer.Indexers{"app": byLabel, informer.NamespaceIndex: informer.IndexByNamespace})
	for _, o := range []informer.Object{cm("web-1", "web", 1), cm("web-2", "web", 2), cm("db", "db", 3)} {
		if err := ix.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Update(cm("web-2", "db", 4)); err != nil {
		t.Fatal(err)
	}
	keys, err := ix.IndexKeys("app", "db")
	if err != nil || !slices.Equal(keys, []string{"ns/db", "ns/web-2"}) {
		t.Fatalf("IndexKeys(app, db) = %v, %v", keys, err)
	}
	ix.Delete(cm("web-1", "web", 1))
	if vals := ix.ListIndexFuncValues("app"); !slices.Equal(vals, []string{"db"}) {
		t.Fatalf("index values after the last web left: %v", vals)
	}
	objs, err := ix.ByIndex(informer.NamespaceIndex, "ns")
	if err != nil || len(objs) != 2 {
		t.Fatalf("ByIndex(namespace, ns) = %v, %v", objs, err)
	}
	same, err := ix.Index("app", cm("x", "db", 9))
	if err != nil || len(same) != 2 {
		t.Fatalf("Index(app, db) = %v, %v", same, err)
	}
	if _, err := ix.ByIndex("nope", "x"); err == nil {
		t.Fatal("ByIndex of an unknown index succeeded")
	}
	if err := ix.AddIndexers(informer.Indexers{"app": byLabel}); err == nil {
		t.Fatal("AddIndexers reused a name")
	}
}

// An index function's error is returned, not panicked (client-go panics),
// and leaves the store unchanged.
func TestIndexerErrors(t *testing.T) {
	ix := informer.NewIndexer(nil, informer.Indexers{"app": byLabel})
	bad := obj("bad", 1)
	bad.Value = "not json"
	if err := ix.Add(bad); err == nil {
		t.Fatal("Add of an object the index function rejects succeeded")
	}
	if _, ok := ix.GetByKey("ns/bad"); ok {
		t.Fatal("the rejected object was stored")
	}
	good := cm("bad", "web", 2)
	ix.Add(good)
	if err := ix.Update(bad); err == nil {
		t.Fatal("Update to an object the index function rejects succeeded")
	}
	if o, _ := ix.GetByKey("ns/bad"); o != good {
		t.Fatalf("the rejected update changed the store: %+v", o)
	}
	if err := ix.Replace([]informer.Object{good, bad}, "3"); err == nil {
		t.Fatal("Replace with a rejected object succeeded")
	}
	if err := ix.AddIndexers(informer.Indexers{"fails": func(informer.Object) ([]string, error) { return nil, errors.New("boom") }}); err == nil {
		t.Fatal("AddIndexers with a failing function succeeded")
	}
	if _, err := ix.ByIndex("fails", ""); err == nil {
		t.Fatal("a failed AddIndexers left its index behind")
	}
}
