// Package spec names the guarantees of watchspec and carries their catalogue.
//
// A property has one name everywhere: the heading of its section in
// docs/SPEC.md, the [Property] constant here, the Property field of every
// [Violation] a checker reports, the name of the tests that prove the checker
// can fail, and the "FAIL <Property>" lines of the command-line tool. A test
// in this package keeps [Catalog] and docs/SPEC.md in step.
//
// The package is pure: it holds names and text, nothing else.
package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Property is the stable name of a guarantee, exactly as docs/SPEC.md spells it.
type Property string

// The key-value properties (docs/SPEC.md §2).
const (
	// WriteRevision: the header revision of a successful write's response is
	// the revision at which its events were committed.
	WriteRevision Property = "WriteRevision"
	// Linearizable: the key-value operations of a history are linearizable
	// with respect to the model's Step.
	Linearizable Property = "Linearizable"
	// SerializableRead: a serializable range answers the store's state at
	// its header revision, which was committed by its return.
	SerializableRead Property = "SerializableRead"
	// LeaseAttach: a put with a lease succeeds only while the lease exists.
	LeaseAttach Property = "LeaseAttach"
	// LeaseExpiry: no lease expires before its TTL has passed since the last
	// grant or keep-alive the server acknowledged.
	LeaseExpiry Property = "LeaseExpiry"
)

// The watch properties (docs/SPEC.md §3).
const (
	Ordered           Property = "Ordered"
	Unique            Property = "Unique"
	Reliable          Property = "Reliable"
	Atomic            Property = "Atomic"
	Resumable         Property = "Resumable"
	Bookmarkable      Property = "Bookmarkable"
	Filtered          Property = "Filtered"
	PrevKV            Property = "PrevKV"
	IsCreate          Property = "IsCreate"
	StartRevision     Property = "StartRevision"
	CompactedCancel   Property = "CompactedCancel"
	MonotonicRevision Property = "MonotonicRevision"
	// LeaseDeletes: a DELETE no client made is a lease's revocation or expiry.
	LeaseDeletes Property = "LeaseDeletes"
	// LeaseAtomic: a revocation or expiry deletes all of the lease's keys at one revision.
	LeaseAtomic Property = "LeaseAtomic"
)

// Entry describes one property: where docs/SPEC.md states it, what it says,
// which model function decides it and where it comes from.
type Entry struct {
	Property Property
	// Section is the section number in docs/SPEC.md, such as "3.1".
	Section string
	// Summary is the plain statement, one sentence: word for word the italic
	// statement under the property's heading in docs/SPEC.md (a test keeps
	// them equal).
	Summary string
	// Model names the model function that decides the property.
	Model string
	// Source names where the guarantee comes from (a document or an upstream issue).
	Source string
}

// The Kubernetes list and watch properties (docs/SPEC.md §4).
const (
	ListResourceVersion Property = "ListResourceVersion"
	ListSnapshot        Property = "ListSnapshot"
	WatchStart          Property = "WatchStart"
	InitialEventsEnd    Property = "InitialEventsEnd"
	Expired             Property = "Expired"
)

// The informer contract (docs/SPEC.md §5).
const (
	InformerSubsequence Property = "InformerSubsequence"
	InformerConverges   Property = "InformerConverges"
	RelistDeletes       Property = "RelistDeletes"
	LateHandler         Property = "LateHandler"
	HasSyncedDelivered  Property = "HasSyncedDelivered"
	SyncedRVMonotonic   Property = "SyncedRVMonotonic"
	SameRVUpdate        Property = "SameRVUpdate"
	FreshStart          Property = "FreshStart"
)

// Catalog lists every property in the order of docs/SPEC.md.
//
// Callers must not modify the returned slice's elements; it is shared.
func Catalog() []Entry { return catalog }

