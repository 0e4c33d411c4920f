package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/watchspec/watchspec/impl/store"
	"github.com/watchspec/watchspec/impl/watchhub"
)

// Adversary makes a server take, wherever docs/SPEC.md leaves it a choice
// in what a watch stream delivers, a legal but unusual option, drawn from a
// seed (issue 14). The store stays exact: every read and write is
// answered as without it; only when and how watch responses, progress
// notifications and stream ends reach the client changes. Every choice is
// logged ([Adversary.Report]) so that a run can be explained and its seed
// replayed. Set it in [Options.Adversary]; the public package
// github.com/watchspec/watchspec/adversary starts such a server in one
// call, and docs/ADVERSARY.md says how a client author uses it.
//
// The draws are deterministic from the seed: each watch stream, numbered in
// the order the server opened it, draws from its own generators, so the
// same seed makes the same choices at the same points of the same stream.
// Which points a run reaches depends on the clients' timing, which the
// server does not control.
//
// An Adversary serves one server at a time; its report accumulates.
type Adversary struct {
	seed int64
	p    advParams

	// Log, when set before the server starts, is called with every choice
	// as it is made (from the server's goroutines, one at a time).
	Log func(Choice)

	streams atomic.Int64
	seq     atomic.Int64

	mu       sync.Mutex
	counts   [numChoiceKinds]int64
	log      []Choice
	unlogged int64
}

// ChoiceKind names a kind of choice the adversary makes.
type ChoiceKind int

// The kinds of choice, each legal by the SPEC section named.
const (
	// ChoiceConfig: the run's settings drawn from the seed (the stream
	// queue's capacity, the progress interval), logged once.
	ChoiceConfig ChoiceKind = iota
	// ChoiceSplit: a response of several revisions sent as several
	// responses, cut only where the revision changes (§3.4 Atomic, §3.13).
	ChoiceSplit
	// ChoiceJoin: consecutive responses of one watch sent as one (§3.13:
	// many revisions per response).
	ChoiceJoin
	// ChoiceHold: a live watch held back as if its stream were full, then
	// caught up in one response (§3.13 Slow watchers; §6 No deadline).
	ChoiceHold
	// ChoiceHoldPastCompaction: a hold kept until a compaction overtakes
	// the watch, which is then cancelled with CompactRevision (§3.11).
	ChoiceHoldPastCompaction
	// ChoiceCompactedCancel: a watch cancelled with CompactRevision was
	// sent (§3.11), the outcome of a hold, a stall or a compacted start.
	ChoiceCompactedCancel
	// ChoiceStall: the stream's sender pauses, its queue fills and the hub
	// catches its watches up later (§3.13; §6 No deadline).
	ChoiceStall
	// ChoiceDropProgress: a periodic progress notification not sent (§6:
	// progress notifications may never come).
	ChoiceDropProgress
	// ChoiceDropProgressAnswer: a client's progress request never
	// answered (§6; etcd drops one when a watch is not synced).
	ChoiceDropProgressAnswer
	// ChoiceDelayProgressAnswer: a client's progress request answered
	// later, with the revision true then (§3.6 Bookmarkable).
	ChoiceDelayProgressAnswer
	// ChoiceReset: the watch stream ended with codes.Unavailable, which
	// clientv3 answers by resuming every watch of the stream after what it
	// delivered (§3.5 Resumable).
	ChoiceReset
	// ChoiceConnReset: the client's whole connection closed after a watch
	// response: every stream and call on it fails with codes.Unavailable.
	// clientv3 reconnects and resumes its watches after what they
	// delivered (§3.5 Resumable); a call in flight has an unknown outcome
	// (§1: a write whose answer was lost may or may not have happened).
	ChoiceConnReset
	// ChoiceFragment: a response of several events to a watch created with
	// fragment=true sent as consecutive fragments, cut between any two
	// events (even of one revision), each but the last with Fragment set.
	// etcd fragments only responses above its request size limit; nothing
	// in the API ties the cuts to a size, and clientv3 joins any fragments
	// before delivering (§3.4 Atomic holds at the client API, §6).
	ChoiceFragment

	numChoiceKinds
)

