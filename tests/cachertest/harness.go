// Package cachertest holds the Kubernetes apiserver's watch cache to the
// Kubernetes list/watch rules of docs/SPEC.md §4. It runs the real cacher
// (k8s.io/apiserver/pkg/storage/cacher, v0.37.2) behind its CacheDelegator —
// the storage.Interface every apiserver registry uses — over the real etcd3
// storage (k8s.io/apiserver/pkg/storage/etcd3) and a real embedded etcd
// 3.7.3 (internal/etcdtest), with the apiserver's own test type
// (example.Pod of k8s.io/apiserver/pkg/apis/example) as its storage tests do.
//
// Requests are shaped as the apiserver's REST layer shapes them: list and
// watch options are defaulted and validated as in
// endpoints/handlers/get.go (SetListOptionsDefaults, ValidateListOptions,
// 422 Invalid), and turned into storage options as the generic registry's
// Store.ListPredicate and WatchPredicate do. What clients saw — every list,
// watch and watch event — is recorded as a k8s.Run (the options as the client
// sent them, before defaulting); the committed history is recorded by an etcd
// watch of the whole keyspace from revision 1. [Recorder.Trace] writes both
// as a trace that linearizability.Check (watchspec check) holds to §4.
//
// It is a checker-side helper: it imports the model.
package cachertest

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/utils/clock"

	"github.com/watchspec/watchspec/internal/etcdtest"
	"github.com/watchspec/watchspec/model/k8s"
)

// APIServerVersion is the version of k8s.io/apiserver the harness runs.
const APIServerVersion = "0.37.2"

const (
	// pathPrefix is the etcd3 storage's path prefix (the apiserver's
	// default, --etcd-prefix=/registry).
	pathPrefix = "/registry"
	// resourcePrefix is the resource's prefix in the storage.Interface.
	resourcePrefix = "/example.apiserver.k8s.io/pods/"
)

// GVR is the resource the harness serves; its objects are stored under
// GVR.Prefix(namespace) (/registry/example.apiserver.k8s.io/pods/…).
var GVR = k8s.GVR{Group: "example.apiserver.k8s.io", Version: "v1", Resource: "pods"}

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
	// codec stores example.Pod as JSON of example.apiserver.k8s.io/v1, as
	// the cacher's tests configure their Cacher.
	codec runtime.Codec
)

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))
	codec = codecs.LegacyCodec(examplev1.SchemeGroupVersion)
}

var groupResource = schema.GroupResource{Group: GVR.Group, Resource: GVR.Resource}

func newPod() runtime.Object     { return &example.Pod{} }
func newPodList() runtime.Object { return &example.PodList{} }

// Harness is an embedded etcd, the apiserver's etcd3 storage over it, and,
// once [Harness.StartCacher] ran, the watch cache in front of it.
type Harness struct {
	Etcd *etcdtest.Cluster
	// Rec records the history, the writes and what clients saw.
	Rec *Recorder

	client    *clientv3.Client // raw: the history watch, revision probes, compaction
	kc        *kubernetes.Client
	compactor interface{ Stop() }
	etcd3     storage.Interface
	closeEtcd func()
	// With Options.LaggingCache: the cacher's own etcd3 storage, whose
	// connection to etcd goes through proxy.
	cacheStore storage.Interface
	cacheKC    *kubernetes.Client
	proxy      *pauseProxy

	mu         sync.Mutex
	cacher     *cacher.Cacher
	delegator  *cacher.CacheDelegator
	firstPages map[string]int // continue token → the list of its first page
}

// Options shape a harness.
type Options struct {
	// LaggingCache gives the watch cache an etcd connection of its own,
	// through a proxy that [Harness.PauseCache] holds back: the cache then
	// lags etcd as the cache of an apiserver cut off from etcd does (the
	// situation of kubernetes#59848), while writes and the storage go on.
	LaggingCache bool
}

// Start starts etcd, the history recorder and the etcd3 storage.
func Start(ctx context.Context) (*Harness, error) { return StartWith(ctx, Options{}) }