var catalog = []Entry{
	{WriteRevision, "2.6", "The header revision of a successful write is the revision of the events it committed.",
		"kv.CheckWriteRevision", "etcd API guarantees (Revision); etcd robustness tests"},
	{Linearizable, "2.7", "Every key-value operation takes effect at one instant between its call and its return, in an order that the model's Step answers exactly as the store did.",
		"kv.Step", "etcd API guarantees (KV: strict serializability); etcd robustness tests; etcd#20418 (stale reads)"},
	{SerializableRead, "2.8", "A serializable read answers the store's state at its header revision, and that revision was committed by the time it returned.",
		"kv.CheckSerializable", "etcd API guarantees (KV: serializable reads); etcd robustness tests (validateSerializableOperations)"},
	{LeaseAttach, "2.10", "A put with a lease succeeds only while the lease exists, and the key's version then carries the lease.",
		"lease.Check", "etcd v3.7.3 server/etcdserver/txn/put.go (ErrLeaseNotFound); server/lease/lessor.go (Attach)"},
	{LeaseExpiry, "2.11", "No lease expires before its TTL has passed since the call of the last grant or keep-alive the server acknowledged; it may expire any time later.",
		"lease.Check", "etcd v3.7.3 server/lease/lessor.go (Renew, refresh, Promote, revokeExpiredLeases)"},
	{Ordered, "3.1", "Events are delivered in revision order, and the events of one revision in the order of its operations.",
		"watch.(*Validator).ordered", "etcd API guarantees (Watch: Ordered); etcd#15271"},
	{Unique, "3.2", "No event is delivered twice on one watch.",
		"watch.(*Validator).unique", "etcd API guarantees (Watch: Unique); etcd#17247"},
	{Reliable, "3.3", "Between two delivered events no matching committed event is skipped, and every delivered event is one the store committed.",
		"watch.(*Validator).reliable", "etcd API guarantees (Watch: Reliable)"},
	{Atomic, "3.4", "All matching events of one revision arrive in one response.",
		"watch.(*Validator).atomic", "etcd API guarantees (Watch: Atomic; KV: Atomicity)"},
	{Resumable, "3.5", "A watch started at a revision in the history window delivers, first, the first matching event at or after that revision.",
		"watch.(*Validator).resumable", "etcd API guarantees (Watch: Resumable); etcd#18089, etcd#19179"},
	{Bookmarkable, "3.6", "A progress notification at revision R means every matching event up to R was delivered, and no later event has a revision up to R.",
		"watch.(*Validator).bookmarkable", "etcd API guarantees (Watch: Bookmarkable); etcd#15220"},
	{Filtered, "3.7", "Only events on keys in the watched range are delivered, and NOPUT / NODELETE are honoured.",
		"watch.(*Validator).filtered", "etcd API reference (WatchCreateRequest.filters)"},
	{PrevKV, "3.8", "When requested, an event's previous key-value equals the key's state at ModRevision − 1; it is absent only for creations or when that state was compacted.",
		"watch.(*Validator).prevKV", "etcd API reference (WatchCreateRequest.prev_kv)"},
	{IsCreate, "3.9", "A PUT event's CreateRevision equals its ModRevision exactly when the key did not exist at ModRevision − 1.",
		"watch.(*Validator).isCreate", "etcd API reference (Event.kv); etcd robustness IsCreate check"},
	{StartRevision, "3.10", "A watch from revision 0 starts where its server registered it, a future start waits, and nothing below the start is delivered.",
		"watch.(*Validator).startRevision", "etcd API reference (start_revision); etcd#20221"},
	{CompactedCancel, "3.11", "A watch that needs compacted history is cancelled with CompactRevision or served exactly that history, never silently advanced past the compaction.",
		"watch.(*Validator).compactedCancel", "etcd API reference (compact_revision); etcd#17529"},
	{MonotonicRevision, "3.12", "A response's header revision is never below an event delivered in or before it, and progress notifications never go back.",
		"watch.(*Validator).monotonicRevision", "etcd mvcc WatchResponse.Revision; etcd robustness tests (validateBookmarkable)"},
	{LeaseDeletes, "3.14", "A DELETE that no client made removes a version that was put with a lease: only a lease's revocation or expiry deletes on the server's behalf.",
		"lease.Check", "etcd v3.7.3 server/lease/lessor.go (Revoke, revokeExpiredLeases)"},
	{LeaseAtomic, "3.15", "A revocation or expiry deletes all of the lease's keys at one revision.",
		"lease.Check", "etcd v3.7.3 server/lease/lessor.go (Revoke: one txn for all keys)"},
	{ListResourceVersion, "4.1", "A list's resourceVersion keeps its semantic: unset is consistent, N is not older than N, Exact is exactly N, a continuation stays at its first page's revision.",
		"k8s.CheckList", "Kubernetes API concepts (resource versions)"},
	{ListSnapshot, "4.2", "A list's items are exactly the stored objects at the list's resourceVersion, in key order, page after page.",
		"k8s.CheckList", "Kubernetes API concepts (efficient detection of changes; retrieving large results)"},
	{WatchStart, "4.3", "A watch at N delivers the changes after N; a watch that opens with a state (unset, \"0\", sendInitialEvents) delivers ADDED for exactly the objects of one revision its semantic allows, then the changes after it.",
		"k8s.CheckWatch", "Kubernetes API concepts (watch semantics); kubernetes#73845"},
	{InitialEventsEnd, "4.4", "A WatchList's initial events are sorted by key and end with one bookmark annotated k8s.io/initial-events-end at the revision the state is synced to; changes may come between them while the state catches up.",
		"k8s.CheckWatch", "KEP-3157 (WatchList); kubernetes#120897"},
	{Expired, "4.5", "410 Gone answers only a read of history the server no longer has; a read of compacted history gets 410 or exactly that history's data, never other data.",
		"k8s.CheckList, k8s.CheckWatch", "Kubernetes API concepts (410 Gone); apiserver etcd3 handleCompactedErrorForPaging, cacher GetIntervalLocked"},
	{InformerSubsequence, "5.1", "Per object, the states a handler sees are real states of the object, in order.",
		"k8s.CheckInformer", "client-go SharedInformer contract"},
	{InformerConverges, "5.2", "After writes stop, the informer's cache and every handler's view equal the store.",
		"k8s.CheckInformer", "client-go SharedInformer contract (eventual consistency); kubernetes#83810"},
	{RelistDeletes, "5.3", "A key absent from a relist is delivered as a delete (a tombstone with its last known state), even if its addition was still queued.",
		"k8s.CheckInformer", "client-go DeltaFIFO.Replace; kubernetes#115620"},
	{LateHandler, "5.4", "A handler added after the start gets the cache's contents, then a gapless stream of what follows.",
		"k8s.CheckInformer", "client-go SharedInformer contract; kubernetes#59822"},
	{HasSyncedDelivered, "5.5", "When a handler's HasSynced is true, all its initial-list adds have been delivered.",
		"k8s.CheckInformer", "client-go HasSynced; kubernetes#113985"},
	{SyncedRVMonotonic, "5.6", "The informer's last-synced resourceVersion never decreases and is never taken from a synthetic ADDED event.",
		"k8s.CheckInformer", "client-go Reflector; kubernetes#136583"},
	{SameRVUpdate, "5.7", "A handler gets an object at the same resourceVersion again only from a resync or a relist.",
		"k8s.CheckInformer", "client-go sharedIndexInformer (isSync); kubernetes#87957"},
	{FreshStart, "5.8", "An informer's first sync is not older than what was committed before it started, unless it was read at resourceVersion \"0\", which the API lets a cache serve stale.",
		"k8s.CheckInformer", "KEP-2340, KEP-3157; kubernetes#59848 (open; expectation StrictFreshStart)"},
}

