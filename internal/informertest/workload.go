package informertest

import (
	"math/rand/v2"
	"time"

	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/watchhub"
	"github.com/watchspec/watchspec/model/spec"
)

// Workload is a scenario drawn from a seed rather than by rapid: writes to
// a few objects with time passing between them, and optionally
// compactions, late handlers and restarts. The adversarial tests run it
// over an adversarial source (adversary/listwatch), where the seed draws
// the adversary's choices as well.
type Workload struct {
	// Seed draws the writes and the pauses.
	Seed int64
	// Writes is the number of writes (default 40).
	Writes int
	// Handlers is the number of handlers at the start (default 2).
	Handlers int
	// Compact compacts the store now and then (a watch or a list of
	// compacted history is answered 410).
	Compact bool
	// LateHandlers adds a handler now and then; Restart restarts the
	// informer now and then (a new run).
	LateHandlers, Restart bool
	// CompactAtEnd compacts the store at the head once the writes are
	// done, before the run quiesces — as the API server's compactor does
	// every 5 minutes: a revision a client is stuck at goes, and a list
	// at it is answered 410.
	CompactAtEnd bool
	// ProgressInterval is the store's progress notification interval,
	// which become bookmarks (default 5 s; −1: none).
	ProgressInterval time.Duration
}

// Outcome is what RunWorkload recorded: the recorder (for Dump) and the
// violations of each run (nil when every run passed).
type Outcome struct {
	Rec        *Recorder
	Violations [][]spec.Violation
}

// Failed reports whether a run broke a rule.
func (o Outcome) Failed() bool {
	for _, vs := range o.Violations {
		if len(vs) > 0 {
			return true
		}
	}
	return false
}

// Properties returns the distinct properties broken over every run.
func (o Outcome) Properties() []spec.Property {
	var all []spec.Violation
	for _, vs := range o.Violations {
		all = append(all, vs...)
	}
	return Properties(all)
}

// RunWorkload runs an informer of subject through w over a fresh store,
// reading through source(h) (nil: the store's own ListWatch), then
// quiesces and checks every recorded run with k8s.CheckInformer. Call it
// inside a testing/synctest bubble.
func RunWorkload(t TB, subject Subject, cfg Config, w Workload, source func(h *Harness) informer.ListerWatcher) Outcome {
	t.Helper()
	if w.Writes == 0 {
		w.Writes = 40
	}
	if w.Handlers == 0 {
		w.Handlers = 2
	}
	if w.ProgressInterval == 0 {
		w.ProgressInterval = 5 * time.Second
	}
	rng := rand.New(rand.NewPCG(uint64(w.Seed), 0x3071))
	h := NewHarness(t, subject, cfg, watchhub.Options{ProgressInterval: w.ProgressInterval})
	defer h.Close()
	if source != nil {
		h.UseSource(source(h))
	}
	write := func() {
		ns, name := namespaces[rng.IntN(len(namespaces))], names[rng.IntN(len(names))]
		if _, exists := h.Rec.Objects()[GVR.Key(ns, name)]; exists && rng.IntN(3) == 0 {
			h.Delete(ns, name)
		} else {
			h.Put(ns, name)
		}
	}
	for range rng.IntN(4) {
		write()
	}
	h.Start(w.Handlers)
	h.Settle()
	pauses := []time.Duration{0, 10 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 15 * time.Second}
	for range w.Writes {
		write()
		// Settled after every write (with or without time passing), the
		// informer's requests and the events its watches get come in the
		// same order every time: a seed replays its adversary's choices.
		h.Advance(pauses[rng.IntN(len(pauses))])
		switch x := rng.IntN(40); {
		case w.Compact && x < 4:
			if cur := h.Store().Revision() - int64(rng.IntN(3)); cur > h.Rec.CompactRevision() {
				h.Compact(cur)
			}
		case w.LateHandlers && x == 4 && len(h.Rec.Handlers()) < 3:
			h.AddHandler()
		case w.Restart && x == 5:
			h.Restart(make([]*time.Duration, w.Handlers)...)
		}
		h.Settle()
	}
	if w.CompactAtEnd {
		h.Advance(time.Minute)
		h.CompactNow()
	}
	h.Quiesce()
	return Outcome{Rec: h.Rec, Violations: h.Violations()}
}
