package kube

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchspec/watchspec/model/k8s"
)

// collector watches the run's namespace from the base revision to the
// end, with bookmarks, resuming after the last event or bookmark whenever
// the server ends the stream, so that every change — above all every
// deletion, whose revision a delete answered with a Status does not give —
// is delivered to some watch of the run. Its watches are recorded and
// checked like any other.
type collector struct {
	r *run

	mu   sync.Mutex
	last int64 // the revision it has seen up to
}

func (c *collector) reached() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *collector) run(ctx context.Context) {
	c.mu.Lock()
	c.last = c.r.base
	c.mu.Unlock()
	for ctx.Err() == nil {
		timeout := int64(4) // a bookmark comes 2 s before the server ends it
		o := metav1.ListOptions{ResourceVersion: k8s.RV(c.reached()), AllowWatchBookmarks: true, TimeoutSeconds: &timeout}
		w, st, err := c.r.c.watch(ctx, o, nil)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			c.r.cfg.Progress("the collector's watch got no answer: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		case st != nil:
			c.r.cfg.Progress("the collector's watch from %d was refused: %d %s", c.reached(), st.Code, st.Message)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				// Expired: what it missed is lost to it; go on from the
				// latest revision the run saw.
				c.mu.Lock()
				c.last = max(c.last, c.r.latest())
				c.mu.Unlock()
				break
			}
			if rv := c.r.c.rawEvent(ev).obj.rv; rv > 0 {
				c.mu.Lock()
				c.last = max(c.last, rv)
				c.mu.Unlock()
			}
		}
		w.Stop()
	}
}
