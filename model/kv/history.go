package kv

import (
	"fmt"
	"sort"
)

// History is the committed history of a store as watches see it: the commit
// of every write revision, in revision order, and the compactions applied so
// far, in the order they were applied.
//
// A History grows: drivers append commits and compactions as they happen,
// and checkers that hold a *History see them at their next call. Revisions
// must increase but need not be consecutive (some etcd-compatible stores skip
// revisions). The zero History is empty, at revision 1, never compacted.
//
// A History is not safe for concurrent use.
type History struct {
	base int64 // the revision before the first commit (0 means 1)
	// baseCompact is the compaction in force before the first commit, and
	// baseCompactKnown whether it is exactly that (else at most that).
	baseCompact      int64
	baseCompactKnown bool
	hasBaseCompact   bool
	head             int64 // a head beyond the last commit, recorded by Skip (0: none)
	commits          []Commit
	compactions      []int64
	puts             map[putKey][]int64 // lazily built index for FindPut
	indexed          int                // commits covered by puts
}

type putKey struct{ key, value string }

// NewHistory returns a history holding the given commits, which must be in
// increasing revision order (see [History.Append]).
func NewHistory(commits ...Commit) (*History, error) {
	h := &History{}
	for _, c := range commits {
		if err := h.Append(c); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Append adds the commit of the next write revision. Its revision must exceed
// the head, it must hold at least one event, and every event's ModRevision
// must be the commit's revision. The commit is kept, not copied.
func (h *History) Append(c Commit) error {
	if c.Revision <= h.Head() {
		return fmt.Errorf("commit at revision %d does not follow the head revision %d", c.Revision, h.Head())
	}
	if len(c.Events) == 0 {
		return fmt.Errorf("commit at revision %d has no events", c.Revision)
	}
	for _, e := range c.Events {
		if e.KV.ModRevision != c.Revision {
			return fmt.Errorf("commit at revision %d holds an event on %q with ModRevision %d", c.Revision, e.KV.Key, e.KV.ModRevision)
		}
	}
	h.commits = append(h.commits, c)
	return nil
}

// Compact records a compaction at rev. Compactions must increase, and
// exceed a known base compaction.
func (h *History) Compact(rev int64) error {
	if rev <= h.CompactRevision() {
		return fmt.Errorf("compaction at revision %d does not follow the compact revision %d", rev, h.CompactRevision())
	}
	h.compactions = append(h.compactions, rev)
	return nil
}

// Head returns the highest committed revision: the base revision (1 unless
// set, see [History.SetBase]) for an empty history, and at least the
// revision a [History.Skip] reached.
func (h *History) Head() int64 {
	if len(h.commits) == 0 {
		return max(h.base, 1, h.head)
	}
	return max(h.commits[len(h.commits)-1].Revision, h.head)
}

// Skip records that the store's revision reached `to` without a commit: the
// revisions after the head, up to `to`, hold no event (a store that skips
// revisions, see [State.Skip]). Head returns at least `to` afterwards, and a
// later commit must be above it. A `to` at or below the head changes nothing.
func (h *History) Skip(to int64) {
	if to > h.Head() {
		h.head = to
	}
}

// Base returns the revision the history starts from (1 for a fresh store).
func (h *History) Base() int64 { return max(h.base, 1) }

// SetBase sets the revision an empty history starts from, for a store that
// was not fresh when the history began (see [Start]).
func (h *History) SetBase(rev int64) error {
	if len(h.commits) > 0 {
		return fmt.Errorf("the base revision of a history with commits cannot change")
	}
	h.base = rev
	return nil
}

// SetBaseCompaction records the compaction in force before the history
// began, for a store that was not fresh (see [StartCompacted]): exactly rev
// when known, otherwise some revision at or below rev (a recording that did
// not say). A negative rev means never compacted. It must be called before
// any compaction is recorded.
func (h *History) SetBaseCompaction(rev int64, known bool) error {
	if len(h.compactions) > 0 {
		return fmt.Errorf("the base compaction of a history with compactions cannot change")
	}
	if rev < 0 {
		h.hasBaseCompact = false
		return nil
	}
	h.baseCompact, h.baseCompactKnown, h.hasBaseCompact = rev, known, true
	return nil
}

// CompactRevision returns the latest compaction revision, or -1 when none
// was recorded. A base compaction that is not known exactly counts as its
// upper bound.
func (h *History) CompactRevision() int64 {
	if len(h.compactions) == 0 {
		if h.hasBaseCompact {
			return h.baseCompact
		}
		return -1
	}
	return h.compactions[len(h.compactions)-1]
}

// Compactions returns the recorded compaction revisions in order. The slice
// is shared: do not modify it.
func (h *History) Compactions() []int64 { return h.compactions }

// WasCompactedAt reports whether a compaction at exactly rev was recorded
// — or may have been in force before the history began: the base
// compaction, or any revision up to it when it is not known exactly.
func (h *History) WasCompactedAt(rev int64) bool {
	if h.hasBaseCompact && (rev == h.baseCompact || (!h.baseCompactKnown && rev >= 0 && rev < h.baseCompact)) {
		return true
	}
	i := sort.Search(len(h.compactions), func(i int) bool { return h.compactions[i] >= rev })
	return i < len(h.compactions) && h.compactions[i] == rev
}

// Len returns the number of commits.
func (h *History) Len() int { return len(h.commits) }

// Commits returns every commit in revision order. The slice is shared: do
// not modify it.
func (h *History) Commits() []Commit { return h.commits }

// Commit returns the commit at rev, if rev is a committed write revision.
func (h *History) Commit(rev int64) (Commit, bool) {
	i := h.index(rev)
	if i < len(h.commits) && h.commits[i].Revision == rev {
		return h.commits[i], true
	}
	return Commit{}, false
}

// Between returns the commits with from ≤ Revision ≤ to, in order. The slice
// is shared: do not modify it.
func (h *History) Between(from, to int64) []Commit {
	if from > to {
		return nil
	}
	return h.commits[h.index(from):h.index(to+1)]
}

// index returns the position of the first commit with Revision ≥ rev.
func (h *History) index(rev int64) int {
	return sort.Search(len(h.commits), func(i int) bool { return h.commits[i].Revision >= rev })
}

// FindPut returns the revisions at which key was written with value, in
// order. When every written value is unique it identifies the write.
func (h *History) FindPut(key, value string) []int64 {
	if h.puts == nil {
		h.puts = make(map[putKey][]int64)
	}
	for ; h.indexed < len(h.commits); h.indexed++ {
		c := h.commits[h.indexed]
		for _, e := range c.Events {
			if e.Type == Put {
				k := putKey{e.KV.Key, e.KV.Value}
				h.puts[k] = append(h.puts[k], c.Revision)
			}
		}
	}
	return h.puts[putKey{key, value}]
}