// StartWith is [Start] with options.
func StartWith(ctx context.Context, o Options) (*Harness, error) {
	cl, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		return nil, err
	}
	h := &Harness{Etcd: cl}
	ok := false
	defer func() {
		if !ok {
			h.Close()
		}
	}()
	cfg := clientv3.Config{Endpoints: cl.Endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
	if h.client, err = clientv3.New(cfg); err != nil {
		return nil, err
	}
	if h.Rec, err = newRecorder(ctx, h.client); err != nil {
		return nil, err
	}
	if h.kc, err = kubernetes.New(cfg); err != nil {
		return nil, err
	}
	// No periodic compaction (interval 0): the workload compacts through
	// the same protocol ([Harness.Compact]); the compactor still watches
	// compact_rev_key, which is how the storage (and, through it, the
	// cacher) learns of compactions.
	comp := etcd3.NewCompactor(h.kc.Client, 0, clock.RealClock{}, nil)
	h.compactor = comp
	versioner := storage.APIObjectVersioner{}
	st, err := etcd3.New(h.kc, comp, codec, newPod, newPodList, pathPrefix, resourcePrefix, groupResource,
		identity.NewEncryptCheckTransformer(), etcd3.NewDefaultLeaseManagerConfig(), etcd3.NewDefaultDecoder(codec, versioner), versioner)
	if err != nil {
		return nil, err
	}
	h.etcd3 = st
	h.closeEtcd = st.Close
	if o.LaggingCache {
		if h.proxy, err = newPauseProxy(cl.Endpoints[0]); err != nil {
			return nil, err
		}
		pcfg := cfg
		pcfg.Endpoints = []string{h.proxy.addr()}
		if h.cacheKC, err = kubernetes.New(pcfg); err != nil {
			return nil, err
		}
		cs, err := etcd3.New(h.cacheKC, comp, codec, newPod, newPodList, pathPrefix, resourcePrefix, groupResource,
			identity.NewEncryptCheckTransformer(), etcd3.NewDefaultLeaseManagerConfig(), etcd3.NewDefaultDecoder(codec, versioner), versioner)
		if err != nil {
			return nil, err
		}
		h.cacheStore = cs
	}
	ok = true
	return h, nil
}

// PauseCache holds back what etcd sends the watch cache (a harness
// started with LaggingCache), until [Harness.ResumeCache].
func (h *Harness) PauseCache() { h.proxy.pause() }

// ResumeCache lets the watch cache catch up.
func (h *Harness) ResumeCache() { h.proxy.resume() }

// StartCacher creates the watch cache over the etcd3 storage, as the
// generic registry's StorageWithCacher does, and waits until it is ready.
// From then on every write, list and watch goes through its CacheDelegator.
func (h *Harness) StartCacher(ctx context.Context) error {
	cacheStore := h.etcd3
	if h.cacheStore != nil {
		cacheStore = h.cacheStore
	}
	c, err := cacher.NewCacherFromConfig(cacher.Config{
		Storage:             cacheStore,
		Versioner:           storage.APIObjectVersioner{},
		GroupResource:       groupResource,
		EventsHistoryWindow: cacher.DefaultEventFreshDuration,
		ResourcePrefix:      resourcePrefix,
		KeyFunc:             func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(resourcePrefix, obj) },
		GetAttrsFunc:        storage.DefaultNamespaceScopedAttr,
		NewFunc:             newPod,
		NewListFunc:         newPodList,
		Codec:               codec,
	})
	if err != nil {
		return err
	}
	if err := c.Wait(ctx); err != nil {
		c.Stop()
		return fmt.Errorf("the watch cache did not become ready: %w", err)
	}
	h.mu.Lock()
	h.cacher, h.delegator = c, cacher.NewCacheDelegator(c, h.etcd3)
	h.mu.Unlock()
	return nil
}

// storage returns the storage.Interface the API server would call: the
// CacheDelegator once the cacher runs, the etcd3 storage before.
func (h *Harness) storage() storage.Interface {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.delegator != nil {
		return h.delegator
	}
	return h.etcd3
}

// CacherCompactRevision returns the compaction revision the watch cache
// has applied to its snapshots (its compactor polls the storage's every
// 15 s), or −1 when the cacher is not running.
func (h *Harness) CacherCompactRevision() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.delegator == nil {
		return -1
	}
	return h.delegator.CompactRevision()
}

// Close stops everything Start and StartCacher started.
func (h *Harness) Close() {
	h.mu.Lock()
	d, c := h.delegator, h.cacher
	h.delegator, h.cacher = nil, nil
	h.mu.Unlock()
	if d != nil {
		d.Stop()
	}
	if c != nil {
		c.Stop()
	}
	if h.closeEtcd != nil {
		h.closeEtcd()
	}
	if h.cacheStore != nil {
		if c, ok := h.cacheStore.(interface{ Close() }); ok {
			c.Close()
		}
	}
	if h.proxy != nil {
		h.proxy.close()
	}
	if h.cacheKC != nil {
		h.cacheKC.Close()
	}
	if h.compactor != nil {
		h.compactor.Stop()
	}
	if h.kc != nil {
		h.kc.Close()
	}
	if h.Rec != nil {
		h.Rec.stop()
	}
	if h.client != nil {
		h.client.Close()
	}
	if h.Etcd != nil {
		h.Etcd.Close()
	}
}

