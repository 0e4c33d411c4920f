package informer

import (
	"fmt"
	"sort"
	"sync"
)

// IndexFunc computes the values an object is indexed under (none, one or
// several).
type IndexFunc func(Object) ([]string, error)

// Indexers name index functions.
type Indexers map[string]IndexFunc

// NamespaceIndex is the name of the index [IndexByNamespace] is usually
// registered under (client-go's cache.NamespaceIndex).
const NamespaceIndex = "namespace"

// IndexByNamespace indexes an object by its namespace (client-go's
// MetaNamespaceIndexFunc).
func IndexByNamespace(o Object) ([]string, error) { return []string{o.Namespace}, nil }

// Indexer is a thread-safe store of objects by key with secondary indices
// (client-go's threadSafeMap and Indexer). It is the informer's cache.
//
// Unlike client-go, whose index functions' errors panic, an error of an
// index function is returned and leaves the store unchanged. Objects are
// shared with the callers: treat them as immutable.
type Indexer struct {
	mu       sync.RWMutex
	keyFunc  KeyFunc
	items    map[string]Object
	indexers Indexers
	// indices: index name → indexed value → keys.
	indices map[string]map[string]map[string]struct{}
}

// NewIndexer returns an empty indexer; keyFunc defaults to
// [MetaNamespaceKey].
func NewIndexer(keyFunc KeyFunc, indexers Indexers) *Indexer {
	if keyFunc == nil {
		keyFunc = MetaNamespaceKey
	}
	ix := &Indexer{keyFunc: keyFunc, items: map[string]Object{}, indexers: Indexers{}, indices: map[string]map[string]map[string]struct{}{}}
	for name, f := range indexers {
		ix.indexers[name] = f
		ix.indices[name] = map[string]map[string]struct{}{}
	}
	return ix
}

// indexValues computes every index's values of obj.
func (ix *Indexer) indexValues(obj Object) (map[string][]string, error) {
	out := make(map[string][]string, len(ix.indexers))
	for name, f := range ix.indexers {
		vs, err := f(obj)
		if err != nil {
			return nil, fmt.Errorf("informer: index %q of %q: %w", name, obj.Key, err)
		}
		out[name] = vs
	}
	return out, nil
}

func (ix *Indexer) unindexLocked(key string, old map[string][]string) {
	for name, vs := range old {
		idx := ix.indices[name]
		for _, v := range vs {
			if set := idx[v]; set != nil {
				delete(set, key)
				if len(set) == 0 {
					delete(idx, v) // no empty sets (kubernetes#84959)
				}
			}
		}
	}
}

func (ix *Indexer) indexLocked(key string, vals map[string][]string) {
	for name, vs := range vals {
		idx := ix.indices[name]
		for _, v := range vs {
			set := idx[v]
			if set == nil {
				set = map[string]struct{}{}
				idx[v] = set
			}
			set[key] = struct{}{}
		}
	}
}

// Add stores obj (replacing the object with its key).
func (ix *Indexer) Add(obj Object) error { return ix.Update(obj) }

