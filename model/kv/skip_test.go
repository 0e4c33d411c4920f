package kv

import "testing"

// Skip advances the revision without a write (docs/SPEC.md §2.1, and its
// RevisionGaps allowance in §9): the next write takes the revision after it,
// reads see the same keys, the history's head follows, and a skip to the
// past changes nothing.
func TestSkip(t *testing.T) {
	s, _ := Step(State{}, Request{Put: &PutRequest{Key: "a", Value: "1"}})
	if got := s.Skip(1); !Equal(got, s) || got.Revision() != 2 {
		t.Fatalf("a skip to the past changed the state: revision %d", got.Revision())
	}
	g := s.Skip(5)
	if g.Revision() != 5 || Equal(g, s) || g.Hash() == s.Hash() {
		t.Fatalf("after Skip(5): revision %d, equal to the original %v", g.Revision(), Equal(g, s))
	}
	_, r := Step(g, Request{Range: &RangeRequest{Key: "a"}})
	if r.Revision != 5 || len(r.Range.KVs) != 1 || r.Range.KVs[0].ModRevision != 2 {
		t.Fatalf("read after the skip: %+v", r)
	}
	g, w := Step(g, Request{Put: &PutRequest{Key: "a", Value: "2"}})
	if w.Revision != 6 || g.Revision() != 6 {
		t.Fatalf("the write after the skip got revision %d", w.Revision)
	}
	if kv, _ := g.Get("a", 0); kv.Version != 2 || kv.CreateRevision != 2 || kv.ModRevision != 6 {
		t.Fatalf("key after the skip: %+v", kv)
	}
	h := g.History()
	if h.Len() != 2 || h.Head() != 6 {
		t.Fatalf("history: %d commits, head %d", h.Len(), h.Head())
	}
	if _, ok := h.Commit(4); ok {
		t.Fatal("a skipped revision holds a commit")
	}
	// The head of a history follows a skip past its last commit.
	h = g.Skip(9).History()
	if h.Head() != 9 || h.Len() != 2 {
		t.Fatalf("history after a trailing skip: %d commits, head %d", h.Len(), h.Head())
	}
	if err := h.Append(Commit{Revision: 9, Events: []Event{{Type: Put, KV: KeyValue{Key: "b", ModRevision: 9}}}}); err == nil {
		t.Fatal("a commit at a skipped revision was accepted")
	}
	var hh History
	hh.Skip(3)
	if hh.Head() != 3 {
		t.Fatalf("empty history after Skip(3): head %d", hh.Head())
	}
}
