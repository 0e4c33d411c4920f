package linearizability

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/watchspec/watchspec/model/kv"
)

// Output is what a client learnt from one operation: its response, or —
// when the outcome is unknown — possibly the revision its write is known to
// have been committed at.
type Output struct {
	// Response is nil when the outcome is unknown.
	Response *kv.Response
	// Pinned, for an unknown outcome, is the revision the operation's write
	// was seen committed at (a watch delivered one of its unique values);
	// 0 when nothing is known.
	Pinned int64
	// NotAt, for an unknown outcome, holds revisions the operation cannot
	// have created: watches delivered other events there. It says nothing
	// about an operation that creates no revision (a compaction).
	NotAt map[int64]bool
	// AnyRevision says the Response's header revision is not known and any
	// is accepted: the server's revocation of a lease that a client
	// acknowledged, whose revision the checker does not learn (see
	// serverLeaseOps). Everything else of the response is compared.
	AnyRevision bool
}

// States is a porcupine state: the set of model states the store may be in,
// kept sorted by hash and free of duplicates. An operation of unknown outcome
// forks a state (applied, or not); a later response filters the set.
type States []kv.State

func newStates(ss []kv.State) States {
	sort.Slice(ss, func(i, j int) bool { return ss[i].Hash() < ss[j].Hash() })
	out := ss[:0]
	for _, s := range ss {
		dup := false
		for k := len(out) - 1; k >= 0 && out[k].Hash() == s.Hash(); k-- {
			if kv.Equal(out[k], s) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// Step applies one operation to every state of the set and keeps the
// outcomes the output allows:
//
//   - a known response: the states whose model response equals it
//     (kv.SameResponse: same header revision, same error text, same contents;
//     any header revision when AnyRevision is set);
//   - an unknown outcome pinned at revision r: the states in which the
//     request wrote and its write became revision r;
//   - an unknown outcome: every state unchanged, and every state with the
//     request applied (if the model accepts it, and the revision it would
//     create is not one the output rules out).
//
// It is pure: the input states are not modified. It checks for full
// conformance; a profile's allowances relax it (see [Profile]).
func Step(states States, req kv.Request, out Output) States {
	return allow{}.step(states, req, out)
}

// step is Step under the allowances. With RevisionGaps, a response whose
// revision is above a state's is also tried from that state advanced
// (kv.State.Skip) to just below it — for a write — or to it — for a read —
// and an unknown write pinned at revision r from the state advanced to
// r − 1.
func (a allow) step(states States, req kv.Request, out Output) States {
	next := make([]kv.State, 0, len(states)+1)
	for _, s0 := range states {
		from := []kv.State{s0}
		if a.gaps {
			switch {
			case out.Response != nil && out.Response.Err == nil && out.Response.Revision > s0.Revision():
				if r := out.Response.Revision; r-1 > s0.Revision() {
					from = append(from, s0.Skip(r-1), s0.Skip(r))
				} else {
					from = append(from, s0.Skip(r))
				}
			case out.Response == nil && out.Pinned-1 > s0.Revision():
				from = []kv.State{s0.Skip(out.Pinned - 1)}
			}
		}
		for _, s := range from {
			applied, resp := a.modelStep(s, req)
			fits := a.views.fits(s, applied)
			switch {
			case out.Response != nil:
				rec := *out.Response
				if out.AnyRevision {
					rec.Revision = resp.Revision
				}
				if fits && a.same(req, resp, rec) {
					next = append(next, applied)
				}
			case out.Pinned > 0:
				if fits && resp.Err == nil && applied.Revision() == out.Pinned && applied.Revision() > s.Revision() {
					next = append(next, applied)
				}
			default:
				// NotAt rules out revisions the operation would create; one
				// that creates none (a compaction, a delete of nothing) is
				// not constrained by what watches saw.
				next = append(next, s)
				if fits && resp.Err == nil && (applied.Revision() == s.Revision() || !out.NotAt[applied.Revision()]) {
					next = append(next, applied)
				}
			}
		}
	}
	return newStates(next)
}

// hash combines the hashes of a set's states (sorted, so order-free).
func (ss States) hash() uint64 {
	h := uint64(len(ss))
	for _, s := range ss {
		h = h*0x9e3779b97f4a7c15 ^ s.Hash()
	}
	return h
}

func (ss States) equal(o States) bool {
	if len(ss) != len(o) {
		return false
	}
	for i := range ss {
		if !kv.Equal(ss[i], o[i]) {
			return false
		}
	}
	return true
}

// NewModel returns the porcupine model of an etcd-style store, built on the
// model's kv.Step, starting from the given states (a fresh store when none
// are given). Inputs are kv.Request values and outputs [Output] values.
//
// # Why there is no Partition function
//
// porcupine can check keys independently when a history is linearizable iff
// each key's sub-history is. That does not hold here: every response carries
// the store-wide revision, so an operation on one key observes how many
// writes all other keys received. Splitting by key would accept histories
// whose revisions no single order explains. The model therefore checks the
// whole history at once; [States.hash] keeps porcupine's cache cheap, and
// [Check] first tries the order the revisions dictate, so that porcupine
// searches only histories that order does not explain.
func NewModel(init ...kv.State) porcupine.Model {
	return allow{}.model(init...)
}

// model is NewModel under the allowances.
func (a allow) model(init ...kv.State) porcupine.Model {
	if len(init) == 0 {
		init = []kv.State{{}}
	}
	start := newStates(append([]kv.State(nil), init...))
	return porcupine.Model{
		Init: func() any { return start },
		Step: func(state, input, output any) (bool, any) {
			next := a.step(state.(States), input.(kv.Request), output.(Output))
			return len(next) > 0, next
		},
		Equal: func(a, b any) bool { return a.(States).equal(b.(States)) },
		Hash:  func(s any) uint64 { return s.(States).hash() },
		DescribeOperation: func(input, output any) string {
			return describeOp(input.(kv.Request), output.(Output))
		},
		DescribeState: func(s any) string { return describeStates(s.(States)) },
	}
}

func describeStates(ss States) string {
	var parts []string
	for i, s := range ss {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("…and %d more states", len(ss)-3))
			break
		}
		parts = append(parts, fmt.Sprintf("revision %d, compacted at %d", s.Revision(), s.CompactRevision()))
	}
	return strings.Join(parts, " | ")
}