// Update stores obj (replacing the object with its key).
func (ix *Indexer) Update(obj Object) error {
	key, err := ix.keyFunc(obj)
	if err != nil {
		return fmt.Errorf("informer: no key for %q: %w", obj.Key, err)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	vals, err := ix.indexValues(obj)
	if err != nil {
		return err
	}
	if old, ok := ix.items[key]; ok {
		oldVals, err := ix.indexValues(old)
		if err == nil {
			ix.unindexLocked(key, oldVals)
		} else {
			ix.unindexAllLocked(key)
		}
	}
	ix.items[key] = obj
	ix.indexLocked(key, vals)
	return nil
}

// unindexAllLocked removes key from every index (when its old values
// cannot be computed again).
func (ix *Indexer) unindexAllLocked(key string) {
	for _, idx := range ix.indices {
		for v, set := range idx {
			delete(set, key)
			if len(set) == 0 {
				delete(idx, v)
			}
		}
	}
}

// Delete removes the object with obj's key.
func (ix *Indexer) Delete(obj Object) error {
	key, err := ix.keyFunc(obj)
	if err != nil {
		return fmt.Errorf("informer: no key for %q: %w", obj.Key, err)
	}
	ix.DeleteByKey(key)
	return nil
}

// DeleteByKey removes the object with key.
func (ix *Indexer) DeleteByKey(key string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old, ok := ix.items[key]
	if !ok {
		return
	}
	if vals, err := ix.indexValues(old); err == nil {
		ix.unindexLocked(key, vals)
	} else {
		ix.unindexAllLocked(key)
	}
	delete(ix.items, key)
}

// Get returns the stored object with obj's key.
func (ix *Indexer) Get(obj Object) (Object, bool) {
	key, err := ix.keyFunc(obj)
	if err != nil {
		return Object{}, false
	}
	return ix.GetByKey(key)
}

// GetByKey returns the stored object with key.
func (ix *Indexer) GetByKey(key string) (Object, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	o, ok := ix.items[key]
	return o, ok
}

// List returns every stored object, sorted by key.
func (ix *Indexer) List() []Object {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]Object, 0, len(ix.items))
	for _, o := range ix.items {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ListKeys returns every key, sorted.
func (ix *Indexer) ListKeys() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.items))
	for k := range ix.items {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Replace swaps the whole content for list and rebuilds the indices; on an
// index function's error the content is left unchanged.
func (ix *Indexer) Replace(list []Object, _ string) error {
	items := make(map[string]Object, len(list))
	for _, o := range list {
		key, err := ix.keyFunc(o)
		if err != nil {
			return fmt.Errorf("informer: no key for %q: %w", o.Key, err)
		}
		items[key] = o
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	vals := make(map[string]map[string][]string, len(items))
	for key, o := range items {
		v, err := ix.indexValues(o)
		if err != nil {
			return err
		}
		vals[key] = v
	}
	ix.items = items
	for name := range ix.indices {
		ix.indices[name] = map[string]map[string]struct{}{}
	}
	for key, v := range vals {
		ix.indexLocked(key, v)
	}
	return nil
}

// Resync does nothing: an Indexer has nothing to resync.
func (ix *Indexer) Resync() error { return nil }

// ByIndex returns the objects indexed under value by index name, sorted by
// key.
func (ix *Indexer) ByIndex(name, value string) ([]Object, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	idx, ok := ix.indices[name]
	if !ok {
		return nil, fmt.Errorf("informer: index %q does not exist", name)
	}
	out := make([]Object, 0, len(idx[value]))
	for key := range idx[value] {
		out = append(out, ix.items[key])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// IndexKeys returns the keys indexed under value by index name, sorted.
func (ix *Indexer) IndexKeys(name, value string) ([]string, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	idx, ok := ix.indices[name]
	if !ok {
		return nil, fmt.Errorf("informer: index %q does not exist", name)
	}
	out := make([]string, 0, len(idx[value]))
	for key := range idx[value] {
		out = append(out, key)
	}
	sort.Strings(out)
	return out, nil
}

// Index returns the objects that share a value of index name with obj.
func (ix *Indexer) Index(name string, obj Object) ([]Object, error) {
	ix.mu.RLock()
	f, ok := ix.indexers[name]
	ix.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("informer: index %q does not exist", name)
	}
	vs, err := f(obj)
	if err != nil {
		return nil, fmt.Errorf("informer: index %q of %q: %w", name, obj.Key, err)
	}
	seen := map[string]bool{}
	var out []Object
	for _, v := range vs {
		objs, _ := ix.ByIndex(name, v)
		for _, o := range objs {
			if !seen[o.Key] {
				seen[o.Key] = true
				out = append(out, o)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ListIndexFuncValues returns the values index name holds, sorted.
func (ix *Indexer) ListIndexFuncValues(name string) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]string, 0, len(ix.indices[name]))
	for v := range ix.indices[name] {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// AddIndexers adds index functions and indexes the stored objects with
// them. A name already in use, or an index function's error, is returned
// and nothing is added.
func (ix *Indexer) AddIndexers(indexers Indexers) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for name := range indexers {
		if _, ok := ix.indexers[name]; ok {
			return fmt.Errorf("informer: index %q already exists", name)
		}
	}
	built := map[string]map[string]map[string]struct{}{}
	for name, f := range indexers {
		idx := map[string]map[string]struct{}{}
		for key, o := range ix.items {
			vs, err := f(o)
			if err != nil {
				return fmt.Errorf("informer: index %q of %q: %w", name, o.Key, err)
			}
			for _, v := range vs {
				if idx[v] == nil {
					idx[v] = map[string]struct{}{}
				}
				idx[v][key] = struct{}{}
			}
		}
		built[name] = idx
	}
	for name, f := range indexers {
		ix.indexers[name] = f
		ix.indices[name] = built[name]
	}
	return nil
}
