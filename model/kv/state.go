package kv

import "slices"

// State is the state of an etcd-style MVCC key-value store: its current
// revision, its compact revision, and the whole history of every key.
//
// A State is a value and is immutable: [Step] returns a new State and leaves
// its argument untouched, so a checker may keep any number of States alive
// and step each of them independently. The zero State is a fresh store at
// revision 1 that was never compacted.
//
// # Cost
//
// States are persistent data structures. Keys live in a treap whose node
// priorities are a hash of the key, so its shape depends only on the set of
// keys, never on the order they were written in; each key keeps its versions
// in a list, newest first. A write copies the O(log n) nodes on the path to
// each key it touches and shares everything else with the previous State, so
// stepping never copies the world:
//
//   - Put: O(log n) time and new memory.
//   - Delete and Txn: O(log n + k) per key touched, plus O(log n) per key
//     found when a range is deleted.
//   - Range at the current revision: O(log n + k) for k keys in the range;
//     at an older revision, add the versions newer than it on each key read.
//   - LeaseRevoke: O(n) to find the keys attached to the lease (the model
//     keeps no index by lease), plus O(log n) per key deleted.
//   - Compact: O(1). The model never discards data; it only refuses to read
//     below the compact revision, which is all a client can observe.
//   - [State.Hash]: O(1), maintained incrementally on every write.
//   - [Equal]: O(1) when hashes differ; otherwise a walk that skips
//     every subtree the two States share.
//
// Here n is the number of distinct keys ever written.
type State struct {
	base      int64 // the revision before the first write, less one; 0 means a fresh store (revision 1)
	writes    int64 // write revisions so far; the revision is 1 + base + writes + skipped
	skipped   int64 // revisions that hold no write (see [State.Skip]); 0 for an etcd-like store
	compacted bool
	compact   int64
	compacts  *compactEntry // every compaction, newest first (compact is the newest)
	root      *node
	log       *logEntry // newest commit first
	hash      uint64    // XOR of the hashes of every version in the store
	keys      int       // distinct keys ever written
}

// node is one key of the treap with its history.
type node struct {
	key         string
	prio        uint64
	left, right *node
	hist        *version // newest first; never nil
}

// version is one entry in a key's history: a write or a tombstone.
type version struct {
	kv   KeyValue // for a tombstone only Key and ModRevision are set
	tomb bool
	next *version
}

type logEntry struct {
	commit Commit
	next   *logEntry
}

// compactEntry is one compaction in a State's list of them.
type compactEntry struct {
	rev  int64
	next *compactEntry
}

// Commit is what one write revision did: its events, in operation order.
type Commit struct {
	Revision int64
	Events   []Event
}

// Start returns an empty store at the given revision that was never
// compacted: the state of a store whose earlier revisions wrote keys the
// history does not concern (a store that is not fresh, or one that writes
// revisions of its own at start-up). Start(1) is the zero State.
func Start(revision int64) State { return State{base: max(revision, 1) - 1} }

// StartCompacted is [Start] for a store that was compacted at compact
// before the history began: reads below compact fail with ErrCompacted and
// a compaction at or below it fails too (docs/SPEC.md §2.4). A negative
// compact means never compacted; one above revision is taken as revision.
func StartCompacted(revision, compact int64) State {
	s := Start(revision)
	if compact >= 0 {
		s.compacted, s.compact = true, min(compact, s.Revision())
		s.compacts = &compactEntry{rev: s.compact}
	}
	return s
}

// Revision returns the store's current revision: 1 for a fresh store, and one
// more for every request that wrote something.
func (s State) Revision() int64 { return 1 + s.base + s.writes + s.skipped }

// Skip returns s with its revision advanced to `to` without any write: the
// revisions after the current one, up to `to`, hold no event. It models a
// store that skips revisions, which etcd never does (docs/SPEC.md §2.1): the
// checker uses it only under the RevisionGaps allowance (§9). A `to` at or
// below the current revision returns s unchanged. It costs O(1).
func (s State) Skip(to int64) State {
	if to > s.Revision() {
		s.skipped += to - s.Revision()
	}
	return s
}

// CompactRevision returns the revision of the last successful compaction, or
// -1 when the store was never compacted (etcd allows compacting revision 0,
// after which this is 0).
func (s State) CompactRevision() int64 {
	if !s.compacted {
		return -1
	}
	return s.compact
}

// Get returns key's state at revision rev (rev ≤ 0 means the current
// revision), and whether the key existed then. It ignores compaction: it is
// the model's own view, not a client request.
func (s State) Get(key string, rev int64) (KeyValue, bool) {
	if rev <= 0 {
		rev = s.Revision()
	}
	n := find(s.root, key)
	if n == nil {
		return KeyValue{}, false
	}
	v := n.hist.at(rev)
	if v == nil || v.tomb {
		return KeyValue{}, false
	}
	return v.kv, true
}

// Snapshot returns the live keys of the range (key, rangeEnd) — etcd's
// conventions — as they were at revision rev (≤ 0: the current one), in key
// order. Like Get, it ignores compaction: it is the model's own view.
func (s State) Snapshot(key, rangeEnd string, rev int64) []KeyValue {
	if rev <= 0 {
		rev = s.Revision()
	}
	return rangeAt(s.root, RangeRequest{Key: key, RangeEnd: rangeEnd}, rev).KVs
}

// LastCommit returns the commit of the current revision, or false for a
// fresh store.
func (s State) LastCommit() (Commit, bool) {
	if s.log == nil {
		return Commit{}, false
	}
	return s.log.commit, true
}