// Lookup returns the catalogue entry of p.
func Lookup(p Property) (Entry, bool) {
	for _, e := range catalog {
		if e.Property == p {
			return e, true
		}
	}
	return Entry{}, false
}

// Section returns "§N.M" for p, or "§?" when p is not in the catalogue.
func (p Property) Section() string {
	if e, ok := Lookup(p); ok {
		return "§" + e.Section
	}
	return "§?"
}

// Violation is one broken guarantee, pointing at the revisions and keys involved.
type Violation struct {
	Property Property
	// Revisions are the revisions involved, most relevant first.
	Revisions []int64
	// Keys are the keys involved.
	Keys []string
	// Message says what was observed and what the property demands.
	Message string
}

// String renders v on one line:
//
//	Reliable §3.3 revisions=[7] keys=["a"]: event at revision 7 on "a" was skipped
func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(string(v.Property))
	b.WriteByte(' ')
	b.WriteString(v.Property.Section())
	if len(v.Revisions) > 0 {
		b.WriteString(" revisions=")
		b.WriteString(FormatRevisions(v.Revisions))
	}
	if len(v.Keys) > 0 {
		b.WriteString(" keys=")
		b.WriteString(FormatKeys(v.Keys))
	}
	b.WriteString(": ")
	b.WriteString(v.Message)
	return b.String()
}

// Error makes a Violation usable as an error.
func (v Violation) Error() string { return v.String() }

// maxListed bounds how many revisions or keys a rendered violation lists.
const maxListed = 8

// FormatRevisions renders revs as [1 2 3], eliding the middle of long lists.
func FormatRevisions(revs []int64) string {
	parts := make([]string, 0, len(revs))
	for i, r := range revs {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("…(%d more)", len(revs)-maxListed))
			break
		}
		parts = append(parts, strconv.FormatInt(r, 10))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// FormatKeys renders keys as ["a" "b"], quoting them so that any bytes stay readable.
func FormatKeys(keys []string) string {
	parts := make([]string, 0, len(keys))
	for i, k := range keys {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("…(%d more)", len(keys)-maxListed))
			break
		}
		parts = append(parts, strconv.Quote(k))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
