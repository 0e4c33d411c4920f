package listwatch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/watchspec/watchspec/adversary/listwatch"
	"github.com/watchspec/watchspec/impl/watchhub"
	harness "github.com/watchspec/watchspec/internal/informertest"
)

// served is the store's own list/watch served by NewHandler in memory,
// with objects a/x, a/y, b/z written at revisions 2, 3, 4 and the store
// compacted at 3; a raw HTTP client and client-go's dynamic client of it.
type served struct {
	h   *harness.Harness
	ms  *harness.MemServer
	hc  *http.Client
	res dynamic.NamespaceableResourceInterface
}

func serve(t *testing.T) *served {
	h := harness.NewHarness(t, harness.Reference{}, harness.Config{}, watchhub.Options{ProgressInterval: -1})
	h.Put("a", "x")
	h.Put("a", "y")
	h.Put("b", "z")
	h.Compact(3)
	c := configMapsOver(t, listwatch.NewHandler(h.StoreLW, harness.GVR, ""))
	s := &served{h: h, ms: c.ms, hc: c.hc, res: c.res}
	t.Cleanup(func() {
		c.close()
		h.Close()
	})
	return s
}

// httpConfigMaps is client-go's dynamic client of ConfigMaps over an
// in-memory HTTP server of a handler.
type httpConfigMaps struct {
	ms  *harness.MemServer
	hc  *http.Client
	res dynamic.NamespaceableResourceInterface
}

// configMapsOver serves handler in memory and returns a dynamic client of
// its ConfigMaps; close ends both.
func configMapsOver(t *testing.T, handler http.Handler) *httpConfigMaps {
	t.Helper()
	ms := harness.ServeInMemory(handler)
	cfg := &rest.Config{Host: ms.URL(), Dial: ms.DialContext, QPS: -1}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		ms.Close()
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		ms.Close()
		t.Fatal(err)
	}
	return &httpConfigMaps{ms: ms, hc: hc, res: dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})}
}

func (c *httpConfigMaps) close() {
	c.hc.CloseIdleConnections()
	c.ms.Close()
}

// do answers a raw request: its status code and its JSON body.
func (s *served) do(t *testing.T, method, path string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.ms.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s %s: the body is not JSON: %v", method, path, err)
	}
	return resp.StatusCode, body
}