var choiceNames = [numChoiceKinds]string{
	"config", "split", "join", "hold", "hold-past-compaction", "compacted-cancel",
	"stall", "drop-progress", "drop-progress-answer", "delay-progress-answer", "reset", "conn-reset", "fragment",
}

var choiceSections = [numChoiceKinds]string{
	"", "§3.4, §3.13", "§3.13", "§3.13, §6", "§3.11", "§3.11",
	"§3.13, §6", "§6", "§6", "§3.6", "§3.5", "§3.5, §1", "§3.4, §6",
}

// String returns the kind's name, as in the report: "split", "hold", …
func (k ChoiceKind) String() string {
	if k < 0 || k >= numChoiceKinds {
		return fmt.Sprintf("ChoiceKind(%d)", int(k))
	}
	return choiceNames[k]
}

// Section returns the docs/SPEC.md sections that make the kind legal.
func (k ChoiceKind) Section() string {
	if k < 0 || k >= numChoiceKinds {
		return ""
	}
	return choiceSections[k]
}

// ChoiceKinds returns every kind of choice, in order.
func ChoiceKinds() []ChoiceKind {
	out := make([]ChoiceKind, numChoiceKinds)
	for i := range out {
		out[i] = ChoiceKind(i)
	}
	return out
}

// Choice is one choice the adversary made.
type Choice struct {
	// Seq numbers the choices of the adversary in the order they were made.
	Seq int64
	// Seed is the adversary's seed: Options.Adversary = NewAdversary(Seed)
	// makes the same draws again.
	Seed int64
	Kind ChoiceKind
	// Stream is the watch stream's number (1 for the first the server
	// opened); 0 for the run's settings.
	Stream int64
	// WatchID is the watch concerned, or -1 for the whole stream.
	WatchID int64
	// Revision is the revision concerned (a response's header, a commit),
	// or 0.
	Revision int64
	// Detail says what was done, for people.
	Detail string
}

// String formats the choice as one log line.
func (c Choice) String() string {
	return fmt.Sprintf("adversary seed=%d #%d %s stream=%d watch=%d rev=%d: %s",
		c.Seed, c.Seq, c.Kind, c.Stream, c.WatchID, c.Revision, c.Detail)
}

// AdversaryReport is what an adversary did.
type AdversaryReport struct {
	Seed int64
	// Counts holds how many choices of each kind were made, by kind name
	// (every kind present, 0 for those not made).
	Counts map[string]int64
	// Choices are the choices made, in order, the first MaxLoggedChoices.
	Choices []Choice
	// Unlogged counts the choices made after those.
	Unlogged int64
}

// MaxLoggedChoices bounds the choices an [AdversaryReport] keeps; the
// rest are counted.
const MaxLoggedChoices = 20000

// advParams are a run's probabilities and bounds, drawn from the seed so
// that seeds differ in what they stress.
type advParams struct {
	streamCapacity   int
	progressInterval time.Duration

	pSplit, pJoin           float64
	pHold, pHoldCompaction  float64
	holdRevs                int
	maxHold                 time.Duration
	pStall                  float64
	maxStall                time.Duration
	pDropProgress           float64
	pDropAnswer, pDelayAns  float64
	maxAnswerDelay          time.Duration
	pReset                  float64
	minResponsesBeforeReset int
	pConnReset              float64 // of the resets, the share that close the connection
	pFragment               float64 // of the responses of several events to a watch that asked for fragments
}

