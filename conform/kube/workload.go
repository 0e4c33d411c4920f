package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/watchspec/watchspec/model/k8s"
	"github.com/watchspec/watchspec/traces"
)

// Config shapes a run. Zero values take the defaults noted.
type Config struct {
	// REST reaches the apiserver (required): from a kubeconfig,
	// clientcmd.BuildConfigFromFlags("", path), or [LoadKubeconfig].
	REST *rest.Config
	// Resource is the namespaced resource the run writes, lists and
	// watches (default v1 podtemplates: served by every cluster, written
	// by no controller, no TTL). The run must be its only writer in the
	// namespace.
	Resource schema.GroupVersionResource
	// Namespace is the run's namespace (default watchspec-conform-SEED).
	// It must hold no object of the resource; the run creates it when the
	// server serves namespaces and it does not exist, and then deletes it
	// at the end unless KeepNamespace.
	Namespace     string
	KeepNamespace bool
	// Duration of the workload (default 10s), not counting the end: the
	// informer catching up, the watches ending.
	Duration time.Duration
	// Writers, Readers and Watchers are the concurrent clients that write,
	// list, and watch (defaults 2, 2, 3); Objects is how many names the
	// writers share out (default 8).
	Writers, Readers, Watchers, Objects int
	// Seed makes the workload's choices reproducible (the timing of a
	// concurrent run is not).
	Seed int64
	// Exclusive says nothing but the run writes to the apiserver's storage
	// (a dedicated etcd under an apiserver that writes nothing of its own,
	// as in watchspec's own tests): every revision is then a write of the
	// run, which bounds from above what a list or watch may return. Leave
	// it unset against a cluster.
	Exclusive bool
	// RequestTimeout bounds each request (default 30s). A write that gets
	// no answer makes the run fail: its outcome, and so the history, is
	// unknown.
	RequestTimeout time.Duration
	// Compact, when set, compacts the apiserver's etcd at rev through the
	// apiserver's own protocol (etcd3.Compact: a write of compact_rev_key,
	// then the compaction), as a test harness with access to that etcd can,
	// and returns the revision of the compact_rev_key write and the
	// revision the store was at when the compaction took effect. The run
	// then compacts every CompactEvery (default 1s) to the latest revision
	// it had seen one period before, as the apiserver's compactor does, and
	// records the compaction in force on every list and watch. Over HTTP
	// alone compactions are invisible: leave it nil against a cluster.
	Compact      func(ctx context.Context, rev int64) (keyRev, at int64, err error)
	CompactEvery time.Duration
	// System and SystemVersion name the system under test in the trace.
	System, SystemVersion string
	// Progress, when set, is told how the run goes.
	Progress func(format string, args ...any)
}

// DefaultResource is the resource a run uses unless told otherwise.
var DefaultResource = schema.GroupVersionResource{Version: "v1", Resource: "podtemplates"}

