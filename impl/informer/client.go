package informer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/watchspec/watchspec/impl/mvcc"
	"github.com/watchspec/watchspec/impl/store"
)

// Client reads and writes the objects of one resource in the reference
// store, as the API server's storage layer does: a create fails if the
// name exists, an update or a delete that names a resourceVersion fails if
// the object changed since (optimistic concurrency, 409 Conflict). It is
// the raw shape under [TypedClient] and [DynamicClient]; all are safe for
// concurrent use.
type Client struct {
	st  *store.Store
	gvr GVR
}

// NewClient returns a client of resource gvr in st.
func NewClient(st *store.Store, gvr GVR) *Client { return &Client{st: st, gvr: gvr} }

// GVR returns the client's resource.
func (c *Client) GVR() GVR { return c.gvr }

// ListWatch returns a ListWatch of the resource's objects in namespace (""
// for all), for an informer.
func (c *Client) ListWatch(namespace string, opts StoreOptions) *StoreListWatch {
	return NewStoreListWatch(c.st, c.gvr, namespace, opts)
}

func (c *Client) object(kv store.KeyValue) Object { return objectAt(c.gvr.Prefix(""), kv) }

// Get returns the object namespace/name (404 if absent).
func (c *Client) Get(ctx context.Context, namespace, name string) (Object, error) {
	key := c.gvr.Key(namespace, name)
	resp, err := c.st.Range(ctx, store.RangeRequest{Key: key})
	if err != nil {
		return Object{}, err
	}
	if len(resp.KVs) == 0 {
		return Object{}, statusf(CodeNotFound, ReasonNotFound, "%s %q not found", c.gvr.Resource, namespace+"/"+name)
	}
	return c.object(resp.KVs[0]), nil
}

// Create stores a new object (409 AlreadyExists if the name is taken).
func (c *Client) Create(ctx context.Context, namespace, name, value string) (Object, error) {
	key := c.gvr.Key(namespace, name)
	resp, err := c.st.Txn(ctx, store.TxnRequest{
		Compare: []store.Compare{{Key: key, Target: mvcc.TargetCreateRevision, Result: mvcc.CompareEqual, Number: 0}},
		Success: []store.Op{{Put: &store.PutRequest{Key: key, Value: value}}},
	})
	if err != nil {
		return Object{}, err
	}
	if !resp.Succeeded {
		return Object{}, statusf(CodeConflict, ReasonAlreadyExists, "%s %q already exists", c.gvr.Resource, namespace+"/"+name)
	}
	return Object{Key: key, Namespace: namespace, Name: name, Value: value, ResourceVersion: resp.Revision, UID: resp.Revision}, nil
}

// Update writes obj's Value. With obj.ResourceVersion set, only if the
// object is still at that resourceVersion (409 Conflict otherwise); it must
// exist (404).
func (c *Client) Update(ctx context.Context, obj Object) (Object, error) {
	key := c.gvr.Key(obj.Namespace, obj.Name)
	cmp := store.Compare{Key: key, Target: mvcc.TargetCreateRevision, Result: mvcc.CompareGreater, Number: 0}
	if obj.ResourceVersion != 0 {
		cmp = store.Compare{Key: key, Target: mvcc.TargetModRevision, Result: mvcc.CompareEqual, Number: obj.ResourceVersion}
	}
	resp, err := c.st.Txn(ctx, store.TxnRequest{
		Compare: []store.Compare{cmp},
		Success: []store.Op{{Put: &store.PutRequest{Key: key, Value: obj.Value, PrevKV: true}}},
		Failure: []store.Op{{Range: &store.RangeRequest{Key: key}}},
	})
	if err != nil {
		return Object{}, err
	}
	if !resp.Succeeded {
		if r := resp.Responses[0].Range; r == nil || len(r.KVs) == 0 {
			return Object{}, statusf(CodeNotFound, ReasonNotFound, "%s %q not found", c.gvr.Resource, obj.Namespace+"/"+obj.Name)
		}
		return Object{}, statusf(CodeConflict, ReasonConflict, "the object %q has been modified; please apply your changes to the latest version and try again", obj.Namespace+"/"+obj.Name)
	}
	out := Object{Key: key, Namespace: obj.Namespace, Name: obj.Name, Value: obj.Value, ResourceVersion: resp.Revision, UID: resp.Revision}
	if p := resp.Responses[0].Put.PrevKV; p != nil {
		out.UID = p.CreateRevision
	}
	return out, nil
}

// Delete removes namespace/name; with resourceVersion ≠ 0 only if the
// object is still at it (409). It answers 404 if absent.
func (c *Client) Delete(ctx context.Context, namespace, name string, resourceVersion int64) error {
	key := c.gvr.Key(namespace, name)
	cmp := store.Compare{Key: key, Target: mvcc.TargetCreateRevision, Result: mvcc.CompareGreater, Number: 0}
	if resourceVersion != 0 {
		cmp = store.Compare{Key: key, Target: mvcc.TargetModRevision, Result: mvcc.CompareEqual, Number: resourceVersion}
	}
	resp, err := c.st.Txn(ctx, store.TxnRequest{
		Compare: []store.Compare{cmp},
		Success: []store.Op{{Delete: &store.DeleteRequest{Key: key}}},
		Failure: []store.Op{{Range: &store.RangeRequest{Key: key}}},
	})
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		if r := resp.Responses[0].Range; r == nil || len(r.KVs) == 0 {
			return statusf(CodeNotFound, ReasonNotFound, "%s %q not found", c.gvr.Resource, namespace+"/"+name)
		}
		return statusf(CodeConflict, ReasonConflict, "the object %q has been modified", namespace+"/"+name)
	}
	return nil
}