// NewAdversary returns an adversary whose choices are drawn from seed.
func NewAdversary(seed int64) *Adversary {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	between := func(lo, hi float64) float64 { return lo + rng.Float64()*(hi-lo) }
	p := advParams{
		streamCapacity:          4 + rng.IntN(29),
		progressInterval:        time.Duration(50+rng.IntN(450)) * time.Millisecond,
		pSplit:                  between(0.3, 1),
		pJoin:                   between(0.3, 1),
		pHold:                   between(0.01, 0.08),
		pHoldCompaction:         between(0.2, 0.6),
		holdRevs:                1 + rng.IntN(20),
		maxHold:                 time.Duration(50+rng.IntN(400)) * time.Millisecond,
		pStall:                  between(0.002, 0.02),
		maxStall:                time.Duration(20+rng.IntN(200)) * time.Millisecond,
		pDropProgress:           between(0.2, 0.8),
		pDropAnswer:             between(0.05, 0.25),
		pDelayAns:               between(0.2, 0.5),
		maxAnswerDelay:          time.Duration(10+rng.IntN(300)) * time.Millisecond,
		pReset:                  between(0.002, 0.01),
		minResponsesBeforeReset: 5 + rng.IntN(20),
		pConnReset:              between(0.2, 0.5),
		pFragment:               between(0.3, 1),
	}
	return &Adversary{seed: seed, p: p}
}

// Seed returns the adversary's seed.
func (a *Adversary) Seed() int64 { return a.seed }

// Report returns the counts of the choices made so far, by kind, and the
// log of them.
func (a *Adversary) Report() AdversaryReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := AdversaryReport{Seed: a.seed, Counts: make(map[string]int64, numChoiceKinds),
		Choices: append([]Choice(nil), a.log...), Unlogged: a.unlogged}
	for k, n := range a.counts {
		r.Counts[ChoiceKind(k).String()] = n
	}
	return r
}

// record logs one choice.
func (a *Adversary) record(kind ChoiceKind, stream, watchID, rev int64, format string, args ...any) {
	c := Choice{Seq: a.seq.Add(1), Seed: a.seed, Kind: kind, Stream: stream, WatchID: watchID, Revision: rev,
		Detail: fmt.Sprintf(format, args...)}
	a.mu.Lock()
	a.counts[kind]++
	if len(a.log) < MaxLoggedChoices {
		a.log = append(a.log, c)
	} else {
		a.unlogged++
	}
	log := a.Log
	if log != nil {
		log(c) // under a.mu: one at a time, in Seq order
	}
	a.mu.Unlock()
}

// storeOptions sets the hub's settings that Start leaves to the adversary:
// a small stream queue (so that a stall makes victims) and a short progress
// interval (so that there are progress notifications to drop).
func (a *Adversary) storeOptions(o *store.Options) {
	if o.Watch.StreamCapacity == 0 {
		o.Watch.StreamCapacity = a.p.streamCapacity
	}
	if o.Watch.ProgressInterval == 0 {
		o.Watch.ProgressInterval = a.p.progressInterval
	}
	a.record(ChoiceConfig, 0, -1, 0, "stream capacity %d, progress interval %v; p(split)=%.2f p(join)=%.2f p(hold)=%.3f of which past compaction %.2f, hold %d revisions or %v; p(stall)=%.3f up to %v; p(drop progress)=%.2f; progress answers dropped %.2f, delayed %.2f up to %v; p(reset)=%.4f after %d responses, of which the connection %.2f; p(fragment)=%.2f",
		o.Watch.StreamCapacity, o.Watch.ProgressInterval, a.p.pSplit, a.p.pJoin, a.p.pHold, a.p.pHoldCompaction,
		a.p.holdRevs, a.p.maxHold, a.p.pStall, a.p.maxStall, a.p.pDropProgress, a.p.pDropAnswer, a.p.pDelayAns,
		a.p.maxAnswerDelay, a.p.pReset, a.p.minResponsesBeforeReset, a.p.pConnReset, a.p.pFragment)
}

// errAdversaryReset ends a watch stream by the adversary's choice.
var errAdversaryReset = status.Error(codes.Unavailable, "watchspec adversary: watch stream reset (a legal choice, SPEC §3.5: resume each watch after the last revision it delivered)")

