package informer

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Clock is the time the informer waits on: backoff, resync periods, watch
// timeouts, periodic bookmarks. Tests substitute a fake, or run the real one
// inside a testing/synctest bubble.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a [Clock].
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// RealClock is the Clock of the time package.
type RealClock struct{}

// Now implements [Clock].
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer implements [Clock].
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Backoff is an exponential backoff with jitter. The zero fields take
// client-go's Reflector defaults (reflector.go): 800 ms initially, doubled
// at every step up to 30 s, each delay stretched by a random factor in
// [1, 1+Jitter) with Jitter 1.0, and back to 800 ms once two minutes passed
// since the last reset — "about 0.22 QPS when the server is unhealthy".
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       float64
	ResetAfter   time.Duration
}

// DefaultBackoff is client-go's Reflector backoff.
var DefaultBackoff = Backoff{Initial: 800 * time.Millisecond, Max: 30 * time.Second, Factor: 2, Jitter: 1, ResetAfter: 2 * time.Minute}

func (b Backoff) withDefaults() Backoff {
	d := DefaultBackoff
	if b.Initial > 0 {
		d.Initial = b.Initial
	}
	if b.Max > 0 {
		d.Max = b.Max
	}
	if b.Factor > 0 {
		d.Factor = b.Factor
	}
	if b.Jitter > 0 {
		d.Jitter = b.Jitter
	}
	if b.ResetAfter > 0 {
		d.ResetAfter = b.ResetAfter
	}
	return d
}

// backoff is the running state of a Backoff (apimachinery's
// wait.Backoff.DelayWithReset): safe for concurrent use.
type backoff struct {
	mu        sync.Mutex
	b         Backoff
	clock     Clock
	rand      func() float64
	next      time.Duration
	lastReset time.Time
}

func newBackoff(b Backoff, c Clock, rnd func() float64) *backoff {
	b = b.withDefaults()
	if rnd == nil {
		rnd = rand.Float64
	}
	return &backoff{b: b, clock: c, rand: rnd, next: b.Initial, lastReset: c.Now()}
}

// Step returns the next delay: the current base delay, jittered; the base
// then grows by Factor up to Max. More than ResetAfter after the last reset,
// the base starts again from Initial.
func (b *backoff) Step() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := b.clock.Now(); now.Sub(b.lastReset) > b.b.ResetAfter {
		b.next, b.lastReset = b.b.Initial, now
	}
	d := b.next
	b.next = min(time.Duration(float64(b.next)*b.b.Factor), b.b.Max)
	return d + time.Duration(b.rand()*b.b.Jitter*float64(d))
}

// sleep waits d on the clock, or until done is closed (it then reports
// false).
func sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}