func (c *Config) defaults() error {
	if c.REST == nil {
		return errors.New("no apiserver: Config.REST is nil")
	}
	if c.Resource.Resource == "" {
		c.Resource = DefaultResource
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Writers <= 0 {
		c.Writers = 2
	}
	if c.Readers < 0 {
		c.Readers = 0
	} else if c.Readers == 0 {
		c.Readers = 2
	}
	if c.Watchers < 0 {
		c.Watchers = 0
	} else if c.Watchers == 0 {
		c.Watchers = 3
	}
	if c.Objects <= 0 {
		c.Objects = 8
	}
	if c.Namespace == "" {
		c.Namespace = fmt.Sprintf("watchspec-conform-%d", uint64(c.Seed)%1_000_000)
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.CompactEvery <= 0 {
		c.CompactEvery = time.Second
	}
	if c.System == "" {
		c.System = "Kubernetes apiserver"
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	return nil
}

// Record runs the Kubernetes workload against the apiserver of cfg.REST,
// writes the recording to out as a trace (docs/TRACE_FORMAT.md, version 2,
// with the Kubernetes records), and returns what it counted. The trace is
// checked with linearizability.Check, as any trace: every list and watch
// against docs/SPEC.md §4, the informer against §5.
//
// The workload, in a namespace of its own:
//
//   - writers create, update (optimistically, at the resourceVersion they
//     last saw, sometimes a stale one) and delete (with UID and
//     resourceVersion preconditions) objects whose annotation
//     [ValueAnnotation] carries a value never written before;
//   - readers list with resourceVersion unset, "0", Exact and
//     NotOlderThan (and the legacy exact list: a resourceVersion with a
//     limit), whole or in pages followed with continue, and now and then
//     with options the server must reject;
//   - watchers watch from a resourceVersion, from "0" and from now, with
//     and without bookmarks, and WatchList (sendInitialEvents) streams,
//     for a second or two or until the server ends them (timeoutSeconds);
//   - a collector watches the namespace from the start to the end,
//     resuming where it stopped, so that every deletion is seen (the
//     history needs the revision of deletes answered with a Status);
//   - client-go's SharedIndexInformer (WatchList, resync, a handler added
//     late) runs from before the first write to after the last, until its
//     cache agrees with a final consistent list.
//
// The run refuses a namespace that already holds objects of the resource.
// Preconditions (docs/CONFORMANCE.md): nobody else writes the resource in
// the namespace during the run, and the run is shorter than the
// apiserver's etcd compaction interval (--etcd-compaction-interval,
// default 5 minutes), since compactions are not visible over HTTP.
func Record(ctx context.Context, cfg Config, out io.Writer) (Stats, error) {
	if err := cfg.defaults(); err != nil {
		return Stats{}, err
	}
	r, err := newRun(ctx, cfg)
	if err != nil {
		return Stats{}, err
	}
	defer r.cleanup()
	b, err := r.run(ctx)
	if err != nil {
		return Stats{}, err
	}
	if err := traces.Write(out, b.trace); err != nil {
		return Stats{}, err
	}
	return b.stats, nil
}

// run is one run's state.
type run struct {
	cfg   Config
	rec   *recorder
	c     *client
	kind  string
	names []string
	base  int64
	// createdNS: the run created its namespace (and deletes it after).
	createdNS bool
	dyn       dynamic.Interface

	mu   sync.Mutex
	seen []int64 // revisions the run saw, for the requests that name one
	err  error   // the first error that ends the run
}

func newRun(ctx context.Context, cfg Config) (*run, error) {
	rc := rest.CopyConfig(cfg.REST)
	rc.Timeout = cfg.RequestTimeout
	rc.QPS, rc.Burst = -1, 0 // the workload paces itself
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	host, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, dyn: dyn}
	d := &discovery{http: hc, host: strings.TrimRight(host.String(), "/")}
	res, err := d.resource(ctx, cfg.Resource)
	if err != nil {
		return nil, err
	}
	r.kind = res.Kind
	if err := r.ensureNamespace(ctx, d); err != nil {
		return nil, err
	}
	gvr := k8s.GVR{Group: cfg.Resource.Group, Version: cfg.Resource.Version, Resource: cfg.Resource.Resource}
	r.rec = newRecorder(gvr, cfg.Namespace)
	if cfg.Compact != nil {
		r.rec.compactRev = -1 // the run compacts: it knows every compaction from its start
	}
	r.c = &client{rec: r.rec, res: dyn.Resource(cfg.Resource).Namespace(cfg.Namespace), ns: cfg.Namespace, gvr: cfg.Resource,
		http: hc, host: d.host, newObject: r.newObject}
	for i := range cfg.Objects {
		r.names = append(r.names, fmt.Sprintf("obj-%d", i))
	}
	return r, nil
}

// newObject is the object of a create or an update: the value in its
// annotation, and what the resource needs to be valid.
func (r *run) newObject(name, value string) *unstructured.Unstructured {
	o := map[string]any{
		"apiVersion": r.cfg.Resource.GroupVersion().String(),
		"kind":       r.kind,
		"metadata":   map[string]any{"name": name, "namespace": r.cfg.Namespace, "annotations": map[string]any{ValueAnnotation: value}},
	}
	if r.cfg.Resource == DefaultResource {
		// A PodTemplate needs a container; nothing runs it.
		o["template"] = map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "watchspec.invalid/none"}}}}
	}
	return &unstructured.Unstructured{Object: o}
}

