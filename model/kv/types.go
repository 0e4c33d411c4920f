package kv

import (
	"errors"
	"strconv"
)

// KeyValue is one version of a key, as etcd's mvccpb.KeyValue carries it.
//
// For the key-value of a DELETE event only Key and ModRevision are set
// (ModRevision is the revision of the deletion), exactly as etcd sends it.
type KeyValue struct {
	Key            string
	Value          string
	CreateRevision int64
	ModRevision    int64
	Version        int64
	// Lease is the ID of the lease the version was put with, 0 for none
	// (docs/SPEC.md §2.9). A put without a lease writes 0, as etcd does.
	Lease int64
}

// EventType says whether an event wrote or removed a key.
type EventType uint8

const (
	// Put is a write of a key (a creation when the key did not exist).
	Put EventType = iota
	// Delete is the removal of a live key.
	Delete
)

func (t EventType) String() string {
	switch t {
	case Put:
		return "PUT"
	case Delete:
		return "DELETE"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is one change of one key at one revision.
type Event struct {
	Type EventType
	KV   KeyValue
	// PrevKV is the key's state just before the event, or nil when the key did
	// not exist then. In a [Commit] it is always filled in; in a watch
	// response it is present only when the watch asked for it.
	PrevKV *KeyValue
}

// Revision returns the revision of the event (its ModRevision).
func (e Event) Revision() int64 { return e.KV.ModRevision }

// IsCreate reports whether e created its key: a PUT whose CreateRevision
// equals its ModRevision.
func (e Event) IsCreate() bool {
	return e.Type == Put && e.KV.CreateRevision == e.KV.ModRevision
}

// Request is one client request. Exactly one field must be set; Step answers
// any other shape with [ErrInvalidRequest].
type Request struct {
	Range   *RangeRequest
	Put     *PutRequest
	Delete  *DeleteRequest
	Txn     *TxnRequest
	Compact *CompactRequest
	// LeaseRevoke is no client's KV request: it is what the server does
	// to the store when a lease is revoked or expires (docs/SPEC.md §2.9,
	// §3.15), which a checker linearizes with the clients' requests.
	LeaseRevoke *LeaseRevokeRequest
}

// RangeRequest reads the keys in [Key, RangeEnd) at Revision.
//
// RangeEnd follows etcd: empty means the single key Key; "\x00" means every
// key ≥ Key; otherwise the half-open interval (see [PrefixEnd]). Revision ≤ 0
// means the current revision. Limit ≤ 0 means no limit. Sorting and the
// min/max revision filters of etcd are not modelled: keys come back in
// ascending byte order, which is etcd's default.
type RangeRequest struct {
	Key       string
	RangeEnd  string
	Revision  int64
	Limit     int64
	CountOnly bool
	KeysOnly  bool
}

// PutRequest writes Value under Key.
type PutRequest struct {
	Key    string
	Value  string
	PrevKV bool
	// Lease attaches the key to a lease (0: none). Step writes it into the
	// new version's KeyValue.Lease; whether the lease exists is the lease
	// model's question (docs/SPEC.md §2.10 LeaseAttach), which Step leaves
	// to lease.Check.
	Lease int64
}

// DeleteRequest removes the live keys in [Key, RangeEnd) (etcd conventions, as for Range).
type DeleteRequest struct {
	Key      string
	RangeEnd string
	PrevKV   bool
}

// Op is one operation inside a transaction; exactly one field must be set
// (an Op with none fails the transaction with [ErrKeyNotFound], one with more
// with [ErrInvalidRequest]).
// Nested transactions are not modelled.
type Op struct {
	Range  *RangeRequest
	Put    *PutRequest
	Delete *DeleteRequest
}

// CompareTarget is the field of a key a [Compare] looks at.
type CompareTarget uint8

const (
	TargetValue CompareTarget = iota
	TargetVersion
	TargetCreateRevision
	TargetModRevision
)

// CompareResult is the relation a [Compare] demands.
type CompareResult uint8

const (
	CompareEqual CompareResult = iota
	CompareNotEqual
	CompareLess
	CompareGreater
)

// Compare is one guard of a transaction: Target of Key must stand in relation
// Result to the operand (Value for TargetValue, the number otherwise).
//
// A missing key has Version, CreateRevision and ModRevision 0; a comparison
// of the value of a missing key is always false, whatever Result says (as in
// etcd). Comparisons over a key range are not modelled.
type Compare struct {
	Key    string
	Target CompareTarget
	Result CompareResult
	// Value is the operand of TargetValue.
	Value string
	// Number is the operand of TargetVersion, TargetCreateRevision and TargetModRevision.
	Number int64
}

// TxnRequest runs Success when every Compare holds and Failure otherwise.
// All writes of the chosen branch share one revision and produce their events
// in operation order.
type TxnRequest struct {
	Compare []Compare
	Success []Op
	Failure []Op
}

// CompactRequest discards the history below Revision.
type CompactRequest struct {
	Revision int64
}

// LeaseRevokeRequest deletes, at one revision, every live key whose
// current version is attached to Lease (KeyValue.Lease == Lease): what
// etcd's lessor does to the store when it revokes the lease or the lease
// expires (docs/SPEC.md §2.9, §3.15; etcd v3.7.3 server/lease/lessor.go
// Revoke: one write transaction deleting each attached key, sorted). The
// DELETE events come in key order. When no key is attached the store is
// unchanged and no revision is created (a write transaction without
// changes does not advance the revision: server/storage/mvcc/
// kvstore_txn.go storeTxnWrite.End). Whether the lease exists is the lease
// model's question (package lease); Step only deletes. Lease 0 (no lease)
// fails with [ErrInvalidRequest].
type LeaseRevokeRequest struct {
	Lease int64
}

// Response is the answer to a [Request]. When Err is set nothing else is.
type Response struct {
	// Revision is the header revision: the store's revision after the request.
	Revision int64
	Err      error
	Range    *RangeResponse
	Put      *PutResponse
	Delete   *DeleteResponse
	Txn      *TxnResponse
	Compact  *CompactResponse
	// LeaseRevoke answers a [LeaseRevokeRequest].
	LeaseRevoke *LeaseRevokeResponse
}

// RangeResponse lists the keys found. Count is the number of keys in the
// range at the revision read, whatever the limit; More says that the limit
// cut the list short.
type RangeResponse struct {
	KVs   []KeyValue
	More  bool
	Count int64
}

// PutResponse carries the key's previous state when the request asked for it
// and the key existed.
type PutResponse struct {
	PrevKV *KeyValue
}

// DeleteResponse says how many keys were removed and, when asked, their last states.
type DeleteResponse struct {
	Deleted int64
	PrevKVs []KeyValue
}

// TxnResponse says which branch ran and holds one response per operation of it.
type TxnResponse struct {
	Succeeded bool
	Responses []OpResponse
}

// OpResponse is the answer to one [Op]; exactly one field is set.
type OpResponse struct {
	Range  *RangeResponse
	Put    *PutResponse
	Delete *DeleteResponse
}

// CompactResponse is the (empty) answer to a successful compaction.
type CompactResponse struct{}

// LeaseRevokeResponse is the (empty) answer to a [LeaseRevokeRequest], as
// etcd's LeaseRevokeResponse carries only a header. The keys it deleted are
// the DELETE events of the revision it created, if any (see
// [State.LastCommit]).
type LeaseRevokeResponse struct{}

// The errors Step answers with. Their texts are etcd's, so that a response
// recorded from a real server compares equal to the model's (see [SameError]).
var (
	// ErrCompacted is returned for a read below the compact revision and for a
	// compaction at or below it.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev is returned for a read or a compaction above the current revision.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrEmptyKey is returned for a request or a comparison without a key.
	ErrEmptyKey = errors.New("etcdserver: key is not provided")
	// ErrDuplicateKey is returned for a transaction branch that writes one key
	// twice, or puts a key that the same branch deletes.
	ErrDuplicateKey = errors.New("etcdserver: duplicate key given in txn request")
	// ErrKeyNotFound is returned for a transaction Op that sets no operation
	// (etcd answers an empty RequestOp so).
	ErrKeyNotFound = errors.New("etcdserver: key not found")
	// ErrInvalidRequest is returned for a Request that does not set exactly one
	// operation, or an Op that sets more than one. It is the model's own:
	// etcd's wire format cannot express such a request.
	ErrInvalidRequest = errors.New("model: request must set exactly one operation")
)

// SameError reports whether a and b are the same model error, comparing
// texts so that errors decoded from a trace match the sentinels.
func SameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Error() == b.Error()
}