// ObjectMeta is the metadata of a typed object (metav1.ObjectMeta, reduced).
// ResourceVersion and UID come from the store and are not stored in the
// value.
type ObjectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	UID             string            `json:"uid,omitempty"`
}

// Meta returns the metadata: it makes ObjectMeta a [Resource] when
// embedded.
func (m *ObjectMeta) Meta() *ObjectMeta { return m }

// Resource is a typed object: a pointer to a struct embedding ObjectMeta,
// stored as JSON.
type Resource interface{ Meta() *ObjectMeta }

// ConfigMap is the typed form of a core/v1 ConfigMap (reduced).
type ConfigMap struct {
	ObjectMeta `json:"metadata"`
	Data       map[string]string `json:"data,omitempty"`
}

// Decode reads a stored object into r, filling its metadata from the store
// (namespace, name, resourceVersion, uid).
func Decode(o Object, r Resource) error {
	if err := json.Unmarshal([]byte(o.Value), r); err != nil {
		return fmt.Errorf("informer: decoding %q: %w", o.Key, err)
	}
	m := r.Meta()
	m.Namespace, m.Name = o.Namespace, o.Name
	m.ResourceVersion, m.UID = RV(o.ResourceVersion), RV(o.UID)
	return nil
}

func encode(r Resource) (string, error) {
	m := r.Meta()
	rv, uid := m.ResourceVersion, m.UID
	m.ResourceVersion, m.UID = "", ""
	b, err := json.Marshal(r)
	m.ResourceVersion, m.UID = rv, uid
	return string(b), err
}

// TypedClient reads and writes objects of type T (such as *ConfigMap) of
// one resource: a typed client, like client-go's generated clientsets.
type TypedClient[T Resource] struct {
	c   *Client
	new func() T
}

// NewTypedClient returns a typed client of resource gvr in st; newT returns
// an empty T to decode into.
func NewTypedClient[T Resource](st *store.Store, gvr GVR, newT func() T) *TypedClient[T] {
	return &TypedClient[T]{c: NewClient(st, gvr), new: newT}
}

// NewConfigMapClient returns the typed client of core/v1 ConfigMaps.
func NewConfigMapClient(st *store.Store) *TypedClient[*ConfigMap] {
	return NewTypedClient(st, ConfigMaps, func() *ConfigMap { return &ConfigMap{} })
}

// Raw returns the untyped client underneath.
func (t *TypedClient[T]) Raw() *Client { return t.c }

// Decode reads a stored object (from an informer's handler or cache) as T.
func (t *TypedClient[T]) Decode(o Object) (T, error) {
	out := t.new()
	return out, Decode(o, out)
}

func (t *TypedClient[T]) result(o Object, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, err
	}
	return t.Decode(o)
}

// Get returns namespace/name.
func (t *TypedClient[T]) Get(ctx context.Context, namespace, name string) (T, error) {
	return t.result(t.c.Get(ctx, namespace, name))
}

// Create stores obj, named by its metadata.
func (t *TypedClient[T]) Create(ctx context.Context, obj T) (T, error) {
	v, err := encode(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	m := obj.Meta()
	return t.result(t.c.Create(ctx, m.Namespace, m.Name, v))
}

// Update stores obj; if its metadata carries a resourceVersion, only if the
// object is still at it.
func (t *TypedClient[T]) Update(ctx context.Context, obj T) (T, error) {
	v, err := encode(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	m := obj.Meta()
	rv, _ := strconv.ParseInt(m.ResourceVersion, 10, 64)
	return t.result(t.c.Update(ctx, Object{Namespace: m.Namespace, Name: m.Name, Value: v, ResourceVersion: rv}))
}

// Delete removes namespace/name.
func (t *TypedClient[T]) Delete(ctx context.Context, namespace, name string) error {
	return t.c.Delete(ctx, namespace, name, 0)
}

// Unstructured is an object of any resource: its metadata and the rest of
// its JSON fields (apimachinery's unstructured.Unstructured, reduced).
type Unstructured struct {
	ObjectMeta
	// Fields holds every top-level field but "metadata".
	Fields map[string]any
}

// MarshalJSON implements json.Marshaler.
func (u *Unstructured) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(u.Fields)+1)
	for k, v := range u.Fields {
		m[k] = v
	}
	m["metadata"] = u.ObjectMeta
	return json.Marshal(m)
}

// UnmarshalJSON implements json.Unmarshaler.
func (u *Unstructured) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	u.ObjectMeta, u.Fields = ObjectMeta{}, map[string]any{}
	for k, raw := range m {
		if k == "metadata" {
			if err := json.Unmarshal(raw, &u.ObjectMeta); err != nil {
				return err
			}
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		u.Fields[k] = v
	}
	return nil
}

// DynamicClient reads and writes objects of any resource as
// [Unstructured]: the dynamic client, addressed by GVR.
type DynamicClient struct{ st *store.Store }

// NewDynamicClient returns a dynamic client of st.
func NewDynamicClient(st *store.Store) *DynamicClient { return &DynamicClient{st: st} }

// Resource returns the typed-as-Unstructured client of gvr.
func (d *DynamicClient) Resource(gvr GVR) *TypedClient[*Unstructured] {
	return NewTypedClient(d.st, gvr, func() *Unstructured { return &Unstructured{} })
}