// discovery asks the server what it serves, with plain requests (the
// discovery client would pull in every API group's types).
type discovery struct {
	http *http.Client
	host string
}

func (d *discovery) get(ctx context.Context, path string, into any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.host+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(into)
}

func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

// resource returns the server's description of gvr, and an error when the
// run cannot use it.
func (d *discovery) resource(ctx context.Context, gvr schema.GroupVersionResource) (metav1.APIResource, error) {
	var list metav1.APIResourceList
	path := groupVersionPath(gvr.GroupVersion())
	code, err := d.get(ctx, path, &list)
	switch {
	case err != nil:
		return metav1.APIResource{}, fmt.Errorf("asking the apiserver what %s serves: %w", path, err)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return metav1.APIResource{}, fmt.Errorf("the apiserver answered %d to GET %s: check the kubeconfig's credentials", code, path)
	case code != http.StatusOK:
		return metav1.APIResource{}, fmt.Errorf("the apiserver does not serve %s (GET %s: %d)", gvr.GroupVersion(), path, code)
	}
	for _, res := range list.APIResources {
		if res.Name != gvr.Resource {
			continue
		}
		if !res.Namespaced {
			return res, fmt.Errorf("%s is not namespaced: the run needs a namespaced resource", gvr)
		}
		for _, verb := range []string{"create", "update", "delete", "list", "watch"} {
			if !slices.Contains(res.Verbs, verb) {
				return res, fmt.Errorf("%s does not allow %s", gvr, verb)
			}
		}
		return res, nil
	}
	return metav1.APIResource{}, fmt.Errorf("the apiserver serves no resource %q in %s", gvr.Resource, gvr.GroupVersion())
}

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// ensureNamespace creates the run's namespace when the server serves
// namespaces and it does not exist. (A server without namespaces — a bare
// generic apiserver — takes any namespace in a path.)
func (r *run) ensureNamespace(ctx context.Context, d *discovery) error {
	if _, err := d.resource(ctx, namespaces); err != nil {
		r.cfg.Progress("the apiserver serves no namespaces: using %s in paths only", r.cfg.Namespace)
		return nil
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": r.cfg.Namespace}}}
	_, err := r.dyn.Resource(namespaces).Create(ctx, ns, metav1.CreateOptions{})
	switch {
	case err == nil:
		r.createdNS = true
		r.cfg.Progress("created namespace %s", r.cfg.Namespace)
	case apierrors.IsAlreadyExists(err):
	default:
		return fmt.Errorf("creating namespace %s: %w", r.cfg.Namespace, err)
	}
	return nil
}

func (r *run) cleanup() {
	if r.createdNS && !r.cfg.KeepNamespace {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.RequestTimeout)
		defer cancel()
		if err := r.dyn.Resource(namespaces).Delete(ctx, r.cfg.Namespace, metav1.DeleteOptions{}); err != nil {
			r.cfg.Progress("deleting namespace %s: %v", r.cfg.Namespace, err)
		}
	}
}

// fail records the first error that ends the run.
func (r *run) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *run) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// saw notes a revision the run saw (a write's, a list's).
func (r *run) saw(rev int64) {
	if rev <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, rev)
	if len(r.seen) > 256 {
		r.seen = r.seen[len(r.seen)-128:]
	}
}

// latest returns the latest revision the run saw.
func (r *run) latest() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.base
	for _, rev := range r.seen {
		l = max(l, rev)
	}
	return l
}

// someRevision returns a revision the run saw: mostly a recent one,
// sometimes the base.
func (r *run) someRevision(rng *rand.Rand) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 || rng.IntN(10) == 0 {
		return r.base
	}
	return r.seen[len(r.seen)-1-rng.IntN(min(len(r.seen), 16))]
}

