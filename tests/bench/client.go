package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// byteCounter counts the bytes that cross the connections of a dialer.
type byteCounter struct {
	read, written atomic.Int64
}

func (b *byteCounter) reset() { b.read.Store(0); b.written.Store(0) }

// countConn is a net.Conn that counts what it reads (what the server sent)
// and writes (what the client sent).
type countConn struct {
	net.Conn
	c *byteCounter
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.c.read.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.c.written.Add(int64(n))
	return n, err
}

// dial returns a clientv3 client of endpoint; with counter, its connection
// counts its bytes there.
func dial(endpoint string, counter *byteCounter) (*clientv3.Client, error) {
	var opts []grpc.DialOption
	if counter != nil {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &countConn{Conn: c, c: counter}, nil
		}))
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		DialOptions: opts,
		Logger:      zap.NewNop(),
	})
}

// dialN dials n clients.
func dialN(endpoint string, n int, counter *byteCounter) ([]*clientv3.Client, error) {
	var clis []*clientv3.Client
	for range n {
		c, err := dial(endpoint, counter)
		if err != nil {
			closeAll(clis)
			return nil, err
		}
		clis = append(clis, c)
	}
	return clis, nil
}

func closeAll(clis []*clientv3.Client) {
	for _, c := range clis {
		c.Close()
	}
}

// prefixEnd is clientv3.GetPrefixRangeEnd.
func prefixEnd(p string) string { return clientv3.GetPrefixRangeEnd(p) }

// watchSet is a set of watches on one prefix, spread over gRPC Watch
// streams (perStream watches each) spread over the given clients'
// connections. The streams are etcd's raw Watch RPC, which is what
// clientv3.Watcher sends, without its goroutines and channels per watch:
// the driver shares two cores with the server and must cost it as little
// as possible.
type watchSet struct {
	streams []pb.Watch_WatchClient
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	created   atomic.Int64
	events    atomic.Int64
	responses atomic.Int64  // responses with events
	target    int64         // events after which done is closed (0: never)
	done      chan struct{} // closed when events reaches target
	once      sync.Once

	errMu sync.Mutex
	err   error

	// onEvents, if set, is called by a stream's receiving goroutine for
	// every response with events (receive time, the response).
	onEvents func(now time.Time, r *pb.WatchResponse)
}

// openWatches creates n watches on prefix from startRev (0: from now) and
// waits until every one is created. target is the number of events after
// which done is closed.
func openWatches(ctx context.Context, clis []*clientv3.Client, n, perStream int, prefix string, startRev, target int64,
	onEvents func(time.Time, *pb.WatchResponse)) (*watchSet, error) {
	ctx, cancel := context.WithCancel(ctx)
	ws := &watchSet{cancel: cancel, target: target, done: make(chan struct{}), onEvents: onEvents}
	nStreams := (n + perStream - 1) / perStream
	key, end := []byte(prefix), []byte(prefixEnd(prefix))
	for i := range nStreams {
		cli := clis[i%len(clis)]
		s, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
		if err != nil {
			ws.close()
			return nil, fmt.Errorf("opening watch stream %d: %v", i, err)
		}
		ws.streams = append(ws.streams, s)
		ws.wg.Add(1)
		go ws.recv(s)
	}
	// Create the watches, spread evenly, one stream after the other.
	for i, s := range ws.streams {
		k := perStream
		if i == len(ws.streams)-1 {
			k = n - perStream*(len(ws.streams)-1)
		}
		for range k {
			err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
				Key: key, RangeEnd: end, StartRevision: startRev}}})
			if err != nil {
				ws.close()
				return nil, fmt.Errorf("creating a watch: %v", err)
			}
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for ws.created.Load() < int64(n) {
		if err := ws.failed(); err != nil {
			ws.close()
			return nil, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			ws.close()
			return nil, fmt.Errorf("only %d of %d watches created", ws.created.Load(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return ws, nil
}

func (ws *watchSet) recv(s pb.Watch_WatchClient) {
	defer ws.wg.Done()
	for {
		r, err := s.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && s.Context().Err() == nil {
				ws.fail(err)
			}
			return
		}
		if r.Created {
			if r.Canceled {
				ws.fail(fmt.Errorf("watch refused: %s", r.CancelReason))
				return
			}
			ws.created.Add(1)
		}
		if r.Canceled && !r.Created {
			ws.fail(fmt.Errorf("watch %d cancelled (compact revision %d): %s", r.WatchId, r.CompactRevision, r.CancelReason))
			return
		}
		if len(r.Events) == 0 {
			continue
		}
		if ws.onEvents != nil {
			ws.onEvents(time.Now(), r)
		}
		ws.responses.Add(1)
		if n := ws.events.Add(int64(len(r.Events))); ws.target > 0 && n >= ws.target {
			ws.once.Do(func() { close(ws.done) })
		}
	}
}

func (ws *watchSet) fail(err error) {
	ws.errMu.Lock()
	if ws.err == nil {
		ws.err = err
	}
	ws.errMu.Unlock()
}

func (ws *watchSet) failed() error {
	ws.errMu.Lock()
	defer ws.errMu.Unlock()
	return ws.err
}

// wait waits until done, an error or the timeout.
func (ws *watchSet) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ws.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("timed out after %v with %d of %d events delivered", timeout, ws.events.Load(), ws.target)
		case <-tick.C:
			if err := ws.failed(); err != nil {
				return err
			}
		}
	}
}

func (ws *watchSet) close() {
	for _, s := range ws.streams {
		s.CloseSend()
	}
	ws.cancel()
	ws.wg.Wait()
}

// value returns a value of n bytes that starts with a decimal stamp.
func value(stamp int64, n int) string {
	s := strconv.FormatInt(stamp, 10)
	if len(s) >= n {
		return s
	}
	b := make([]byte, n)
	copy(b, s)
	b[len(s)] = ' '
	for i := len(s) + 1; i < n; i++ {
		b[i] = 'x'
	}
	return string(b)
}

// stampOf parses the stamp at the start of a value written by value.
func stampOf(v []byte) int64 {
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