// advStream is the adversary of one watch stream: the send loop's and the
// receive loop's generators, and the hub's Perturber.
type advStream struct {
	a    *Adversary
	id   int64
	send *rand.Rand // send loop only
	recv *rand.Rand // receive loop only
	sent int        // send loop only: responses sent
	conn *rand.Rand // send loop only: whether a reset closes the connection
	frag *rand.Rand // send loop only: fragments (a generator of its own, so that
	// watches that ask for fragments leave every other draw of a seed as it was)
	hold *advHold
}

func (a *Adversary) newStream(ws *watchhub.Stream, compactRev func() int64) *advStream {
	id := a.streams.Add(1)
	pcg := func(i uint64) *rand.Rand { return rand.New(rand.NewPCG(uint64(a.seed), uint64(id)<<2|i)) }
	as := &advStream{a: a, id: id, send: pcg(0), recv: pcg(1), conn: pcg(3), frag: pcg(4)}
	as.hold = &advHold{as: as, rng: pcg(2), ws: ws, compactRev: compactRev}
	ws.Perturb(as.hold)
	return as
}

// stall returns how long the send loop pauses before its next response.
func (as *advStream) stall() time.Duration {
	p := &as.a.p
	if as.send.Float64() >= p.pStall {
		return 0
	}
	d := time.Duration(1 + as.send.Int64N(int64(p.maxStall)))
	as.a.record(ChoiceStall, as.id, -1, 0, "the sender pauses %v", d.Round(time.Millisecond))
	return d
}

// dropProgress reports whether a periodic progress notification is not sent.
func (as *advStream) dropProgress(r *watchhub.Response) bool {
	if as.send.Float64() >= as.a.p.pDropProgress {
		return false
	}
	as.a.record(ChoiceDropProgress, as.id, r.WatchID, r.Revision, "a periodic progress notification at %d not sent", r.Revision)
	return true
}

// join reports whether to try joining the response with the next one.
func (as *advStream) join() bool { return as.send.Float64() < as.a.p.pJoin }

// split returns where to cut a response of events (indices where the
// revision changes, in order), or nil.
func (as *advStream) split(r *watchhub.Response) []int {
	var bounds []int
	for i := 1; i < len(r.Events); i++ {
		if r.Events[i].KV.ModRevision != r.Events[i-1].KV.ModRevision {
			bounds = append(bounds, i)
		}
	}
	if len(bounds) == 0 || as.send.Float64() >= as.a.p.pSplit {
		return nil
	}
	var cuts []int
	for _, b := range bounds {
		if as.send.IntN(2) == 0 {
			cuts = append(cuts, b)
		}
	}
	if len(cuts) == 0 {
		cuts = append(cuts, bounds[as.send.IntN(len(bounds))])
	}
	as.a.record(ChoiceSplit, as.id, r.WatchID, r.Revision, "%d events of revisions %d..%d sent as %d responses",
		len(r.Events), r.Events[0].KV.ModRevision, r.Events[len(r.Events)-1].KV.ModRevision, len(cuts)+1)
	return cuts
}

// fragment returns where to cut a response of several events into
// fragments (event indices, in order), or nil to send it whole (or as
// etcd's size limit fragments it).
func (as *advStream) fragment(r *watchhub.Response) []int {
	if len(r.Events) < 2 || as.frag.Float64() >= as.a.p.pFragment {
		return nil
	}
	var cuts []int
	for i := 1; i < len(r.Events); i++ {
		if as.frag.IntN(2) == 0 {
			cuts = append(cuts, i)
		}
	}
	if len(cuts) == 0 {
		cuts = append(cuts, 1+as.frag.IntN(len(r.Events)-1))
	}
	as.a.record(ChoiceFragment, as.id, r.WatchID, r.Revision, "%d events of revisions %d..%d sent as %d fragments",
		len(r.Events), r.Events[0].KV.ModRevision, r.Events[len(r.Events)-1].KV.ModRevision, len(cuts)+1)
	return cuts
}

// resetKind is what the adversary ends after a response: nothing, the watch
// stream, or the client's whole connection.
type resetKind int

