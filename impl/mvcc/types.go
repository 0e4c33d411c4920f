package mvcc

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
	// Lease is the ID of the lease the key is attached to, 0 for none
	// (docs/SPEC.md, Leases; see [Store.LeaseGrant]). A keys-only range
	// leaves it 0, as etcd v3.7.3 does (docs/SPEC.md §2.3).
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
	// PrevKV is the key's state at KV.ModRevision-1, or nil when the key did
	// not exist then (or, for events read back from history, when that state
	// is below the compact revision).
	PrevKV *KeyValue
}

// Commit is what one write revision did: its events, in operation order.
// Every event's KV.ModRevision is Revision.
type Commit struct {
	Revision int64
	Events   []Event
}

// RangeRequest reads the keys in [Key, RangeEnd) at Revision.
//
// RangeEnd follows etcd: empty means the single key Key; "\x00" means every
// key ≥ Key; otherwise the half-open interval (see [PrefixEnd]); an end at or
// below Key denotes nothing. Revision ≤ 0 means the current revision. Limit
// ≤ 0 means no limit. Keys come back in ascending byte order (etcd's default
// sort); sorting options and min/max revision filters are not supported.
type RangeRequest struct {
	Key       string
	RangeEnd  string
	Revision  int64
	Limit     int64
	CountOnly bool
	KeysOnly  bool
}

// RangeResponse lists the keys found. Count is the number of keys in the
// range at the revision read, whatever the limit; More says that the limit
// cut the list short. Revision is the header revision: the store's current
// revision, whatever revision was read.
type RangeResponse struct {
	Revision int64
	KVs      []KeyValue
	More     bool
	Count    int64
}

// PutRequest writes Value under Key.
type PutRequest struct {
	Key    string
	Value  string
	PrevKV bool
	// Lease attaches the key to a lease granted earlier (0: none). A put
	// with a lease that does not exist fails with [ErrLeaseNotFound]; a put
	// without one detaches the key from its lease.
	Lease int64
}

// PutResponse carries the revision of the write and, when the request asked
// for it and the key existed, the key's previous state.
type PutResponse struct {
	Revision int64
	PrevKV   *KeyValue
}

// DeleteRequest removes the live keys in [Key, RangeEnd) (conventions as for
// [RangeRequest]).
type DeleteRequest struct {
	Key      string
	RangeEnd string
	PrevKV   bool
}

// DeleteResponse says how many keys were removed and, when asked, their last
// states in key order. Revision is the revision of the deletion, or the
// unchanged current revision when nothing was removed.
type DeleteResponse struct {
	Revision int64
	Deleted  int64
	PrevKVs  []KeyValue
}

// Op is one operation of a transaction; exactly one field must be set. An Op
// with none fails the transaction with [ErrKeyNotFound] (etcd's answer to an
// empty RequestOp), one with several with [ErrInvalidRequest]. Nested
// transactions are not supported.
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
// Result to the operand (Value for TargetValue, Number otherwise).
//
// A missing key has Version, CreateRevision and ModRevision 0; a comparison
// of the value of a missing key is false whatever Result says (as in etcd).
// Comparisons over a key range are not supported.
type Compare struct {
	Key    string
	Target CompareTarget
	Result CompareResult
	Value  string
	Number int64
}

// TxnRequest runs Success when every Compare holds and Failure otherwise.
// The writes of the chosen branch share one revision and produce their
// events in operation order; a range in the branch sees the writes before it.
type TxnRequest struct {
	Compare []Compare
	Success []Op
	Failure []Op
}

// TxnResponse says which branch ran and holds one response per operation of
// it. Revision is the store's revision after the transaction. The Revision of
// a nested response is etcd's: for a range, the revision before the
// transaction if nothing was written before it, else the new one; for a put
// or a delete that removed something, the new one.
type TxnResponse struct {
	Revision  int64
	Succeeded bool
	Responses []OpResponse
}

// OpResponse is the answer to one [Op]; exactly one field is set.
type OpResponse struct {
	Range  *RangeResponse
	Put    *PutResponse
	Delete *DeleteResponse
}

// CompactResponse answers a successful compaction; Revision is the store's
// current revision.
type CompactResponse struct {
	Revision int64
}

// The errors of the store. The texts of the request errors are etcd's, so
// that an answer of this store compares equal to one recorded from etcd.
var (
	// ErrCompacted is returned for a read below the compact revision and for a
	// compaction at or below it.
	ErrCompacted = errors.New("mvcc: required revision has been compacted")
	// ErrFutureRev is returned for a read or a compaction above the current revision.
	ErrFutureRev = errors.New("mvcc: required revision is a future revision")
	// ErrEmptyKey is returned for a request or a comparison without a key.
	ErrEmptyKey = errors.New("etcdserver: key is not provided")
	// ErrDuplicateKey is returned for a transaction branch that puts one key
	// twice, or puts a key that one of its deletes covers.
	ErrDuplicateKey = errors.New("etcdserver: duplicate key given in txn request")
	// ErrKeyNotFound is returned for a transaction Op that sets no operation.
	ErrKeyNotFound = errors.New("etcdserver: key not found")
	// ErrInvalidRequest is returned for a transaction Op that sets more than
	// one operation (etcd's wire format cannot express one).
	ErrInvalidRequest = errors.New("mvcc: an operation must set exactly one of range, put and delete")
	// ErrClosed is returned by every method once Close has begun.
	ErrClosed = errors.New("mvcc: store closed")
	// ErrCorrupt is what a damaged data directory, or a damaged record read
	// later, wraps: a record or a file fails its checksum or its structure.
	// Open returns a [*DamageError] for it, which says what is damaged and
	// what can still be trusted.
	ErrCorrupt = errors.New("mvcc: data corrupt")
	// ErrNoSpace is returned for a write refused because the disk is full:
	// the write that ran out of space, and every Put (and every Txn that
	// puts) while the NOSPACE alarm is raised (see [Store.Alarms]). The text
	// is etcd's (rpctypes.ErrGRPCNoSpace), as is the rule of what it refuses
	// (etcd's applierV3Capped, server/etcdserver/apply/apply.go).
	ErrNoSpace = errors.New("etcdserver: mvcc: database space exceeded")
	// ErrLocked is returned by Open, Check and Recover for a data directory
	// that another process (or another Store of this one) holds open.
	ErrLocked = errors.New("mvcc: data directory is locked by another process")
	// ErrNotStore is returned by Open, Check and Recover for a directory
	// that holds something other than a watchspec store: an etcd data
	// directory, other files, a data file that is not one of this store's.
	ErrNotStore = errors.New("mvcc: not a watchspec data directory")
	// ErrLeaseNotFound is returned for a put (or a transaction that puts)
	// with a lease that does not exist, and for a revoke of one. The text
	// is etcd's (lease.ErrLeaseNotFound as rpctypes.ErrGRPCLeaseNotFound).
	ErrLeaseNotFound = errors.New("etcdserver: requested lease not found")
	// ErrLeaseExist is returned for a grant of an ID that is taken.
	ErrLeaseExist = errors.New("etcdserver: lease already exists")
	// ErrLeaseTTLTooLarge is returned for a grant above [MaxLeaseTTL].
	ErrLeaseTTLTooLarge = errors.New("etcdserver: too large lease TTL")
)
