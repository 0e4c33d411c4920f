package listwatch_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/informer"
	"github.com/watchspec/watchspec/impl/watchhub"
	harness "github.com/watchspec/watchspec/internal/informertest"
)

var httpSearch = flag.Int("listwatch.httpsearch", 0, "TestFindHTTPCatchingSeeds: search seeds 1..N for each buggy HTTP client")

// A bug of the hand-written list-then-watch cache below.
type cacheBug int

const (
	correct cacheBug = iota
	// endsOnClose takes the end of a watch for the end of the data: when
	// its watch ends — closed by the server, or after an ERROR — it stops.
	endsOnClose
	// ignores410 takes an ERROR event for a broken connection: it watches
	// again from the same resourceVersion, and never relists.
	ignores410
)

func (b cacheBug) String() string {
	return [...]string{"correct", "ends-on-close", "ignores-410"}[b]
}

// cacheClient is the kind of client people write by hand over client-go's
// dynamic client: list, then watch from the list's resourceVersion and
// apply the events to a map; watch again from the last resourceVersion
// when the watch ends, relist after a 410.
type cacheClient struct {
	res dynamic.ResourceInterface
	bug cacheBug

	mu    sync.Mutex
	items map[string]string // namespace/name → resourceVersion/value
}

func key(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

func entry(u *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(u.Object, "data", "value")
	return u.GetResourceVersion() + "/" + v
}

func (c *cacheClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		l, err := c.res.List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		c.mu.Lock()
		c.items = map[string]string{}
		for i := range l.Items {
			c.items[key(&l.Items[i])] = entry(&l.Items[i])
		}
		c.mu.Unlock()
		rv := l.GetResourceVersion()
		for relist := false; !relist && ctx.Err() == nil; {
			w, err := c.res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				relist = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Error:
					relist = c.bug != ignores410
				case watch.Added, watch.Modified, watch.Deleted:
					u, ok := ev.Object.(*unstructured.Unstructured)
					if !ok {
						continue
					}
					c.mu.Lock()
					if ev.Type == watch.Deleted {
						delete(c.items, key(u))
					} else {
						c.items[key(u)] = entry(u)
					}
					c.mu.Unlock()
					rv = u.GetResourceVersion()
				}
			}
			w.Stop()
			if c.bug == endsOnClose {
				return
			}
			time.Sleep(100 * time.Millisecond) // back off before watching again
		}
	}
}

// runCacheClient runs the client of bug over source ("plain": the store's
// own list/watch; "adversary": the adversary of seed), both over HTTP,
// while 40 writes to 6 objects go to the store with time between them;
// then it waits a minute and reports how the client's map differs from
// the store ("" when it agrees).
func runCacheClient(t *testing.T, bug cacheBug, adversary bool, seed int64) string {
	var diff string
	synctest.Test(t, func(t *testing.T) {
		h := harness.NewHarness(t, harness.Reference{}, harness.Config{}, watchhub.Options{ProgressInterval: -1})
		defer h.Close()
		var src informer.ListerWatcher = h.StoreLW
		var adv *listwatch.ListWatch
		if adversary {
			adv = listwatch.New(seed, h.Store(), harness.GVR, "", listwatch.Options{})
			src = adv
		}
		cm := configMapsOver(t, listwatch.NewHandler(src, harness.GVR, ""))
		defer cm.close()
		c := &cacheClient{res: cm.res, bug: bug}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.run(ctx)
		}()
		writes := []struct{ ns, name string }{{"a", "x"}, {"a", "y"}, {"b", "x"}, {"b", "y"}, {"c", "x"}, {"c", "y"}}
		for i := range 40 {
			w := writes[(i*7+int(seed))%len(writes)]
			if i%9 == 8 {
				h.Delete(w.ns, w.name)
			} else {
				h.Put(w.ns, w.name)
			}
			time.Sleep(time.Duration(i%3) * time.Second)
			synctest.Wait()
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		want := map[string]string{}
		for _, o := range h.Rec.Objects() {
			ns, name := splitKey(o.Key)
			want[ns+"/"+name] = fmt.Sprintf("%d/%s", o.ResourceVersion, o.Value)
		}
		c.mu.Lock()
		diff = differ(want, c.items)
		c.mu.Unlock()
		if diff != "" && adv != nil {
			diff += "\n" + adv.Report().String()
		}
		cancel()
		<-done
	})
	return diff
}

