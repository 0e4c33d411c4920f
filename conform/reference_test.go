package conform

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/watchspec/watchspec/impl/server"
	"github.com/watchspec/watchspec/traces"
)

// The reference server passes every property, also when it is restarted on
// its data directory every second while the clients ride through (a watcher
// resumes from its last revision, or starts again from the compaction
// revision). SPEC §2–§3.
func TestReferenceServerWithRestarts(t *testing.T) {
	dir := t.TempDir()
	r, err := server.Start(dir, "127.0.0.1:0", server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := r.Addr()
	defer func() { r.Close() }()
	cfg := Config{Endpoints: []string{r.Endpoint()}, Duration: 3 * time.Second, Seed: 3, Clients: 4, Watchers: 4,
		Leases: 2,
		System: "watchspec-reference", Progress: t.Logf, RestartEvery: time.Second,
		Restart: func(context.Context) error {
			if err := r.Close(); err != nil {
				return err
			}
			r, err = server.Start(dir, addr, server.Options{})
			return err
		}}
	var buf bytes.Buffer
	stats, err := Record(context.Background(), cfg, &buf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", stats)
	if stats.Restarts == 0 {
		t.Fatal("the server was never restarted")
	}
	tr, err := traces.Read(bytes.NewReader(buf.Bytes()), t.Name()+".ndjson")
	if err != nil {
		t.Fatal(err)
	}
	res := checkPasses(t, tr, buf.Bytes(), true)
	checkLeasesUsed(t, res, stats)
}