// Head returns etcd's current revision (a linearizable read).
func (h *Harness) Head(ctx context.Context) (int64, error) {
	resp, err := h.client.Get(ctx, "compact_rev_key", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// --- Writes: through the storage.Interface, as the registry writes. ---

func storageKey(ns, name string) string { return resourcePrefix + ns + "/" + name }

// Create creates the pod ns/name and returns its resourceVersion.
func (h *Harness) Create(ctx context.Context, ns, name string) (int64, error) {
	value, uid := h.Rec.nextValue()
	pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Spec: example.PodSpec{NodeName: value}}
	out := &example.Pod{}
	call := h.Rec.clock()
	if err := h.storage().Create(ctx, storageKey(ns, name), pod, out, 0); err != nil {
		return 0, err
	}
	return h.wrote(out.ResourceVersion, call)
}

// wrote records the times of the write that returned resourceVersion rv.
func (h *Harness) wrote(rv string, call int64) (int64, error) {
	rev, err := parseRV(rv)
	if err == nil {
		h.Rec.noteWrite(rev, call)
	}
	return rev, err
}

// Update changes the pod ns/name (a new value) and returns its resourceVersion.
func (h *Harness) Update(ctx context.Context, ns, name string) (int64, error) {
	value, _ := h.Rec.nextValue()
	out := &example.Pod{}
	call := h.Rec.clock()
	err := h.storage().GuaranteedUpdate(ctx, storageKey(ns, name), out, false, nil,
		func(in runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			p := in.(*example.Pod).DeepCopy()
			p.Spec.NodeName = value
			return p, nil, nil
		}, nil)
	if err != nil {
		return 0, err
	}
	return h.wrote(out.ResourceVersion, call)
}

// Delete deletes the pod ns/name and returns the revision of the deletion.
func (h *Harness) Delete(ctx context.Context, ns, name string) (int64, error) {
	out := &example.Pod{}
	call := h.Rec.clock()
	if err := h.storage().Delete(ctx, storageKey(ns, name), out, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		return 0, err
	}
	// The returned object carries the deletion's revision.
	return h.wrote(out.ResourceVersion, call)
}

// Compact compacts etcd at rev through the apiserver's compaction protocol
// (etcd3.Compact: a compare-and-swap of compact_rev_key, then the
// compaction), which is how the storage learns the compaction revision. It
// must not run concurrently with other writes (the harness places the
// compaction in the history at the revision of the compact_rev_key write).
func (h *Harness) Compact(ctx context.Context, rev int64) error {
	h.Rec.compactMu.Lock()
	defer h.Rec.compactMu.Unlock()
	call := h.Rec.clock()
	// The history watch must not be overtaken by the compaction.
	before, err := h.Head(ctx)
	if err != nil {
		return err
	}
	if err := h.Rec.waitHistory(ctx, before); err != nil {
		return err
	}
	version := h.Rec.compactVersion
	newVersion, cur, compacted, err := etcd3.Compact(ctx, h.client, version, rev)
	if err != nil {
		return err
	}
	if compacted != rev || newVersion != version+1 {
		return fmt.Errorf("etcd3.Compact(%d, %d) compacted at %d (compact_rev_key version %d)", version, rev, compacted, newVersion)
	}
	head, err := h.Head(ctx)
	if err != nil {
		return err
	}
	if head != cur {
		return fmt.Errorf("a write ran concurrently with the compaction (revision %d after compact_rev_key's %d)", head, cur)
	}
	h.Rec.compactVersion = newVersion
	h.Rec.noteCompaction(rev, cur, call)
	return nil
}

func parseRV(s string) (int64, error) {
	n, ok := k8s.ParseRV(s)
	if !ok || n == 0 {
		return 0, fmt.Errorf("resourceVersion %q is not a revision", s)
	}
	return n, nil
}

// everything is the selection predicate of an unfiltered request.
func everything() storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: labels.Everything(), Field: fields.Everything(), GetAttrs: storage.DefaultNamespaceScopedAttr}
}
