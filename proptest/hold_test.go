package proptest

import (
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/store"
)

// holdBack is a stream's watchhub.Perturber in the state machine, driven by
// the Hold and CatchUp actions as impl/server's legal adversary drives its
// own (advHold): armed, it holds the stream's live watches back from the
// next revision with events for one of them — for some revisions, or until
// a compaction passes that revision — and CatchUp lets them go at any time.
// The hub calls it with its lock held, from the committer's goroutine when
// the hub is not manual: hence mu.
type holdBack struct {
	compactRev func() int64
	cov        *coverage

	mu          sync.Mutex
	armed       bool  // hold from the next revision asked about
	pastCompact bool  // the armed hold lasts until a compaction passes it
	revs        int64 // or this many revisions
	holding     bool
	from, until int64
}

func (p *holdBack) Hold(_, rev int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holding {
		return true
	}
	if !p.armed {
		return false
	}
	p.armed, p.holding, p.from, p.until = false, true, rev, rev+p.revs
	past := p.pastCompact
	p.cov.add(func(c *coverage) {
		c.holds++
		if past {
			c.holdsPastCompaction++
		}
	})
	return true
}

func (p *holdBack) Release(rev int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.holding {
		return true
	}
	if p.pastCompact && p.compactRev() > p.from || !p.pastCompact && rev >= p.until {
		p.holding = false
		p.cov.add(func(c *coverage) { c.holdReleases++ })
		return true
	}
	return false
}

// end disarms p and ends its hold, if any: the stream's watches catch up.
func (p *holdBack) end(ws *store.WatchStream) bool {
	p.mu.Lock()
	was := p.holding
	p.armed, p.holding = false, false
	p.mu.Unlock()
	ws.CatchUp()
	return was
}

// Hold arms a stream's Perturber: its live watches are held back from the
// next revision with events for one of them.
func (m *machine) Hold(t *rapid.T) {
	s := m.stream(t, true)
	pastCompact := oneIn(t, 3, "holdPastCompaction")
	revs := between(t, 1, 6, "holdRevisions")
	s.hold.mu.Lock()
	s.hold.armed, s.hold.pastCompact, s.hold.revs = true, pastCompact, revs
	s.hold.mu.Unlock()
}

// CatchUp ends a stream's hold, as the adversary's timer does
// (Stream.CatchUp).
func (m *machine) CatchUp(t *rapid.T) {
	s := m.stream(t, false)
	if s == nil {
		t.Skip("no stream")
	}
	if s.hold.end(s.ws) {
		m.cov.add(func(c *coverage) { c.holdCatchUps++ })
	}
}

// TestStoreMatchesModelWithHolds is TestStoreMatchesModel with every
// stream's watches held back and let go as the legal adversary does
// (docs/ADVERSARY.md; SPEC §3.13 Slow watchers, §3.11 CompactedCancel):
// held watches fall behind although their streams have room, and catch up
// from the recent commits or the store's history — whole revisions per
// response (§3.4 Atomic), nothing skipped or repeated — or are cancelled
// with CompactRevision when a compaction overtook them. (Issue 14: the
// search for seed 334's §3.4 failure.)
func TestStoreMatchesModelWithHolds(t *testing.T) { runStateMachine(t, true) }
