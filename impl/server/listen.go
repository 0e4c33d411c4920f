package server

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"sync"
	"time"
)

// http2Preface is what every HTTP/2 connection with prior knowledge — a
// gRPC client on an insecure port — sends first (RFC 9113 §3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniffTimeout bounds how long a new connection may take to send its first
// bytes before it is closed.
const sniffTimeout = 30 * time.Second

// connSplitter shares one listener between gRPC and HTTP/1, as etcd's client
// port does with cmux (embed/serve.go: cmux.HTTP2() to gRPC, cmux.HTTP1()
// to HTTP): a connection that opens with the HTTP/2 preface goes to the
// gRPC listener, any other to the HTTP listener. Unlike cmux, Close also
// closes the connections still being sniffed, so that a stop never waits
// for a client that connected and sent nothing.
type connSplitter struct {
	root       net.Listener
	grpc, http *chanListener

	mu       sync.Mutex
	sniffing map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

func newConnSplitter(root net.Listener) *connSplitter {
	return &connSplitter{
		root:     root,
		grpc:     newChanListener(root.Addr()),
		http:     newChanListener(root.Addr()),
		sniffing: make(map[net.Conn]struct{}),
	}
}

// serve accepts connections until the root listener fails or Close; it
// returns the root listener's error (net.ErrClosed after Close).
func (m *connSplitter) serve() error {
	var delay time.Duration
	for {
		c, err := m.root.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// As net/http: back off on EMFILE-like timeouts.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			m.Close()
			return err
		}
		delay = 0
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			continue
		}
		m.sniffing[c] = struct{}{}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.route(c)
	}
}

// route reads as much of c's first bytes as tells HTTP/2 from anything
// else and hands c, with those bytes to be read again, to its listener.
func (m *connSplitter) route(c net.Conn) {
	defer m.wg.Done()
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, len(http2Preface))
	h2 := true
	for n := 1; n <= len(http2Preface); n++ {
		b, err := br.Peek(n)
		if err != nil {
			m.drop(c)
			c.Close()
			return
		}
		if !bytes.Equal(b, []byte(http2Preface[:n])) {
			h2 = false
			break
		}
	}
	c.SetReadDeadline(time.Time{})
	if !m.drop(c) {
		c.Close() // closed meanwhile
		return
	}
	to := m.http
	if h2 {
		to = m.grpc
	}
	if !to.deliver(&peekedConn{Conn: c, r: br}) {
		c.Close()
	}
}

// drop forgets c as being sniffed; false if the splitter was closed.
func (m *connSplitter) drop(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sniffing, c)
	return !m.closed
}

// Close closes the root listener, the connections being sniffed and both
// listeners (their Accept returns net.ErrClosed). Connections already
// handed over are their servers' to close.
func (m *connSplitter) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for c := range m.sniffing {
		c.Close()
	}
	m.mu.Unlock()
	err := m.root.Close()
	m.grpc.Close()
	m.http.Close()
	m.wg.Wait()
	return err
}

// chanListener is a net.Listener fed by a connSplitter.
type chanListener struct {
	addr      net.Addr
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}
