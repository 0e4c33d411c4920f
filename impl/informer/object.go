package informer

import (
	"strconv"
	"strings"

	"github.com/watchspec/watchspec/impl/store"
)

// GVR names a resource: a group, a version and a plural resource name.
type GVR struct {
	Group, Version, Resource string
}

// ConfigMaps is the core resource the examples and tests use.
var ConfigMaps = GVR{Version: "v1", Resource: "configmaps"}

// String renders the GVR as group/version/resource ("v1/configmaps" for
// the core group).
func (g GVR) String() string {
	if g.Group == "" {
		return g.Version + "/" + g.Resource
	}
	return g.Group + "/" + g.Version + "/" + g.Resource
}

// Prefix returns the storage prefix of the resource's objects in namespace
// ("" for every namespace, or for a cluster-scoped resource), as the API
// server lays out etcd: /registry/<group>/<resource>/<namespace>/ — the core
// group has no group segment. The prefix ends with "/".
func (g GVR) Prefix(namespace string) string {
	p := "/registry/"
	if g.Group != "" {
		p += g.Group + "/"
	}
	p += g.Resource + "/"
	if namespace != "" {
		p += namespace + "/"
	}
	return p
}

// Key returns the storage key of object namespace/name of the resource.
func (g GVR) Key(namespace, name string) string { return g.Prefix(namespace) + name }

// Object is one version of a stored object as the API returns it. Its
// content is opaque to the informer; [TypedClient] gives it a shape.
type Object struct {
	// Key is the storage key: the object's identity.
	Key string
	// Namespace is empty for a cluster-scoped object.
	Namespace, Name string
	// Value is the serialised object.
	Value string
	// ResourceVersion is the revision of the object's last write (the
	// key's ModRevision). A DELETED event's object carries the revision
	// of the deletion instead.
	ResourceVersion int64
	// UID tells the lives of one name apart: the revision that created
	// this life of the key (its CreateRevision).
	UID int64
}

// RV renders a revision as a resourceVersion string ("" for 0).
func RV(rev int64) string {
	if rev == 0 {
		return ""
	}
	return strconv.FormatInt(rev, 10)
}

// MetaNamespaceKey is the default key of an object in a [DeltaFIFO] and an
// [Indexer]: "namespace/name", or "name" for a cluster-scoped object
// (client-go's MetaNamespaceKeyFunc).
func MetaNamespaceKey(o Object) (string, error) {
	if o.Namespace == "" {
		return o.Name, nil
	}
	return o.Namespace + "/" + o.Name, nil
}

// KeyFunc maps an object to its key in a [DeltaFIFO] or an [Indexer].
type KeyFunc func(Object) (string, error)

// objectAt builds the object a stored key-value holds; resourcePrefix is
// the resource's prefix for every namespace (GVR.Prefix("")). The segment
// after it is the namespace when another "/" follows, else the object is
// cluster-scoped.
func objectAt(resourcePrefix string, kv store.KeyValue) Object {
	o := Object{Key: kv.Key, Value: kv.Value, ResourceVersion: kv.ModRevision, UID: kv.CreateRevision}
	o.Namespace, o.Name = splitKey(resourcePrefix, kv.Key)
	return o
}

func splitKey(resourcePrefix, key string) (namespace, name string) {
	rest := strings.TrimPrefix(key, resourcePrefix)
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i], rest[i+1:]
	}
	return "", rest
}

// deletedObject is the object a DELETED event carries: the last state
// (from the event's PrevKV, when the store still had it) at the revision
// of the deletion.
func deletedObject(resourcePrefix string, e store.Event) Object {
	o := Object{Key: e.KV.Key, ResourceVersion: e.KV.ModRevision}
	if e.PrevKV != nil {
		o.Value, o.UID = e.PrevKV.Value, e.PrevKV.CreateRevision
	}
	o.Namespace, o.Name = splitKey(resourcePrefix, e.KV.Key)
	return o
}