func (r *run) run(ctx context.Context) (*built, error) {
	cfg := r.cfg
	// The namespace holds nothing: the base revision, a consistent read.
	pre, err := r.c.res.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("listing %s in namespace %s: %w", cfg.Resource.Resource, cfg.Namespace, err)
	}
	if n := len(pre.Items); n > 0 {
		return nil, fmt.Errorf("namespace %s already holds %s (%s, …): the run needs a namespace of its own, with no %s in it", cfg.Namespace, cfg.Resource.Resource, pre.Items[0].GetName(), cfg.Resource.Resource)
	}
	base, ok := k8s.ParseRV(pre.GetResourceVersion())
	if !ok || base == 0 {
		return nil, fmt.Errorf("the list of %s answered resourceVersion %q", cfg.Resource.Resource, pre.GetResourceVersion())
	}
	r.base = base
	cfg.Progress("namespace %s is empty at revision %d", cfg.Namespace, base)

	// The informer first, so that its first sync is the run's first list.
	example := &unstructured.Unstructured{}
	example.SetAPIVersion(cfg.Resource.GroupVersion().String())
	example.SetKind(r.kind)
	inf := newInformer(r.c, example, 2*time.Second)
	if err := inf.addHandler(-1); err != nil {
		return nil, err
	}
	ictx, stopInformer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopInformer()
	inf.start(ictx, base)
	if err := waitFor(ctx, 30*time.Second, inf.hasSynced); err != nil {
		inf.stop()
		return nil, fmt.Errorf("the informer did not sync: %w", err)
	}

	wctx, stopWork := context.WithTimeout(ctx, cfg.Duration)
	defer stopWork()
	var wg sync.WaitGroup
	// The collector runs until told; the rest until the duration is up.
	cctx, stopCollector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCollector()
	collector := &collector{r: r}
	collectorDone := make(chan struct{})
	go func() {
		defer close(collectorDone)
		collector.run(cctx)
	}()
	for i := range cfg.Writers {
		wg.Add(1)
		go func() { defer wg.Done(); r.writer(wctx, i) }()
	}
	if cfg.Compact != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.compactor(wctx) }()
	}
	for i := range cfg.Readers {
		wg.Add(1)
		go func() { defer wg.Done(); r.reader(wctx, i) }()
	}
	for i := range cfg.Watchers {
		wg.Add(1)
		go func() { defer wg.Done(); r.watcher(wctx, i) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-wctx.Done():
			return
		case <-time.After(cfg.Duration / 3):
		}
		if err := inf.addHandler(0); err != nil {
			r.fail(err)
		}
	}()
	wg.Wait()
	if err := r.failed(); err != nil {
		stopCollector()
		<-collectorDone
		inf.stop()
		return nil, err
	}
	if ctx.Err() != nil {
		stopCollector()
		<-collectorDone
		inf.stop()
		return nil, ctx.Err()
	}

	// Quiescence: a last consistent list; the informer must come to agree
	// with it, and the collector to see up to it.
	final, st, _, err := r.c.list(ctx, metav1.ListOptions{})
	if err != nil || st != nil {
		stopCollector()
		<-collectorDone
		inf.stop()
		return nil, fmt.Errorf("the final list failed: %v %v", err, st)
	}
	finalRV, _ := k8s.ParseRV(final.GetResourceVersion())
	want := map[string]rawObject{}
	for i := range final.Items {
		o := r.c.raw(&final.Items[i])
		want[o.key] = o
	}
	if err := waitFor(ctx, 30*time.Second, func() bool { return inf.agrees(want) }); err != nil {
		cfg.Progress("the informer did not come to agree with the final list (revision %d) in 30 s: the check will say why", finalRV)
	}
	if err := waitFor(ctx, 15*time.Second, func() bool { return collector.reached() >= finalRV }); err != nil {
		cfg.Progress("the collector saw up to revision %d, not the final %d", collector.reached(), finalRV)
	}
	inf.observe()
	r.rec.informer(k8s.Entry{Quiesced: true})
	inf.stop()
	stopCollector()
	<-collectorDone
	// Every watch has ended: a consistent list now reads a revision no
	// earlier answer can exceed — the head of the history (others may
	// have written since the list above).
	closing, st, _, err := r.c.list(ctx, metav1.ListOptions{})
	if err != nil || st != nil {
		return nil, fmt.Errorf("the closing list failed: %v %v", err, st)
	}
	head, _ := k8s.ParseRV(closing.GetResourceVersion())
	cfg.Progress("recorded: %v", r.rec.stats())

	hdr := traces.Header{System: cfg.System, SystemVersion: cfg.SystemVersion, Tool: "watchspec conform --kubeconfig", Seed: cfg.Seed}
	return r.rec.build(hdr, base, max(head, finalRV), cfg.Exclusive)
}

