package adversary_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchspec/watchspec/adversary"
)

// A client under the adversary: whatever it chooses — responses split or
// joined, the watch held back, the stream reset — a correct watcher
// receives every event once, in order. In a test, adversary.Run(t, seed)
// starts and closes the server and logs its choices when the test fails.
func Example() {
	srv, err := adversary.Start(1, adversary.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	wc := cli.Watch(ctx, "job/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	<-wc // the watch is live
	for i := range 50 {
		if _, err := cli.Put(ctx, fmt.Sprintf("job/%02d", i), "queued"); err != nil {
			log.Fatal(err)
		}
	}
	events := 0
	for events < 50 {
		resp := <-wc
		for _, ev := range resp.Events {
			if want := fmt.Sprintf("job/%02d", events); string(ev.Kv.Key) != want {
				log.Fatalf("got %s, want %s", ev.Kv.Key, want)
			}
			events++
		}
	}
	fmt.Println(events, "events, in order")
	fmt.Println("seed", srv.Seed(), "held the watch back:", srv.Report().Counts["hold"] > 0)
	// Output:
	// 50 events, in order
	// seed 1 held the watch back: true
}
