package watchhub

import "github.com/watchspec/watchspec/impl/mvcc"

// Perturber makes, for one stream, the choices that docs/SPEC.md leaves a
// server: whether a live watch falls behind although its stream has room,
// and when watches held back catch up. A server's legal adversary
// (impl/server's Options.Adversary) sets one on a stream with
// [Stream.Perturb]; without one, the hub makes the usual choices and pays
// one nil check per watch and commit.
//
// The hub calls both methods with its lock held: they must be quick and
// must not call back into the hub or the stream.
type Perturber interface {
	// Hold is asked when the commit at rev has events for the live
	// (synced) watch watchID of the stream. True holds the watch back: it
	// falls behind from rev exactly as when its stream is full (a victim,
	// docs/SPEC.md §3.13) and is caught up later — many revisions in one
	// response, or a cancel with CompactRevision if a compaction overtook
	// it meanwhile (§3.11).
	Hold(watchID, rev int64) bool
	// Release is asked before each later commit rev is delivered, while
	// the stream has watches held back; true lets them catch up.
	Release(rev int64) bool
}

// Perturb sets the stream's [Perturber] (nil: none). Set it before the
// stream's first watch.
func (s *Stream) Perturb(p Perturber) {
	h := s.hub
	h.mu.Lock()
	s.pert = p
	h.mu.Unlock()
}

// CatchUp lets the watches of the stream that its [Perturber] held back
// catch up now (the hub otherwise waits for Perturber.Release to say so).
func (s *Stream) CatchUp() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, s)
	if !s.gone && len(s.behind.ws) > 0 {
		h.markReady(s)
	}
}

// hold makes the synced watcher w fall behind from revision rev, as Notify
// does when its stream is full, without asking the reader for room: the
// stream is caught up when its Perturber releases it. The caller holds h.mu.
func (h *Hub) hold(w *watcher, rev int64) {
	h.synced.remove(w)
	w.state, w.next = stVictim, rev
	w.s.behind.add(w)
	if h.held == nil {
		h.held = make(map[*Stream]struct{})
	}
	h.held[w.s] = struct{}{}
}

// release asks the Perturbers of the streams with watches held back whether
// they may catch up before the commit rev is delivered. The caller holds
// h.mu.
func (h *Hub) release(rev int64) {
	for s := range h.held {
		if s.gone {
			delete(h.held, s)
			continue
		}
		if s.pert == nil || s.pert.Release(rev) {
			delete(h.held, s)
			if len(s.behind.ws) > 0 {
				h.markReady(s)
			}
		}
	}
}

// SplitAt cuts a response of events in two: the first n events, and the
// rest, each with r's header; the events stay shared as they were
// ([Response.Shared]). It is for a server that sends a response in several
// (docs/SPEC.md §3.4: cut only where the revision changes). n must be
// between 1 and len(r.Events)-1.
func (r Response) SplitAt(n int) (Response, Response) {
	a, b := r, r
	a.Events = r.Events[:n:n]
	b.Events = r.Events[n:]
	b.at = r.at + int32(n)
	return a, b
}

// Join returns one response with the events of r and then of next, two
// responses of the same watch that a stream delivers one after the other,
// and next's header (docs/SPEC.md §3.13: catch-up many revisions at once).
// The events stay shared when next's continue r's in one batch; otherwise
// the joined response has a copy of its own.
func (r Response) Join(next Response) Response {
	out := next
	if r.src != nil && r.src == next.src && int(next.at) == int(r.at)+len(r.Events) {
		out.Events = r.src.events[r.at : int(r.at)+len(r.Events)+len(next.Events) : int(r.at)+len(r.Events)+len(next.Events)]
		out.at = r.at
		return out
	}
	evs := make([]mvcc.Event, 0, len(r.Events)+len(next.Events))
	out.Events = append(append(evs, r.Events...), next.Events...)
	out.src, out.at = nil, 0
	return out
}
