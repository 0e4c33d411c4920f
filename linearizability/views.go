package linearizability

import (
	"github.com/watchspec/watchspec/model/kv"
	"github.com/watchspec/watchspec/model/watch"
	"github.com/watchspec/watchspec/traces"
)

// What the watches saw chooses among linearizations. A write of unknown
// outcome that no watch pinned (see unknown.go) leaves the linearization a
// choice wherever a revision no known write created must be filled: any
// unknown write the reads allow may have created it. The checker then
// validates every watch against the history of the linearization it found
// (watches.go), so a wrong choice there is blamed on the watches: an
// unknown delete of a/1 really created revision 4, an unknown put of b/x is
// chosen instead, and a watch of a/ that delivered the delete of a/ at
// revision 5 with only a/2 is said to have lost a/1's event (§3.4 Atomic) —
// a false alarm against a correct server. The conformance workload under
// the legal adversary produced exactly that (seed 334 of issue 14: its
// collector watch, cancelled by a compaction, left revisions unobserved,
// and connection resets left writes of unknown outcome).
//
// So the linearization first takes every watch as correct: a commit is
// kept only if, for every watch, the commit's events that the watch's
// range and filters select are exactly those the watch delivered at that
// revision (none, for a revision strictly between two the watch delivered
// one after the other). Only when no linearization agrees with every watch
// — a watch is then wrong, or the history is not linearizable — is the
// search repeated without them, as before, and the watches are validated
// against that history: a watch that broke its guarantees is still named
// by the property it broke, and a history that no order explains is still
// not linearizable. Nothing here can turn a correct verdict into a FAIL:
// it only removes linearizations that some watch contradicts while another
// agrees with all of them.

// watchEvidence switches the watches' evidence on; tests switch it off to
// show the false alarms it prevents.
var watchEvidence = true

// watchViews is the evidence: per revision, what each watch that delivered
// it saw; and per watch, the revisions it delivered in order.
type watchViews struct {
	at map[int64][]revView
	// quiet indexes the watches' silent stretches by block of revisions:
	// quiet[r/quietBlock] lists those that overlap the block (each is
	// listed in every block it overlaps), so that a commit looks at the
	// few watches silent around its revision, not at every watch.
	quiet map[int64][]quietSpan
}

// quietSpan is a stretch of revisions (from, to) — both excluded — in which
// a watch delivered nothing: it delivered from and then to.
type quietSpan struct {
	req      *watch.Request
	from, to int64
}

// quietBlock is the size of the blocks of revisions quiet is indexed by.
const quietBlock = 256

// revView is what one watch delivered at one revision.
type revView struct {
	req *watch.Request
	evs map[string]kv.Event // by key
}

// newWatchViews collects the evidence of t's watches; nil when no watch
// delivered an event. A watch's revision whose events came in more than one
// response (a broken §3.4) says nothing of that revision's events, and a
// watch's deliveries end the span at the first revision that does not
// increase (a broken §3.1 or §3.2).
func newWatchViews(t *traces.Trace) *watchViews {
	v := &watchViews{at: map[int64][]revView{}, quiet: map[int64][]quietSpan{}}
	for _, w := range t.Watches {
		// revs are the watch's delivered revisions, increasing: between two
		// consecutive ones it delivered nothing, so a correct watch had
		// nothing to deliver there.
		var revs []int64
		ordered := true
		views := map[int64]map[string]kv.Event{}
		split := map[int64]bool{}
		for _, r := range w.Responses {
			seen := map[int64]bool{}
			for _, e := range r.Response.Events {
				rev := e.KV.ModRevision
				if ordered {
					switch n := len(revs); {
					case n == 0 || revs[n-1] < rev:
						revs = append(revs, rev)
					case revs[n-1] > rev:
						ordered = false
					}
				}
				if views[rev] != nil && !seen[rev] {
					split[rev] = true // delivered again, or in two responses
				}
				seen[rev] = true
				if views[rev] == nil {
					views[rev] = map[string]kv.Event{}
				}
				views[rev][e.KV.Key] = e
			}
		}
		for rev, evs := range views {
			if !split[rev] {
				v.at[rev] = append(v.at[rev], revView{req: &w.Request, evs: evs})
			}
		}
		for i := 1; i < len(revs); i++ {
			q := quietSpan{req: &w.Request, from: revs[i-1], to: revs[i]}
			if q.to-q.from < 2 {
				continue // nothing between them
			}
			for b := (q.from + 1) / quietBlock; b <= (q.to-1)/quietBlock; b++ {
				v.quiet[b] = append(v.quiet[b], q)
			}
		}
	}
	if len(v.at) == 0 && len(v.quiet) == 0 {
		return nil
	}
	return v
}

// fits reports whether the step from s to next agrees with every watch:
// true when it created no revision, or when the commit it made shows each
// watch that delivered its revision exactly the events it delivered, and
// no event to a watch that delivered revisions on both sides of it but not
// it. A nil watchViews agrees with everything.
func (v *watchViews) fits(s, next kv.State) bool {
	if v == nil || next.Revision() <= s.Revision() {
		return true
	}
	c, ok := next.LastCommit()
	if !ok || c.Revision != next.Revision() {
		return true
	}
	for _, rv := range v.at[c.Revision] {
		n := 0
		for _, e := range c.Events {
			if !rv.req.Matches(e) {
				continue
			}
			got, ok := rv.evs[e.KV.Key]
			if !ok || got.Type != e.Type || e.Type == kv.Put && got.KV.Value != e.KV.Value {
				return false
			}
			n++
		}
		if n != len(rv.evs) {
			return false
		}
	}
	for _, q := range v.quiet[c.Revision/quietBlock] {
		if c.Revision <= q.from || c.Revision >= q.to {
			continue
		}
		for _, e := range c.Events {
			if q.req.Matches(e) {
				return false
			}
		}
	}
	return true
}
