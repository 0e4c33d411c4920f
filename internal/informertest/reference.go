package informertest

import (
	"context"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/model/k8s"
)

// Reference is watchspec's SharedInformer (impl/informer) as a Subject.
type Reference struct {
	// Setup, if set, is called on every new informer before it runs, with
	// the gate of the "processing paused" fault: impl/informer's own tests
	// install their test hooks (export_test.go) there.
	Setup func(s *informer.SharedInformer, processing *Gate)
}

// New implements Subject.
func (r Reference) New(lw informer.ListerWatcher, cfg Config) Informer {
	s := informer.NewSharedInformer(lw, informer.Options{
		ResyncPeriod: cfg.ResyncPeriod, DisableWatchList: !cfg.WatchList, PageSize: cfg.PageSize, OnResync: cfg.OnResync,
		Indexers: informer.Indexers{informer.NamespaceIndex: informer.IndexByNamespace},
	})
	return &refInformer{s: s, setup: r.Setup}
}

type refInformer struct {
	s     *informer.SharedInformer
	setup func(*informer.SharedInformer, *Gate)
	gate  *Gate
}

func (r *refInformer) PauseProcessing(g *Gate) { r.gate = g }

func (r *refInformer) AddHandler(sink *Sink) (Registration, error) {
	if sink.Resync != nil {
		return r.s.AddEventHandlerWithResyncPeriod(refHandler{sink}, *sink.Resync)
	}
	return r.s.AddEventHandler(refHandler{sink})
}

func (r *refInformer) Run(ctx context.Context) {
	if r.setup != nil {
		r.setup(r.s, r.gate)
	}
	r.s.Run(ctx)
}

func (r *refInformer) HasSynced() bool                 { return r.s.HasSynced() }
func (r *refInformer) LastSyncResourceVersion() string { return r.s.LastSyncResourceVersion() }

func (r *refInformer) Cache() []k8s.Object {
	var out []k8s.Object
	for _, o := range r.s.Indexer().List() {
		out = append(out, Object(o))
	}
	return out
}

type refHandler struct{ sink *Sink }

func ptr(o informer.Object) *k8s.Object {
	x := Object(o)
	return &x
}

func (h refHandler) OnAdd(o informer.Object, initial bool) {
	h.sink.Handle(k8s.Notification{Type: k8s.OnAdd, New: ptr(o), InInitialList: initial})
}

func (h refHandler) OnUpdate(old, new informer.Object) {
	h.sink.Handle(k8s.Notification{Type: k8s.OnUpdate, Old: ptr(old), New: ptr(new)})
}

func (h refHandler) OnDelete(o informer.Object, unknown bool) {
	h.sink.Handle(k8s.Notification{Type: k8s.OnDelete, Old: ptr(o), Tombstone: unknown})
}