func splitKey(k string) (string, string) {
	rest := k[len(harness.GVR.Prefix("")):]
	for i := range rest {
		if rest[i] == '/' {
			return rest[:i], rest[i+1:]
		}
	}
	return "", rest
}

func differ(want, got map[string]string) string {
	var out string
	for k, v := range want {
		if got[k] != v {
			out += fmt.Sprintf("%s: store %q, client %q; ", k, v, got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out += fmt.Sprintf("%s: not in the store, client %q; ", k, v)
		}
	}
	return out
}

// catchingSeeds are seeds of the adversary under which each buggy client
// ends out of step with the store over HTTP. Of seeds 1..100
// (-listwatch.httpsearch=100, 2026-12-02) ends-on-close was caught by 90,
// ignores-410 by 72, the correct client by none.
var catchingSeeds = map[cacheBug]int64{endsOnClose: 1, ignores410: 1}

// SPEC §4.3, §4.5 (a watch may end, or be answered 410, whenever the
// server likes; the client must watch again or relist): a hand-written
// list-then-watch cache over client-go's dynamic client, talking HTTP to
// the handler, agrees with the store over the plain source and under the
// adversary when it is correct; with a bug — it takes a closed watch for
// the end of the data, or takes an ERROR 410 event for a broken connection
// and watches again from the same resourceVersion — it agrees over the
// plain source (whose watches never end or expire without a compaction)
// and is caught under the adversary of its seed.
func TestBuggyHTTPClientsAreCaught(t *testing.T) {
	for _, bug := range []cacheBug{correct, endsOnClose, ignores410} {
		t.Run(bug.String(), func(t *testing.T) {
			if d := runCacheClient(t, bug, false, 1); d != "" {
				t.Errorf("over the plain source the %s client differs from the store: %s", bug, d)
			}
			if bug == correct {
				for seed := int64(1); seed <= 5; seed++ {
					if d := runCacheClient(t, bug, true, seed); d != "" {
						t.Errorf("under the adversary of seed %d the correct client differs from the store: %s", seed, d)
					}
				}
				return
			}
			seed := catchingSeeds[bug]
			if d := runCacheClient(t, bug, true, seed); d == "" {
				t.Errorf("under the adversary of seed %d the %s client agrees with the store; want it caught", seed, bug)
			} else {
				t.Logf("seed %d catches the %s client: %s", seed, bug, d)
			}
		})
	}
}

// TestFindHTTPCatchingSeeds searches seeds 1..N (-listwatch.httpsearch=N)
// for those under which each buggy client is caught (and the correct one,
// which none may catch: every choice is legal).
func TestFindHTTPCatchingSeeds(t *testing.T) {
	if *httpSearch == 0 {
		t.Skip("-listwatch.httpsearch=N searches seeds 1..N")
	}
	for _, bug := range []cacheBug{correct, endsOnClose, ignores410} {
		var caught []int64
		for seed := int64(1); seed <= int64(*httpSearch); seed++ {
			if runCacheClient(t, bug, true, seed) != "" {
				caught = append(caught, seed)
			}
		}
		t.Logf("%s: caught by %d of seeds 1..%d: %v", bug, len(caught), *httpSearch, caught)
		if bug == correct && len(caught) > 0 {
			t.Errorf("the correct client differs from the store under seeds %v: the adversary or its handler is not legal, or the client is wrong", caught)
		}
	}
}
