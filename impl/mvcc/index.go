package mvcc

import (
	"sort"
	"sync"

	"github.com/google/btree"
)

// index is the in-memory key index: for every key, the revisions of its
// records still in the data file, oldest first. Values live only in the data
// file. (etcd's treeIndex, without generations: a tombstone entry ends a
// life.)
//
// Concurrency: the committer (one at a time, see Store.submit) is the only writer. It reads without the
// lock and writes under mu; readers hold mu.RLock. mu is a leaf lock: nothing
// that can block (the data file in particular) is touched while holding it.
type index struct {
	mu   sync.RWMutex
	tree *btree.BTreeG[*keyIndex]
}

// keyIndex is the history of one key.
type keyIndex struct {
	key  string
	revs []indexRev // ascending
}

// indexRev is one record of a key: its revision and whether it is a tombstone.
type indexRev struct {
	main int64
	sub  int32
	tomb bool
}

func (r indexRev) rev() revision { return revision{main: r.main, sub: r.sub} }

func newIndex() *index {
	return &index{tree: btree.NewG(32, func(a, b *keyIndex) bool { return a.key < b.key })}
}

func (ix *index) get(key string) *keyIndex {
	ki, _ := ix.tree.Get(&keyIndex{key: key})
	return ki
}

// live returns the latest record of ki if it is not a tombstone.
func (ki *keyIndex) live() (indexRev, bool) {
	if ki == nil || len(ki.revs) == 0 {
		return indexRev{}, false
	}
	last := ki.revs[len(ki.revs)-1]
	return last, !last.tomb
}

// at returns the record that holds ki's state at rev, if the key was live then.
func (ki *keyIndex) at(rev int64) (indexRev, bool) {
	i := sort.Search(len(ki.revs), func(i int) bool { return ki.revs[i].main > rev }) - 1
	if i < 0 || ki.revs[i].tomb {
		return indexRev{}, false
	}
	return ki.revs[i], true
}

// add appends r to key's history. The caller holds mu (or runs before the
// store is shared).
func (ix *index) add(key string, r indexRev) {
	if ki := ix.get(key); ki != nil {
		ki.revs = append(ki.revs, r)
		return
	}
	ix.tree.ReplaceOrInsert(&keyIndex{key: key, revs: []indexRev{r}})
}

// unadd removes the last entry of key's history (the undo of add). The
// caller holds mu.
func (ix *index) unadd(key string) {
	ki := ix.get(key)
	if ki == nil || len(ki.revs) == 0 {
		return
	}
	ki.revs = ki.revs[:len(ki.revs)-1]
	if len(ki.revs) == 0 {
		ix.tree.Delete(ki)
	}
}

// ascend calls fn for every key in the range (key, rangeEnd) denotes, in key
// order, until fn returns false.
func (ix *index) ascend(key, rangeEnd string, fn func(*keyIndex) bool) {
	if emptyRange(key, rangeEnd) {
		return
	}
	if rangeEnd == "" {
		if ki := ix.get(key); ki != nil {
			fn(ki)
		}
		return
	}
	ix.tree.AscendGreaterOrEqual(&keyIndex{key: key}, func(ki *keyIndex) bool {
		if rangeEnd != "\x00" && ki.key >= rangeEnd {
			return false
		}
		return fn(ki)
	})
}

// rangeAt collects what a range read at rev returns: the records of the live
// keys up to the limit, the count of all live keys, and whether the limit cut
// the list short (see [RangeRequest]).
func (ix *index) rangeAt(r RangeRequest, rev int64) (refs []revision, count int64, more bool) {
	ix.ascend(r.Key, r.RangeEnd, func(ki *keyIndex) bool {
		ir, ok := ki.at(rev)
		if !ok {
			return true
		}
		count++
		if r.CountOnly {
			return true
		}
		if r.Limit > 0 && int64(len(refs)) == r.Limit {
			more = true
			return true
		}
		refs = append(refs, ir.rev())
		return true
	})
	return refs, count, more
}

// compact drops what a compaction at c makes unreachable: for every key, the
// records older than its state at c, and that state too when it is a
// tombstone older than c. A tombstone exactly at c is kept, so that a watch
// from c still sees the DELETE at c (etcd#18089). Keys left with no record
// leave the index. It returns the set of records at or below c that remain:
// the physical compaction deletes every other record at or below c.
// The caller holds mu.
func (ix *index) compact(c int64) map[revision]struct{} {
	keep := make(map[revision]struct{})
	var empty []*keyIndex
	ix.tree.Ascend(func(ki *keyIndex) bool {
		i := sort.Search(len(ki.revs), func(i int) bool { return ki.revs[i].main > c }) - 1
		if i < 0 {
			return true // every record is above c
		}
		if ki.revs[i].tomb && ki.revs[i].main < c {
			i++ // the key was dead at c: nothing at or below c is needed
		} else {
			keep[ki.revs[i].rev()] = struct{}{}
		}
		if i > 0 {
			ki.revs = append(ki.revs[:0:0], ki.revs[i:]...)
		}
		if len(ki.revs) == 0 {
			empty = append(empty, ki)
		}
		return true
	})
	for _, ki := range empty {
		ix.tree.Delete(ki)
	}
	return keep
}
