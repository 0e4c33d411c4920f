package server

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkPutGRPC: a clientv3 Put through gRPC to a server in the same
// process, with 1 and 16 writers, each putting as soon as its previous put
// is answered (the bench's durable-put workload, without the fsync so that
// the figures are the CPU of the put path: gRPC on both sides, the
// interceptors, the store's commit). Reports the process's CPU per put
// (getrusage, client and server together: compare builds of the server by
// alternating them) beside the allocations.
func BenchmarkPutGRPC(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			r := startTest(b, testOptions())
			clis := make([]*clientv3.Client, writers)
			for i := range clis {
				clis[i] = newClient(b, r.Endpoint())
			}
			ctx := context.Background()
			val := string(make([]byte, 128))
			for i := range 100 { // connections up, stacks grown
				if _, err := clis[i%writers].Put(ctx, "bench/warm", val); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			var wg sync.WaitGroup
			per := (b.N + writers - 1) / writers
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						if _, err := clis[w].Put(ctx, fmt.Sprintf("bench/%06d", (w*100_003+i)%1000), val); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(per*writers), "cpu-µs/put")
		})
	}
}

// processCPU returns the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
