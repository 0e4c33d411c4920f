package informer

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock whose time moves only when the test says.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer { panic("not used") }

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// The Reflector's backoff is client-go's (reflector.go, apimachinery's
// wait.Backoff.DelayWithReset): 0.8 s doubling up to 30 s, each delay
// stretched by up to Jitter (1.0) of itself, back to 0.8 s once two
// minutes passed since the last reset.
func TestBackoff(t *testing.T) {
	for _, jitter := range []float64{0, 0.999} {
		c := &fakeClock{now: time.Unix(1000, 0)}
		b := newBackoff(Backoff{}, c, func() float64 { return jitter })
		base := []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
			12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second}
		for i, want := range base {
			got := b.Step()
			want += time.Duration(jitter * float64(want))
			if got != want {
				t.Fatalf("jitter %v, step %d: delay %v, want %v", jitter, i, got, want)
			}
			c.advance(10 * time.Second)
		}
		// More than two minutes after the last reset (the start, not the
		// last step: apimachinery's backoffManager), the delay starts over.
		c.advance(2*time.Minute - 80*time.Second + time.Millisecond)
		if got, want := b.Step(), 800*time.Millisecond+time.Duration(jitter*float64(800*time.Millisecond)); got != want {
			t.Fatalf("jitter %v, after the reset interval: delay %v, want %v", jitter, got, want)
		}
		if got, want := b.Step(), 1600*time.Millisecond+time.Duration(jitter*float64(1600*time.Millisecond)); got != want {
			t.Fatalf("jitter %v, after the reset: delay %v, want %v", jitter, got, want)
		}
	}
}
