package bench

import (
	"context"
	"fmt"
	"github.com/watchspec/watchspec/internal/histsim"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// checkHistory is the simulated history linearizability.Check measures: the
// shape of linearizability's BenchmarkCheck100k (8 clients, a compaction
// every 200 operations, 0.1 % writes of unknown outcome, a collector watch
// on every key).
func checkHistory(ops int) *traces.Trace {
	return histsim.Simulate(histsim.Config{Ops: ops, Clients: 8, CompactEvery: 200, Unknown: 0.001, Watch: true, Seed: 1})
}

// measureCheck times linearizability.Check on tr (linearization, then
// validation of its watch): seconds.
func measureCheck(tr *traces.Trace) (float64, error) {
	start := time.Now()
	res, err := linearizability.Check(tr, linearizability.Options{})
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if res.Verdict != linearizability.Linearizable || len(res.Violations) > 0 {
		return 0, fmt.Errorf("the simulated history was judged %v with %d violations", res.Verdict, len(res.Violations))
	}
	return d.Seconds(), nil
}

// validationInput is one watch stream of n events (three keys written per
// revision, as linearizability's BenchmarkValidateWatchEvents) and its history.
type validationInput struct {
	h      *kv.History
	req    watch.Request
	stream []watch.Response
	events int
}

func newValidationInput(events int) *validationInput {
	revisions := max(1, events/3)
	h, req, stream := histsim.ThreeKeyTxns(revisions)
	return &validationInput{h: h, req: req, stream: stream, events: revisions * 3}
}

// measureValidation runs a watch.Validator over the stream: events/s.
func measureValidation(in *validationInput) (float64, error) {
	start := time.Now()
	v := watch.NewValidator(in.h, in.req)
	for _, r := range in.stream {
		if vs := v.Observe(r); len(vs) > 0 {
			return 0, fmt.Errorf("the canonical stream was judged wrong: %v", vs[0])
		}
	}
	return float64(in.events) / time.Since(start).Seconds(), nil
}

// informerInput is a reference store (in a temporary directory, fsync off:
// it is the source, not what is measured) holding a seed object at revision
// base and then n changes of objects of one resource.
type informerInput struct {
	dir  string
	st   *store.Store
	base int64
	n    int
}

func newInformerInput(ctx context.Context, n int) (*informerInput, error) {
	dir, err := os.MkdirTemp("", "watchspec-bench-informer-")
	if err != nil {
		return nil, err
	}
	st, err := store.Open(dir, store.Options{KV: mvcc.Options{UnsafeNoFsync: true}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	in := &informerInput{dir: dir, st: st, n: n}
	gvr := informer.ConfigMaps
	resp, err := st.Put(ctx, store.PutRequest{Key: gvr.Key("bench", "seed"), Value: value(0, valueSize)})
	if err != nil {
		in.close()
		return nil, err
	}
	in.base = resp.Revision
	objects := max(1, min(1000, n/10))
	// 16 writers: the store commits them in groups.
	var next atomic.Int64
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					errs <- nil
					return
				}
				key := gvr.Key("bench", "cm-"+strconv.Itoa(int(i)%objects))
				if _, err := st.Put(ctx, store.PutRequest{Key: key, Value: value(i, valueSize)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 16 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

func (in *informerInput) close() {
	in.st.Close()
	os.RemoveAll(in.dir)
}

// measureInformer runs a SharedInformer over the store's resource, listing
// at the seed's revision and so watching every change after it: each goes
// Reflector → DeltaFIFO → Indexer → the handler. Events/s from Run to the
// handler's last notification.
func measureInformer(ctx context.Context, in *informerInput) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lw := informer.NewStoreListWatch(in.st, informer.ConfigMaps, "", informer.StoreOptions{})
	base := strconv.FormatInt(in.base, 10)
	inf := informer.NewSharedInformer(informer.ListWatch{
		ListFunc: func(ctx context.Context, _ informer.ListOptions) (*informer.List, error) {
			return lw.List(ctx, informer.ListOptions{ResourceVersion: base, ResourceVersionMatch: "Exact"})
		},
		WatchFunc: lw.Watch,
	}, informer.Options{DisableWatchList: true, Indexers: informer.Indexers{informer.NamespaceIndex: informer.IndexByNamespace}})
	want := int64(in.n + 1) // the seed's add, then every change
	var seen atomic.Int64
	done := make(chan struct{})
	note := func() {
		if seen.Add(1) == want {
			close(done)
		}
	}
	if _, err := inf.AddEventHandler(informer.HandlerFuncs{
		AddFunc:    func(informer.Object, bool) { note() },
		UpdateFunc: func(informer.Object, informer.Object) { note() },
		DeleteFunc: func(informer.Object, bool) { note() },
	}); err != nil {
		return 0, err
	}
	stopped := make(chan struct{})
	start := time.Now()
	go func() { inf.Run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	select {
	case <-done:
		return float64(want) / time.Since(start).Seconds(), nil
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("the informer's handler saw %d of %d notifications in 5 minutes", seen.Load(), want)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