const (
	noReset resetKind = iota
	streamReset
	connReset
)

// reset decides whether the stream, or the client's connection, ends after
// the response just sent.
func (as *advStream) reset() resetKind {
	as.sent++
	if as.sent < as.a.p.minResponsesBeforeReset || as.send.Float64() >= as.a.p.pReset {
		return noReset
	}
	if as.conn.Float64() < as.a.p.pConnReset {
		as.a.record(ChoiceConnReset, as.id, -1, 0, "the client's connection is closed after %d responses of this stream", as.sent)
		return connReset
	}
	as.a.record(ChoiceReset, as.id, -1, 0, "the stream ends with codes.Unavailable after %d responses", as.sent)
	return streamReset
}

// progressRequest decides what becomes of a client's progress request:
// answered now (0, false), later (d, false) or never (0, true).
func (as *advStream) progressRequest() (time.Duration, bool) {
	p := &as.a.p
	x := as.recv.Float64()
	switch {
	case x < p.pDropAnswer:
		as.a.record(ChoiceDropProgressAnswer, as.id, -1, 0, "a progress request not answered")
		return 0, true
	case x < p.pDropAnswer+p.pDelayAns:
		d := time.Duration(1 + as.recv.Int64N(int64(p.maxAnswerDelay)))
		as.a.record(ChoiceDelayProgressAnswer, as.id, -1, 0, "a progress request passed on to the hub after %v", d.Round(time.Millisecond))
		return d, false
	}
	return 0, false
}

// advHold is the hub's Perturber for one stream: it holds the stream's live
// watches back, for some revisions or until a compaction overtakes them.
type advHold struct {
	as         *advStream
	rng        *rand.Rand // under the hub's lock
	ws         *watchhub.Stream
	compactRev func() int64

	mu         sync.Mutex
	holding    bool
	gen        int
	untilRev   int64 // release before delivering this revision, or
	pastCompat int64 // release once the compaction is above this revision (when > 0)
}

// Hold implements watchhub.Perturber: once a stream holds a watch back,
// every watch of it that has events is held until the release.
func (h *advHold) Hold(watchID, rev int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding {
		return true
	}
	p := &h.as.a.p
	if h.rng.Float64() >= p.pHold {
		return false
	}
	h.holding = true
	h.gen++
	bound := p.maxHold
	if h.rng.Float64() < p.pHoldCompaction {
		h.pastCompat, h.untilRev = rev, 0
		bound *= 4
		h.as.a.record(ChoiceHoldPastCompaction, h.as.id, watchID, rev,
			"the stream's live watches held back from revision %d until a compaction passes it (at most %v)", rev, bound)
	} else {
		n := int64(1 + h.rng.IntN(p.holdRevs))
		h.pastCompat, h.untilRev = 0, rev+n
		h.as.a.record(ChoiceHold, h.as.id, watchID, rev,
			"the stream's live watches held back from revision %d for %d revisions (at most %v)", rev, n, bound)
	}
	gen := h.gen
	time.AfterFunc(bound, func() {
		h.mu.Lock()
		mine := h.holding && h.gen == gen
		if mine {
			h.holding = false
		}
		h.mu.Unlock()
		if mine {
			h.ws.CatchUp()
		}
	})
	return true
}

// Release implements watchhub.Perturber.
func (h *advHold) Release(rev int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.holding {
		return true
	}
	if h.pastCompat > 0 && h.compactRev() > h.pastCompat || h.pastCompat == 0 && rev >= h.untilRev {
		h.holding = false
		return true
	}
	return false
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// String formats the report as a table: each kind of choice, the SPEC
// sections that make it legal, and how often it was made.
func (r AdversaryReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "adversary seed %d: choices made\n", r.Seed)
	for _, k := range ChoiceKinds() {
		fmt.Fprintf(&b, "  %-22s %-12s %8d\n", k, k.Section(), r.Counts[k.String()])
	}
	return b.String()
}
