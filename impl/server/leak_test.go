package server

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/watchspec/watchspec/impl/watchhub"
)

// killableDialer dials TCP and remembers every connection, so that a test
// can cut them all at once, as a crashed client or a broken network does.
type killableDialer struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func (d *killableDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, fmt.Errorf("killed")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *killableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		c.Close()
	}
}

// TestDisconnectLeavesNothing opens many watch streams with many watches —
// live, catching up from history, and stuck behind a client that never
// reads, so that the hub holds victims and unsynced watches — then cuts
// every client connection at once. The server must forget all of it: the
// hub ends with no stream and no watch, and the process goes back to the
// goroutines it had before the clients came (issue 5: "clients that
// disconnect mid-stream leave nothing behind").
func TestDisconnectLeavesNothing(t *testing.T) {
	const (
		clients          = 12
		streamsPerClient = 3
		watchesPerStream = 25
	)
	r := startTest(t, testOptions())
	rc := dialRaw(t, r.Addr())
	ctx := testCtx(t)
	value := strings.Repeat("v", 2048)
	for i := range 100 {
		if _, err := rc.kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i%10)), Value: []byte(value)}); err != nil {
			t.Fatal(err)
		}
	}
	rc.conn.Close()
	hub := r.Store().Hub()
	eventually(t, 30*time.Second, func() string {
		if st := hub.Stats(); st != (watchhub.Stats{}) {
			return fmt.Sprintf("hub before the clients: %+v", st)
		}
		return ""
	})
	baseline := runtime.NumGoroutine()

	d := &killableDialer{}
	var conns []*grpc.ClientConn
	for c := range clients {
		conn, err := grpc.NewClient("passthrough:///"+r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(d.dial))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		wc := pb.NewWatchClient(conn)
		for s := range streamsPerClient {
			ws, err := wc.Watch(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for w := range watchesPerStream {
				req := &pb.WatchCreateRequest{Key: []byte(fmt.Sprintf("k%02d", w%10)), PrevKv: w%2 == 0, ProgressNotify: w%5 == 0}
				switch w % 3 {
				case 0:
					req.StartRevision = 2 // catch up from the start of history
				case 1:
					req.RangeEnd = []byte("l") // a range, live
				}
				if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
					t.Fatal(err)
				}
			}
			switch (c + s) % 3 {
			case 0:
				// Read until the connection is cut: its watches stay synced.
				go func() {
					for {
						if _, err := ws.Recv(); err != nil {
							return
						}
					}
				}()
			case 1:
				// Read until the watches are created, then never again.
				for range watchesPerStream {
					if _, err := ws.Recv(); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Otherwise never read at all.
		}
	}
	// Everything is registered; more writes pile up behind the readers
	// that do not read.
	wrc := dialRaw(t, r.Addr())
	eventually(t, 30*time.Second, func() string {
		st := hub.Stats()
		if n := st.Synced + st.Unsynced + st.Victims; st.Streams != clients*streamsPerClient || n != clients*streamsPerClient*watchesPerStream {
			return fmt.Sprintf("hub with every client connected: %+v", st)
		}
		return ""
	})
	for i := range 100 {
		if _, err := wrc.kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i%10)), Value: []byte(value)}); err != nil {
			t.Fatal(err)
		}
	}
	wrc.conn.Close()
	st := hub.Stats()
	t.Logf("before the disconnect: %d goroutines (baseline %d), hub %+v", runtime.NumGoroutine(), baseline, st)

	d.kill()
	for _, c := range conns {
		c.Close()
	}
	eventually(t, 60*time.Second, func() string {
		if st := hub.Stats(); st != (watchhub.Stats{}) {
			return fmt.Sprintf("hub after the disconnect: %+v", st)
		}
		if n := runtime.NumGoroutine(); n > baseline {
			buf := make([]byte, 1<<20)
			return fmt.Sprintf("%d goroutines, baseline %d:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
		}
		return ""
	})
	t.Logf("after the disconnect: %d goroutines, hub %+v", runtime.NumGoroutine(), hub.Stats())
}
