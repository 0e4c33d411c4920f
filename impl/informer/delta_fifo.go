package informer

import (
	"errors"
	"fmt"
	"sync"
)

// DeltaType is the kind of change a [Delta] records.
type DeltaType string

// The delta types (client-go tools/cache/delta_fifo.go).
const (
	DeltaAdded   DeltaType = "Added"
	DeltaUpdated DeltaType = "Updated"
	// DeltaDeleted: the object is gone. With FinalStateUnknown the deletion
	// was not seen but inferred by a relist, and Object is the last state
	// known (client-go's DeletedFinalStateUnknown).
	DeltaDeleted DeltaType = "Deleted"
	// DeltaReplaced: the object was listed by a relist (client-go emits it with
	// EmitDeltaTypeReplaced, which informers set: kubernetes#86015).
	DeltaReplaced DeltaType = "Replaced"
	// DeltaSync: a periodic resync of an object already known.
	DeltaSync DeltaType = "Sync"
)

// Delta is one change of one object.
type Delta struct {
	Type   DeltaType
	Object Object
	// FinalStateUnknown marks a Deleted delta that a relist inferred
	// (client-go's DeletedFinalStateUnknown tombstone).
	FinalStateUnknown bool
}

// Deltas are the changes of one object, oldest first.
type Deltas []Delta

// Newest returns the most recent delta, or nil.
func (d Deltas) Newest() *Delta {
	if len(d) == 0 {
		return nil
	}
	return &d[len(d)-1]
}

// KeyListerGetter is what a DeltaFIFO knows of the objects already
// delivered: the informer's Indexer.
type KeyListerGetter interface {
	ListKeys() []string
	GetByKey(key string) (Object, bool)
}

// ErrFIFOClosed is returned by Pop once the queue is closed.
var ErrFIFOClosed = errors.New("informer: DeltaFIFO: manipulating with closed queue")

// DeltaFIFO is client-go's DeltaFIFO (tools/cache/delta_fifo.go): a queue
// of keys, each with the deltas of its object not yet processed. It is the
// Reflector's store; one consumer pops whole Deltas.
//
// The contract, mirrored from client-go:
//
//   - Per key, deltas are kept in arrival order and handed out together, in
//     order; a key keeps its first position in the queue while it waits
//     (client-go's TestDeltaFIFO_detectLineJumpers). No order is kept across
//     keys (kubernetes#77636).
//   - The only compression: when the last two deltas of a key are both
//     deletions they merge into one, the one carrying more information (a
//     tombstone loses to an observed deletion).
//   - Replace (a relist) queues Replaced for every listed object, then a
//     tombstone deletion (FinalStateUnknown) for every key not listed that
//     is in the queue — with its newest queued object: kubernetes#115620,
//     the fix for #115658, where an object created and deleted while the
//     informer was disconnected, its ADDED still queued, leaked forever — or
//     in knownObjects with nothing queued. It always queues Replaced for a
//     listed key, even one whose last delta is a deletion (kubernetes#83810,
//     fixed by #83911).
//   - Resync queues Sync for every known key with nothing queued: a queued
//     delta is newer than the known object, and a Sync would bring the
//     stale one back (client-go's TestDeltaFIFO_UpdateResyncRace).
//   - Pop hands a key's deltas to process while holding the queue's lock,
//     so that the consumer's store is updated atomically with respect to
//     Replace and Resync, which read it. There is no requeue: client-go
//     removed ErrRequeue and AddIfNotPresent (kubernetes#129568), as putting
//     older deltas back would move the informer back in time.
//   - HasSynced: the first Replace happened (or any Add, Update or Delete
//     before it) and every delta it queued has been popped.
type DeltaFIFO struct {
	mu    sync.Mutex
	cond  *sync.Cond
	items map[string]Deltas
	queue []string

	keyFunc      KeyFunc
	knownObjects KeyListerGetter

	populated bool
	// initialPopulationCount is the number of keys the first Replace queued
	// that are not popped yet.
	initialPopulationCount int
	closed                 bool

	// Deliberately broken behaviours for mutation tests, set only through
	// export_test.go; see testHooks.
	noTombstones bool
	reversePop   bool
}

// NewDeltaFIFO returns an empty queue. knownObjects (may be nil) is the
// consumer's store, which deletion detection and Resync consult; keyFunc
// defaults to [MetaNamespaceKey].
func NewDeltaFIFO(keyFunc KeyFunc, knownObjects KeyListerGetter) *DeltaFIFO {
	if keyFunc == nil {
		keyFunc = MetaNamespaceKey
	}
	f := &DeltaFIFO{items: map[string]Deltas{}, keyFunc: keyFunc, knownObjects: knownObjects}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *DeltaFIFO) keyOf(d Delta) (string, error) {
	k, err := f.keyFunc(d.Object)
	if err != nil {
		return "", fmt.Errorf("informer: DeltaFIFO: no key for %q: %w", d.Object.Key, err)
	}
	return k, nil
}

// Add queues an Added delta.
func (f *DeltaFIFO) Add(obj Object) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.populated = true
	return f.queueLocked(Delta{Type: DeltaAdded, Object: obj})
}

// Update queues an Updated delta.
func (f *DeltaFIFO) Update(obj Object) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.populated = true
	return f.queueLocked(Delta{Type: DeltaUpdated, Object: obj})
}