// waitFor polls cond until it holds, or fails after d.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// pause waits a little, or until ctx is done.
func pause(ctx context.Context, rng *rand.Rand, max time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(rng.Int64N(int64(max)))):
	}
}

// --- writers ---

// objState is what a writer knows of one of its names.
type objState struct {
	exists  bool
	uid, rv string
}

// writer creates, updates and deletes the names i, i+Writers, …, which no
// other client writes.
func (r *run) writer(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(i)))
	state := map[string]*objState{}
	var mine []string
	for j := i; j < len(r.names); j += r.cfg.Writers {
		mine = append(mine, r.names[j])
		state[r.names[j]] = &objState{}
	}
	if len(mine) == 0 {
		return
	}
	for ctx.Err() == nil {
		pause(ctx, rng, 40*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		name := mine[rng.IntN(len(mine))]
		s := state[name]
		// Each request gets its own deadline, not the run's: a write cut
		// off by the end of the run would have an unknown outcome.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RequestTimeout)
		var out *unstructured.Unstructured
		var st *k8s.Status
		var err error
		switch p := rng.IntN(100); {
		case !s.exists:
			out, st, err = r.c.write(wctx, i, create, name, "", "")
		case p < 60:
			rv := s.rv
			stale := rng.IntN(10) == 0
			if stale {
				rv = fmt.Sprint(r.base) // a conflict: the object changed since
			}
			out, st, err = r.c.write(wctx, i, update, name, "", rv)
		default:
			_, st, err = r.c.write(wctx, i, remove, name, s.uid, s.rv)
			if err == nil && st == nil {
				*s = objState{}
			}
		}
		cancel()
		switch {
		case err != nil:
			r.fail(err)
			return
		case st != nil && st.Code != 409:
			r.fail(fmt.Errorf("the apiserver refused a write of %s: %d %s: %s", name, st.Code, st.Reason, st.Message))
			return
		case out != nil:
			s.exists, s.uid, s.rv = true, string(out.GetUID()), out.GetResourceVersion()
			rv, _ := k8s.ParseRV(s.rv)
			r.saw(rv)
		}
	}
}

// compactor compacts, every CompactEvery, to the latest revision the run
// had seen one period before (the apiserver's compactor compacts to the
// revision of its previous round).
func (r *run) compactor(ctx context.Context) {
	var target, done int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.CompactEvery):
		}
		rev := target
		target = r.latest()
		if rev <= done {
			continue
		}
		r.rec.compactMu.Lock()
		call := r.rec.clock()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RequestTimeout)
		keyRev, at, err := r.cfg.Compact(cctx, rev)
		cancel()
		if err != nil {
			r.rec.compactMu.Unlock()
			r.fail(fmt.Errorf("compacting at %d: %w", rev, err))
			return
		}
		r.rec.addCompaction(compaction{rev: rev, keyRev: keyRev, at: at, call: call})
		r.rec.compactMu.Unlock()
		done = rev
	}
}

// --- readers ---