func field(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// SPEC §4.1, §4.2, §4.5 on the wire: the handler answers lists as the API
// server does — a ConfigMapList with metadata.resourceVersion and
// continue, objects with data.value — and refuses what it must with a
// Status of the right code, naming the parameter.
func TestHandlerAnswersAsTheAPIServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := serve(t)
		code, l := s.do(t, "GET", "/api/v1/configmaps")
		if code != 200 || field(l, "kind") != "ConfigMapList" || field(l, "metadata", "resourceVersion") != "4" || len(l["items"].([]any)) != 3 {
			t.Errorf("list: %d %v; want 200, a ConfigMapList at resourceVersion 4 of 3 items", code, l)
		}
		item := l["items"].([]any)[0].(map[string]any)
		if field(item, "kind") != "ConfigMap" || field(item, "apiVersion") != "v1" || field(item, "metadata", "name") != "x" ||
			field(item, "metadata", "namespace") != "a" || field(item, "metadata", "resourceVersion") != "2" || field(item, "data", "value") != "v1" {
			t.Errorf("first item %v; want the ConfigMap a/x at resourceVersion 2 with data.value v1", item)
		}
		if code, l := s.do(t, "GET", "/api/v1/namespaces/a/configmaps"); code != 200 || len(l["items"].([]any)) != 2 {
			t.Errorf("list of namespace a: %d %v; want its 2 items", code, l)
		}
		if code, l := s.do(t, "GET", "/api/v1/configmaps?limit=1"); code != 200 || len(l["items"].([]any)) != 1 || field(l, "metadata", "continue") == nil {
			t.Errorf("list with limit=1: %d %v; want 1 item and a continue token", code, l)
		}
		for _, c := range []struct {
			method, path string
			code         int
			reason, says string
		}{
			{"GET", "/api/v1/configmaps?resourceVersion=2&resourceVersionMatch=Exact", 410, "Expired", "too old resource version"},
			{"GET", "/api/v1/configmaps?resourceVersion=99&resourceVersionMatch=NotOlderThan", 504, "Timeout", "Too large resource version"},
			{"GET", "/api/v1/configmaps?limit=ten", 400, "BadRequest", "limit"},
			{"GET", "/api/v1/configmaps?watch=maybe", 400, "BadRequest", "watch"},
			{"GET", "/api/v1/configmaps?watch=1&timeoutSeconds=-1", 400, "BadRequest", "timeoutSeconds"},
			{"GET", "/api/v1/configmaps?resourceVersionMatch=Newest", 400, "BadRequest", "resourceVersionMatch"},
			{"GET", "/api/v1/configmaps?labelSelector=app%3Dx", 400, "BadRequest", "labelSelector"},
			{"GET", "/api/v1/pods", 404, "NotFound", "configmaps"},
			{"GET", "/api/v1/namespaces/a/configmaps/x", 404, "NotFound", "configmaps"},
			{"POST", "/api/v1/namespaces/a/configmaps", 405, "MethodNotAllowed", "POST"},
		} {
			code, st := s.do(t, c.method, c.path)
			msg, _ := st["message"].(string)
			if code != c.code || st["kind"] != "Status" || st["reason"] != c.reason || int(st["code"].(float64)) != c.code || !strings.Contains(msg, c.says) {
				t.Errorf("%s %s: %d %v; want a Status %d %s saying %q", c.method, c.path, code, st, c.code, c.reason, c.says)
			}
		}

		// client-go reads those statuses as its Reflector needs them.
		ctx := context.Background()
		_, err := s.res.List(ctx, metav1.ListOptions{ResourceVersion: "2", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if !apierrors.IsResourceExpired(err) {
			t.Errorf("client-go's list at an expired resourceVersion: %v; want a ResourceExpired error", err)
		}
		_, err = s.res.List(ctx, metav1.ListOptions{ResourceVersion: "99", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
			t.Errorf("client-go's list at a future resourceVersion: %v; want the cause ResourceVersionTooLarge", err)
		}
		l2, err := s.res.List(ctx, metav1.ListOptions{Limit: 2})
		if err != nil || len(l2.Items) != 2 || l2.GetContinue() == "" {
			t.Fatalf("client-go's list with limit 2: %v, %v; want 2 items and a continue token", l2, err)
		}
		l3, err := s.res.List(ctx, metav1.ListOptions{Limit: 2, Continue: l2.GetContinue()})
		if err != nil || len(l3.Items) != 1 || l3.Items[0].GetName() != "z" {
			t.Errorf("client-go's next page: %v, %v; want b/z", l3, err)
		}
	})
}

// next reads the next event of a watch, or fails.
func next(t *testing.T, w watch.Interface, what string) watch.Event {
	t.Helper()
	ev, ok := <-w.ResultChan()
	if !ok {
		t.Fatalf("%s: the watch ended", what)
	}
	return ev
}

// SPEC §4.3, §4.4, §4.5 on the wire: through client-go's watch decoder, a
// watch from a compacted resourceVersion gets one ERROR event carrying a
// 410 Expired Status (the cacher's answer, not an HTTP error); a watch
// gets the changes after its resourceVersion; a WatchList its state and
// then the BOOKMARK annotated k8s.io/initial-events-end; a watch with
// timeoutSeconds ends when they pass (fake time), as do the raw streams
// with watch=1.
func TestHandlerWatchesAsTheAPIServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := serve(t)
		ctx := context.Background()

		w, err := s.res.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
		if err != nil {
			t.Fatalf("a watch from a compacted resourceVersion: %v; want it opened, with an ERROR event", err)
		}
		if ev := next(t, w, "a watch from 1"); ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
			t.Errorf("a watch from 1 (compacted at 3): %s %v; want ERROR with a 410 Expired Status", ev.Type, ev.Object)
		}
		if _, ok := <-w.ResultChan(); ok {
			t.Errorf("the watch went on after its ERROR event")
		}

		w, err = s.res.Watch(ctx, metav1.ListOptions{ResourceVersion: "4", TimeoutSeconds: new(int64(30))})
		if err != nil {
			t.Fatal(err)
		}
		s.h.Put("b", "z")
		if ev := next(t, w, "a watch from 4"); ev.Type != watch.Modified || field(ev.Object.(interface{ UnstructuredContent() map[string]any }).UnstructuredContent(), "data", "value") != "v4" {
			t.Errorf("a watch from 4: %s %v; want MODIFIED b/z with data.value v4", ev.Type, ev.Object)
		}
		time.Sleep(31 * time.Second)
		if ev, ok := <-w.ResultChan(); ok {
			t.Errorf("after its timeoutSeconds the watch sent %s; want it ended", ev.Type)
		}

		w, err = s.res.Watch(ctx, metav1.ListOptions{SendInitialEvents: new(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if ev := next(t, w, "a WatchList"); ev.Type != watch.Added {
				t.Fatalf("a WatchList's event %d: %s; want ADDED", i, ev.Type)
			}
		}
		ev := next(t, w, "a WatchList")
		m, _ := ev.Object.(metav1.Object)
		if ev.Type != watch.Bookmark || m == nil || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || m.GetResourceVersion() != "5" {
			t.Errorf("after a WatchList's state: %s %v; want a BOOKMARK at 5 annotated %s", ev.Type, ev.Object, metav1.InitialEventsAnnotationKey)
		}
		w.Stop()

		// The raw stream: newline-terminated JSON events; watch=1 is a watch.
		resp, err := s.hc.Get(s.ms.URL() + "/api/v1/namespaces/a/configmaps?watch=1&resourceVersion=5&timeoutSeconds=10")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		s.h.Put("b", "y") // another namespace: not sent
		s.h.Put("a", "y")
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		var e map[string]any
		if err != nil || json.Unmarshal([]byte(line), &e) != nil || e["type"] != "ADDED" && e["type"] != "MODIFIED" || field(e, "object", "metadata", "namespace") != "a" {
			t.Errorf("the raw watch of namespace a: %q (%v); want one line, the event of a/y", line, err)
		}
		time.Sleep(11 * time.Second)
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Errorf("after timeoutSeconds=10 the raw stream: %q, %v; want its clean end", rest, err)
		}
	})
}