// Delete queues a Deleted delta, unless the key is unknown: neither queued
// nor in knownObjects ("presumably, this was deleted when a relist
// happened").
func (f *DeltaFIFO) Delete(obj Object) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.populated = true
	d := Delta{Type: DeltaDeleted, Object: obj}
	key, err := f.keyOf(d)
	if err != nil {
		return err
	}
	_, queued := f.items[key]
	known := false
	if f.knownObjects != nil {
		_, known = f.knownObjects.GetByKey(key)
	}
	if !queued && !known {
		return nil
	}
	return f.queueLocked(d)
}

func (f *DeltaFIFO) queueLocked(d Delta) error {
	key, err := f.keyOf(d)
	if err != nil {
		return err
	}
	return f.queueKeyLocked(key, d)
}

func (f *DeltaFIFO) queueKeyLocked(key string, d Delta) error {
	old, queued := f.items[key]
	f.items[key] = dedupDeltas(append(old, d))
	if !queued {
		f.queue = append(f.queue, key)
	}
	f.cond.Broadcast()
	return nil
}

// dedupDeltas merges the last two deltas when both are deletions, keeping
// the one with more information: an observed deletion over a tombstone.
func dedupDeltas(ds Deltas) Deltas {
	n := len(ds)
	if n < 2 {
		return ds
	}
	a, b := ds[n-2], ds[n-1]
	if a.Type != DeltaDeleted || b.Type != DeltaDeleted {
		return ds
	}
	if b.FinalStateUnknown {
		return ds[:n-1]
	}
	ds[n-2] = b
	return ds[:n-1]
}

// Replace is a relist: see the type's documentation. The revision is not
// used (as in client-go).
func (f *DeltaFIFO) Replace(list []Object, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make(map[string]bool, len(list))
	for _, o := range list {
		d := Delta{Type: DeltaReplaced, Object: o}
		key, err := f.keyOf(d)
		if err != nil {
			return err
		}
		keys[key] = true
		if err := f.queueKeyLocked(key, d); err != nil {
			return err
		}
	}
	queuedDeletions := 0
	if !f.noTombstones {
		// Keys queued but not listed: deleted while disconnected, perhaps
		// before their addition was even processed (kubernetes#115620).
		for key, ds := range f.items {
			if keys[key] {
				continue
			}
			last := ds.Newest().Object // the tombstone of a tombstone carries its object
			queuedDeletions++
			f.queueKeyLocked(key, Delta{Type: DeltaDeleted, Object: last, FinalStateUnknown: true})
		}
		// Keys known but not listed and not queued.
		if f.knownObjects != nil {
			for _, key := range f.knownObjects.ListKeys() {
				if keys[key] || len(f.items[key]) > 0 {
					continue
				}
				obj, ok := f.knownObjects.GetByKey(key)
				if !ok {
					continue // deleted meanwhile: nothing to tell
				}
				queuedDeletions++
				f.queueKeyLocked(key, Delta{Type: DeltaDeleted, Object: obj, FinalStateUnknown: true})
			}
		}
	}
	if !f.populated {
		f.populated = true
		f.initialPopulationCount = len(keys) + queuedDeletions
	}
	return nil
}

// Resync queues a Sync delta for every known key with nothing queued.
func (f *DeltaFIFO) Resync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.knownObjects == nil {
		return nil
	}
	for _, key := range f.knownObjects.ListKeys() {
		if len(f.items[key]) > 0 {
			continue
		}
		obj, ok := f.knownObjects.GetByKey(key)
		if !ok {
			continue
		}
		f.queueKeyLocked(key, Delta{Type: DeltaSync, Object: obj})
	}
	return nil
}

// Pop waits for a key, removes it with its deltas and calls process with
// them, and whether they belong to the first Replace's batch, while holding
// the queue's lock. It returns the deltas and process's error, or
// ErrFIFOClosed once the queue is closed.
func (f *DeltaFIFO) Pop(process func(d Deltas, isInInitialList bool) error) (Deltas, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.queue) == 0 {
		if f.closed {
			return nil, ErrFIFOClosed
		}
		f.cond.Wait()
	}
	if f.closed {
		return nil, ErrFIFOClosed
	}
	isInInitialList := !f.hasSyncedLocked()
	key := f.queue[0]
	f.queue[0] = ""
	f.queue = f.queue[1:]
	if f.initialPopulationCount > 0 {
		f.initialPopulationCount--
	}
	ds := f.items[key]
	delete(f.items, key)
	if f.reversePop {
		for i, j := 0, len(ds)-1; i < j; i, j = i+1, j-1 {
			ds[i], ds[j] = ds[j], ds[i]
		}
	}
	return ds, process(ds, isInInitialList)
}

// waitForItem waits until something is queued or the queue is closed (for
// the test hook that pauses the consumer: it must find the queue non-empty).
func (f *DeltaFIFO) waitForItem() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.queue) == 0 && !f.closed {
		f.cond.Wait()
	}
}

// Close makes Pop return ErrFIFOClosed.
func (f *DeltaFIFO) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cond.Broadcast()
}

// HasSynced reports whether the first Replace's deltas have all been
// popped (or an Add, Update or Delete came first).
func (f *DeltaFIFO) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hasSyncedLocked()
}

func (f *DeltaFIFO) hasSyncedLocked() bool { return f.populated && f.initialPopulationCount == 0 }

// ListKeys returns the queued keys, in queue order.
func (f *DeltaFIFO) ListKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queue...)
}

// Len returns the number of queued keys.
func (f *DeltaFIFO) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}
