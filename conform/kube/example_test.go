package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/watchspec/watchspec/conform/kube"
	"github.com/watchspec/watchspec/linearizability"
	"github.com/watchspec/watchspec/traces"
)

// Run the workload against the cluster of a kubeconfig and check the
// recording. (It needs a cluster, so it is compiled, not run.)
func ExampleRecord() {
	rest, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Println(err)
		return
	}
	var buf bytes.Buffer
	stats, err := kube.Record(context.Background(), kube.Config{REST: rest, Namespace: "watchspec-conform", Duration: 30 * time.Second}, &buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(stats) // lists by semantic, watches, WatchLists, bookmarks, 410s, notifications
	t, err := traces.Read(&buf, "run.ndjson")
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := linearizability.Check(t, linearizability.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range res.Violations {
		fmt.Printf("FAIL %s %s: %s\n", v.Property, v.Where, v.Message)
	}
}
