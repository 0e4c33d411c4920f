// Package k8s is the specification of Kubernetes list/watch over an
// etcd-style store, and of the informer contract that client-go's
// SharedInformer keeps with its event handlers (docs/SPEC.md §4 and §5).
//
// It is pure, like the rest of model/: the rules of resourceVersion on list
// and watch are functions of the committed history ([CheckList],
// [CheckWatch]); the informer contract is a validator over a recorded
// informer run ([CheckInformer]). They give the default verdict — what
// Kubernetes and client-go guarantee; [CheckInformerWith] adds the
// [Expectations] watchspec recommends beyond it (the strict profile).
//
// Objects are stored as Kubernetes' apiserver stores them: under the key
// /registry/<group>/<resource>/<namespace>/<name> (the core group has no
// group segment, cluster-scoped objects no namespace), and an object's
// resourceVersion is the ModRevision of its key.
package k8s

import (
	"strconv"
	"strings"

	"github.com/watchspec/watchspec/model/kv"
)

// GVR names a resource: a group, a version and a plural resource name.
type GVR struct {
	Group, Version, Resource string
}

// Prefix returns the key prefix under which the resource's objects in
// namespace are stored ("" for every namespace, or a cluster-scoped
// resource); it ends with "/".
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

// Key returns the storage key of the object namespace/name of the resource.
func (g GVR) Key(namespace, name string) string { return g.Prefix(namespace) + name }

// Object is one version of a stored object as the API shows it.
type Object struct {
	// Key is the object's storage key (its identity: namespace and name).
	Key string
	// Value is the object's serialised content; the model treats it as opaque.
	Value string
	// ResourceVersion is the revision of the object's last write.
	ResourceVersion int64
	// UID tells lives of one name apart: the revision that created this
	// life of the key (a delete and a re-create give a new UID).
	UID int64
}

// FromKV returns the object a key-value holds.
func FromKV(k kv.KeyValue) Object {
	return Object{Key: k.Key, Value: k.Value, ResourceVersion: k.ModRevision, UID: k.CreateRevision}
}

// Name returns the last segment of the key.
func (o Object) Name() string { return o.Key[strings.LastIndexByte(o.Key, '/')+1:] }

// RV renders a revision as a resourceVersion string.
func RV(rev int64) string { return strconv.FormatInt(rev, 10) }

// ParseRV reads a resourceVersion: "" and "0" are special (0 and ok); any
// other value must be a positive decimal without leading zeros, as
// Kubernetes' comparable resource versions are.
func ParseRV(s string) (int64, bool) {
	switch s {
	case "", "0":
		return 0, true
	}
	if s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
