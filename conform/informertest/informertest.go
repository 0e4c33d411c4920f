// Package informertest checks an informer from its own go test, in one call:
// [TestInformer] drives an informer through random scenarios over
// watchspec's reference store — writes, watches dropped and stalled,
// compaction (410 Expired), relists, slow handlers, handlers added late,
// periodic resync, restarts, bookmarks, WatchList — under fake time
// (testing/synctest), records every run and checks it against the informer
// contract of docs/SPEC.md §5 (k8s.CheckInformer). A failing run fails the
// test naming the rule broken (for instance InformerConverges §5.2), with
// rapid's shrunk scenario and the run saved as a trace.
//
// For client-go's SharedIndexInformer the adapter is ready, [ClientGo]:
//
//	func TestMyInformer(t *testing.T) {
//		informertest.TestInformer(t, informertest.ClientGo{NewInformer: myInformerSetup})
//	}
//
// Any other informer implements [Subject]: New builds it over the
// harness's [informer.ListerWatcher] (package impl/informer's types), and
// its handlers pass each call to their [Sink]. [DropsEvents] makes a
// deliberately broken informer of any Subject, for a negative test of your
// own: the check must fail on it.
//
// The scenarios are those watchspec runs against its own informer
// (impl/informer) and client-go (proptest); -rapid.checks sets how many.
//
// [TestInformerUnderAdversary] runs the informer over the legal adversary
// instead (package adversary/listwatch): a list/watch source that takes,
// from a seed, the unusual choices the Kubernetes API allows the server —
// 410 as early as allowed, watches closed, stale lists at "0", WatchLists
// caught up before their end bookmark — so that bugs a quiet server hides
// show (docs/ADVERSARY.md). With ClientGo{OverHTTP: true} client-go's
// informer meets it over HTTP, through its dynamic client, REST client and
// watch decoder (adversary/listwatch.NewHandler).
package informertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"

	"github.com/watchspec/watchspec/impl/informer"
	harness "github.com/watchspec/watchspec/internal/informertest"
)

// Subject is an informer implementation under test: New returns an
// informer over the given ListerWatcher, configured by Config, not yet
// running.
type Subject = harness.Subject

// Config is what a scenario draws for an informer: resync period,
// WatchList or list-and-watch, page size, and the OnResync mark a resync
// must call (SPEC §5.7).
type Config = harness.Config

// Informer is one informer under test, as a [Subject] builds it.
type Informer = harness.Informer

// Sink receives a handler's calls: adapters turn each call into a
// k8s.Notification and pass it to Sink.Handle.
type Sink = harness.Sink

// Registration is a registered handler (HasSynced).
type Registration = harness.Registration

// KnownBugs is what a [Subject] may also implement when the informer it
// builds has a known, reported bug that the scenarios hit now and then:
// Known names the finding a violation is (or returns ""), and the tests
// log it instead of failing. [ClientGo] names docs/FINDINGS.md informer-2,
// client-go's HasSynced race. The rule is not relaxed: `watchspec check`
// still fails the trace.
type KnownBugs = harness.KnownBugs

// GVR is the resource the scenarios write and the informers watch
// (ConfigMaps).
var GVR = harness.GVR

// TestInformerUnderAdversary runs an informer of subject through a
// workload per seed (default: seeds 1 to 20) — writes, compactions, late
// handlers, restarts, under fake time — over the informer adversary of
// that seed (package adversary/listwatch): a list/watch source that takes,
// wherever docs/SPEC.md §4 leaves the API server a choice, a legal but
// unusual one — watches answered 410 at once or midway, closed, bookmarks
// added or dropped, lists at "0" and NotOlderThan from older snapshots,
// WatchLists caught up before their end bookmark, short pages. Every run
// is recorded and checked against the informer contract (SPEC §5); a
// failing run fails t naming the rule, with the trace written for
// `watchspec check` and the adversary's choices. Every choice is legal, so
// a failure is the informer's. The configuration (WatchList or list and
// watch, resync, page size) is drawn from the seed.
//
//	func TestMyInformerUnderAdversary(t *testing.T) {
//		informertest.TestInformerUnderAdversary(t, informertest.ClientGo{NewInformer: myInformerSetup})
//	}
func TestInformerUnderAdversary(t *testing.T, subject Subject, seeds ...int64) {
	t.Helper()
	if len(seeds) == 0 {
		for s := int64(1); s <= 20; s++ {
			seeds = append(seeds, s)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				out, rep := harness.RunUnderAdversary(t, subject, seed)
				if msg := harness.Explain(out, rep, seed); msg != "" {
					t.Error(msg)
				}
			})
		})
	}
}

// TestInformer runs random scenarios (rapid.Check) against informers of
// subject and fails t when a recorded run breaks the informer contract
// (SPEC §5), naming the rule.
func TestInformer(t *testing.T, subject Subject) {
	t.Helper()
	rapid.Check(t, func(rt *rapid.T) {
		harness.Check(rt, subject, harness.Options{})
	})
}

// DropsEvents returns subject broken on purpose: its informers never see a
// DELETED watch event, so an object deleted while the informer watches
// stays in its cache (until a relist) and its handlers never hear of the
// deletion — SPEC §5.2 InformerConverges is broken. For showing that a
// test of yours built on [TestInformer] fails when it should.
func DropsEvents(subject Subject) Subject { return dropsEvents{subject} }

type dropsEvents struct{ Subject }

func (d dropsEvents) New(lw informer.ListerWatcher, cfg Config) Informer {
	return d.Subject.New(dropLW{lw}, cfg)
}

// dropLW forwards lists and watches, and drops each watch's DELETED events.
type dropLW struct{ informer.ListerWatcher }

func (d dropLW) Watch(ctx context.Context, o informer.WatchOptions) (informer.Watcher, error) {
	w, err := d.ListerWatcher.Watch(ctx, o)
	if err != nil {
		return nil, err
	}
	out := &dropWatch{in: w, ch: make(chan informer.Event), stop: make(chan struct{})}
	go out.forward()
	return out, nil
}

type dropWatch struct {
	in   informer.Watcher
	ch   chan informer.Event
	stop chan struct{}
	once sync.Once
}

func (w *dropWatch) ResultChan() <-chan informer.Event { return w.ch }

func (w *dropWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

func (w *dropWatch) forward() {
	defer close(w.ch)
	for ev := range w.in.ResultChan() {
		if ev.Type == informer.Deleted {
			continue
		}
		select {
		case w.ch <- ev:
		case <-w.stop:
			return
		}
	}
}
