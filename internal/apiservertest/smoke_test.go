package apiservertest

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/internal/etcdtest"
)

func TestSmoke(t *testing.T) {
	for _, backend := range []string{"etcd", "reference"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var eps []string
			if backend == "etcd" {
				cl, err := etcdtest.Start(etcdtest.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				eps = cl.Endpoints
			} else {
				r, err := server.Start(t.TempDir(), "127.0.0.1:0", server.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				eps = []string{r.Endpoint()}
			}
			s, err := Start(ctx, Options{Etcd: eps, Name: backend})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c, err := s.Dynamic("ns1")
			if err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.apiserver.k8s.io/v1", "kind": "Pod",
				"metadata": map[string]any{"name": "a", "annotations": map[string]any{"watchspec.io/value": "v1"}}}}
			out, err := c.Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("created %s rv %s uid %s", out.GetName(), out.GetResourceVersion(), out.GetUID())
			l, err := c.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("list rv %s items %d", l.GetResourceVersion(), len(l.Items))
			w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			ev := <-w.ResultChan()
			t.Logf("event %s %v", ev.Type, ev.Object)
			w.Stop()
			err = c.Delete(ctx, "a", metav1.DeleteOptions{})
			t.Logf("delete: %v", err)
		})
	}
}