// reader lists with every semantic, whole and in pages.
func (r *run) reader(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(100+i)))
	for ctx.Err() == nil {
		pause(ctx, rng, 30*time.Millisecond)
		var o metav1.ListOptions
		rv := fmt.Sprint(r.someRevision(rng))
		switch p := rng.IntN(100); {
		case p < 25: // MostRecent
		case p < 40:
			o.ResourceVersion = "0"
		case p < 55:
			o.ResourceVersion, o.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
		case p < 70:
			o.ResourceVersion, o.ResourceVersionMatch = rv, metav1.ResourceVersionMatchNotOlderThan
		case p < 80:
			o.ResourceVersion = rv // NotOlderThan, or legacy Exact with a limit
		case p < 85:
			o.ResourceVersion, o.ResourceVersionMatch = "0", metav1.ResourceVersionMatchExact // invalid
		default:
			o.ResourceVersion, o.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
			o.Limit = 1
		}
		if o.Limit == 0 && rng.IntN(3) == 0 {
			o.Limit = int64(2 + rng.IntN(3))
		}
		r.listPages(ctx, o, rng)
	}
}

// listPages lists with o and follows the continue tokens, now and then
// giving up after the first page.
func (r *run) listPages(ctx context.Context, o metav1.ListOptions, rng *rand.Rand) {
	for page := 0; page < 20 && ctx.Err() == nil; page++ {
		list, st, inconsistent, err := r.c.list(ctx, o)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			r.fail(fmt.Errorf("a list got no answer: %w", err))
			return
		case st != nil && inconsistent != "":
			o = metav1.ListOptions{Limit: o.Limit, Continue: inconsistent}
			continue
		case st != nil:
			return
		}
		rv, _ := k8s.ParseRV(list.GetResourceVersion())
		r.saw(rv)
		if list.GetContinue() == "" || rng.IntN(6) == 0 {
			return
		}
		o = metav1.ListOptions{Limit: o.Limit, Continue: list.GetContinue()}
	}
}

// --- watchers ---

// watcher opens watch after watch.
func (r *run) watcher(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(200+i)))
	for ctx.Err() == nil {
		pause(ctx, rng, 50*time.Millisecond)
		o := metav1.ListOptions{}
		timeout := int64(2 + rng.IntN(2)) // the server ends it
		rv := fmt.Sprint(r.someRevision(rng))
		yes := true
		switch p := rng.IntN(100); {
		case p < 35: // from a resourceVersion, with bookmarks
			o.ResourceVersion, o.AllowWatchBookmarks = rv, true
		case p < 45: // from a resourceVersion, no bookmarks
			o.ResourceVersion = rv
		case p < 65: // WatchList, consistent or not older than
			o.SendInitialEvents, o.ResourceVersionMatch, o.AllowWatchBookmarks = &yes, metav1.ResourceVersionMatchNotOlderThan, true
			if rng.IntN(2) == 0 {
				o.ResourceVersion = rv
			}
		case p < 75: // "0" (defaulted to a WatchList when bookmarks are on)
			o.ResourceVersion, o.AllowWatchBookmarks = "0", rng.IntN(2) == 0
		case p < 85: // from now, no state
			no := false
			o.SendInitialEvents, o.AllowWatchBookmarks = &no, true
			if rng.IntN(2) == 0 {
				o.ResourceVersion = "0"
			}
		case p < 95: // unset
			o.AllowWatchBookmarks = rng.IntN(2) == 0
		default: // invalid: sendInitialEvents without resourceVersionMatch
			o.SendInitialEvents, o.AllowWatchBookmarks = &yes, true
		}
		o.TimeoutSeconds = &timeout
		w, _, err := r.c.watch(ctx, o, nil)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.fail(fmt.Errorf("a watch got no answer: %w", err))
			return
		}
		if w == nil {
			continue // refused: recorded
		}
		// A watch with bookmarks runs until the server ends it (the cacher
		// sends a bookmark about 2 s before the timeout); one without is
		// given up after a while.
		var stopAt <-chan time.Time
		if !o.AllowWatchBookmarks {
			stopAt = time.After(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		}
	read:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					break read
				}
				if m, err := meta.Accessor(ev.Object); err == nil && ev.Type != watch.Error {
					rv, _ := k8s.ParseRV(m.GetResourceVersion())
					r.saw(rv)
				}
			case <-stopAt:
				break read
			case <-ctx.Done():
				break read
			}
		}
		w.Stop()
	}
}
