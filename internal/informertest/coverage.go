package informertest

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/watchspec/watchspec/model/k8s"
)

// Coverage counts, over the checks of a test, the situations the scenarios
// must reach to mean anything. Pass one in Options and demand Missing() be
// empty afterwards.
type Coverage struct {
	mu     sync.Mutex
	counts map[string]int
}

// The situations counted.
const (
	CovRelist            = "relist (a list after the first)"
	CovExpired           = "410 Expired answered to a list or a watch"
	CovTombstone         = "tombstone delivered (DeletedFinalStateUnknown)"
	CovLateHandler       = "initial-list add to a handler added late"
	CovResync            = "periodic resync"
	CovResyncLateHandler = "handler added late while resync is on"
	CovWatchList         = "WatchList state (initial-events-end bookmark)"
	CovBookmark          = "bookmark"
	CovSameRV            = "same-resourceVersion update"
	CovRestart           = "informer restart"
	CovContinuation      = "list continuation page"
	CovRelistWhilePaused = "relist while the informer's processing was paused"
	CovStalledHandler    = "notification held by a stalled handler"
)

func (c *Coverage) add(what string, n int) {
	if c == nil || n == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[what] += n
}

// Count returns how often what was reached.
func (c *Coverage) Count(what string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[what]
}

// Missing returns the situations among want never reached.
func (c *Coverage) Missing(want ...string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, w := range want {
		if c.counts[w] == 0 {
			out = append(out, w)
		}
	}
	return out
}

func (c *Coverage) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []string
	for k := range c.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%6d  %s\n", c.counts[k], k)
	}
	return b.String()
}

// countRun adds what one recorded run shows.
func (c *Coverage) countRun(run *k8s.Run) {
	if c == nil {
		return
	}
	lists := 0
	for _, l := range run.Lists {
		switch {
		case l.Result.Status != nil && l.Result.Status.Code == k8s.StatusGone:
			c.add(CovExpired, 1)
		case l.Result.Status != nil:
		case l.Options.Continue != "":
			c.add(CovContinuation, 1)
		default:
			lists++
		}
	}
	c.add(CovRelist, max(lists-1, 0))
	for _, w := range run.Watches {
		for _, e := range w.Events {
			switch {
			case e.Type == k8s.Error && e.Status != nil && e.Status.Code == k8s.StatusGone:
				c.add(CovExpired, 1)
			case e.Type == k8s.Bookmark && e.InitialEventsEnd:
				c.add(CovWatchList, 1)
			case e.Type == k8s.Bookmark:
				c.add(CovBookmark, 1)
			}
		}
	}
	joined := map[int]bool{}
	started, resync := false, false
	last := map[[2]any]int64{}
	for _, e := range run.Entries {
		switch {
		case e.Start != nil:
			started = true
		case e.HandlerAdded != nil:
			joined[*e.HandlerAdded] = started
		case e.Resync:
			c.add(CovResync, 1)
			resync = true
		case e.Notification != nil:
			n := e.Notification
			if n.Tombstone {
				c.add(CovTombstone, 1)
			}
			if n.InInitialList && joined[n.Handler] {
				c.add(CovLateHandler, 1)
				if resync {
					c.add(CovResyncLateHandler, 1)
				}
			}
			if n.New != nil {
				k := [2]any{n.Handler, n.Key()}
				if rv, ok := last[k]; ok && rv == n.New.ResourceVersion && n.Type == k8s.OnUpdate {
					c.add(CovSameRV, 1)
				}
				last[k] = n.New.ResourceVersion
			}
		}
	}
}