// History returns the committed history of s: every commit in revision order
// and every compaction s went through, in order (the one it started with
// first, for a State from [StartCompacted]). It costs O(revisions +
// compactions). Every compaction, not only the last, because a reader of
// the history may need the one in force at an earlier revision: a list
// answered 410 while a compaction ran is judged against the latest
// compaction at or below the revision its answer saw (docs/SPEC.md §4.5).
func (s State) History() *History {
	n := 0
	for e := s.log; e != nil; e = e.next {
		n++
	}
	commits := make([]Commit, n)
	for e := s.log; e != nil; e = e.next {
		n--
		commits[n] = e.commit
	}
	h := &History{commits: commits, base: 1 + s.base}
	if s.skipped > 0 {
		h.head = s.Revision()
	}
	for e := s.compacts; e != nil; e = e.next {
		h.compactions = append(h.compactions, e.rev)
	}
	slices.Reverse(h.compactions)
	return h
}

// Hash returns a hash of everything a client can observe of s: the revision,
// the compact revision and every version of every key. Equal States have
// equal hashes.
func (s State) Hash() uint64 {
	h := mix64(s.hash ^ mix64(uint64(s.base+s.writes+s.skipped)))
	if s.compacted {
		h = mix64(h ^ mix64(uint64(s.compact)^0x5bd1e9955bd1e995))
	}
	return h
}

// Equal reports whether a and b cannot be told apart by any KV request: same
// revision, same compact revision, and the same history for every key. (The
// order of events inside one revision, which only a watch can see, is not
// compared.)
func Equal(a, b State) bool {
	if a.base != b.base || a.writes != b.writes || a.skipped != b.skipped || a.compacted != b.compacted || a.compact != b.compact ||
		a.hash != b.hash || a.keys != b.keys {
		return false
	}
	return sameTree(a.root, b.root)
}

// sameTree compares two treaps. Because a treap's shape depends only on its
// key set, equal contents mean equal shapes, so a structural walk is exact;
// shared subtrees are skipped by pointer.
func sameTree(a, b *node) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || a.key != b.key {
		return false
	}
	return sameHistory(a.hist, b.hist) && sameTree(a.left, b.left) && sameTree(a.right, b.right)
}

func sameHistory(a, b *version) bool {
	for ; a != b; a, b = a.next, b.next {
		if a == nil || b == nil || a.tomb != b.tomb || a.kv != b.kv {
			return false
		}
	}
	return true
}

// at returns the newest version with ModRevision ≤ rev, or nil.
func (v *version) at(rev int64) *version {
	for ; v != nil; v = v.next {
		if v.kv.ModRevision <= rev {
			return v
		}
	}
	return nil
}

// live returns the current state of the key, or nil when it is deleted.
func (v *version) live() *KeyValue {
	if v == nil || v.tomb {
		return nil
	}
	return &v.kv
}

func find(n *node, key string) *node {
	for n != nil {
		switch {
		case key < n.key:
			n = n.left
		case key > n.key:
			n = n.right
		default:
			return n
		}
	}
	return nil
}

// above reports whether a node with (prio, key) belongs above one with
// (prio2, key2): higher priority wins, ties broken by key, so the order is total.
func above(prio uint64, key string, prio2 uint64, key2 string) bool {
	if prio != prio2 {
		return prio > prio2
	}
	return key < key2
}

// insert returns a copy of the treap n in which key's history is hist. Nodes
// off the path to key are shared with n.
func insert(n *node, key string, hist *version) (root *node, added bool) {
	if n == nil {
		return &node{key: key, prio: hashString(key), hist: hist}, true
	}
	c := *n
	switch {
	case key < n.key:
		c.left, added = insert(n.left, key, hist)
		if above(c.left.prio, c.left.key, c.prio, c.key) {
			// c.left is a fresh node made by this insert: rotating it is safe.
			l := c.left
			c.left = l.right
			l.right = &c
			return l, added
		}
	case key > n.key:
		c.right, added = insert(n.right, key, hist)
		if above(c.right.prio, c.right.key, c.prio, c.key) {
			r := c.right
			c.right = r.left
			r.left = &c
			return r, added
		}
	default:
		c.hist = hist
	}
	return &c, added
}

// visit calls fn, in key order, for every node whose key is in the range
// (key, rangeEnd) denotes, until fn returns false.
func visit(n *node, key, rangeEnd string, fn func(*node) bool) bool {
	if n == nil {
		return true
	}
	if rangeEnd == "" {
		if m := find(n, key); m != nil {
			return fn(m)
		}
		return true
	}
	if n.key > key && !visit(n.left, key, rangeEnd, fn) {
		return false
	}
	if InRange(key, rangeEnd, n.key) && !fn(n) {
		return false
	}
	if rangeEnd == "\x00" || n.key < rangeEnd {
		return visit(n.right, key, rangeEnd, fn)
	}
	return true
}

func (v *version) hash() uint64 {
	h := mix64(hashString(v.kv.Key) ^ uint64(v.kv.ModRevision))
	if v.tomb {
		return mix64(h ^ 0x2545f4914f6cdd1d)
	}
	h = mix64(h ^ hashString(v.kv.Value))
	h = mix64(h ^ uint64(v.kv.CreateRevision))
	return mix64(h ^ uint64(v.kv.Version))
}

// hashString is FNV-1a, 64 bit.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is the SplitMix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
