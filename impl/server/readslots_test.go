package server

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

// SPEC §2.7 Linearizable (a Range reads the current view inside its request's lifetime):
// Ranges beyond the bound wait for a slot, and one whose context ends while
// it waits fails with its context's error instead of waiting on.
func TestReadSlotsBoundRanges(t *testing.T) {
	var r readSlots
	n := 2 * runtime.GOMAXPROCS(0)
	for i := range n {
		if err := r.acquire(context.Background()); err != nil {
			t.Fatalf("slot %d of %d: %v", i+1, n, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with every slot taken and a cancelled context = %v, want context.Canceled", err)
	}
	got := make(chan error, 1)
	go func() { got <- r.acquire(context.Background()) }()
	r.release()
	if err := <-got; err != nil {
		t.Fatalf("acquire after a release = %v, want a slot", err)
	}
}