// SPEC §6 (a watch's chunks carry nothing), §4.3: with the adversary's
// wire choices — events cut across chunks, events joined in one — a
// client-go watch of the store over HTTP still gets every change, in
// order, on one stream that does not end; over 20 seeds both kinds are
// made.
func TestWireChoicesKeepTheStream(t *testing.T) {
	made := map[string]int64{}
	for seed := int64(1); seed <= 20; seed++ {
		synctest.Test(t, func(t *testing.T) {
			h := harness.NewHarness(t, harness.Reference{}, harness.Config{}, watchhub.Options{ProgressInterval: -1})
			defer h.Close()
			adv := listwatch.New(seed, h.Store(), harness.GVR, "", listwatch.Options{})
			c := configMapsOver(t, adv.HandlerFor(h.StoreLW)) // the store's watch, the adversary's wire choices
			defer c.close()
			h.Put("a", "x")
			w, err := c.res.Watch(context.Background(), metav1.ListOptions{ResourceVersion: "2"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			names := []string{"x", "y", "z"}
			for i := range 8 { // bursts of 3 writes, a second apart
				for _, n := range names {
					h.Put("a", n)
				}
				time.Sleep(time.Second)
				for j, n := range names {
					ev := next(t, w, fmt.Sprintf("seed %d, burst %d", seed, i))
					m, _ := ev.Object.(metav1.Object)
					if m == nil || m.GetName() != n || m.GetResourceVersion() != fmt.Sprint(3+3*i+j) {
						t.Fatalf("seed %d, burst %d: event %s %v; want a/%s at resourceVersion %d\n%s", seed, i, ev.Type, ev.Object, n, 3+3*i+j, adv.Report())
					}
				}
			}
			for k, c := range adv.Report().Counts {
				made[k] += c
			}
		})
	}
	if made["wire-split"] == 0 || made["wire-join"] == 0 {
		t.Errorf("over 20 seeds the wire choices made: split %d, join %d; want both", made["wire-split"], made["wire-join"])
	}
	t.Logf("wire-split %d, wire-join %d", made["wire-split"], made["wire-join"])
}
