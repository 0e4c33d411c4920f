package informertest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
)

// MemServer serves an http.Handler over in-memory connections (net.Pipe)
// instead of sockets: a client that dials through [MemServer.DialContext]
// and the server both run inside a testing/synctest bubble, where a
// goroutine blocked on a socket would keep the bubble from settling
// (testing/synctest's package doc: "Use a fake network implementation").
// Close it before the bubble ends.
type MemServer struct {
	srv    *http.Server
	ln     *memListener
	served chan struct{}
}

// ServeInMemory starts serving h.
func ServeInMemory(h http.Handler) *MemServer {
	s := &MemServer{srv: &http.Server{Handler: h}, ln: &memListener{conns: make(chan net.Conn), done: make(chan struct{})}, served: make(chan struct{})}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(s.ln) // ErrServerClosed once Close is called
	}()
	return s
}

// URL is the base URL to give clients (a rest.Config's Host); every
// address dials the same server.
func (s *MemServer) URL() string { return "http://in-memory.invalid" }

// DialContext connects to the server (an http.Transport's DialContext, a
// rest.Config's Dial).
func (s *MemServer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case s.ln.conns <- server:
		return client, nil
	case <-s.ln.done:
		return nil, errors.New("memserver: the server is closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops the server and closes every connection; requests being
// served see their context cancelled.
func (s *MemServer) Close() {
	_ = s.srv.Close() // closes the listener and every connection
	<-s.served
}

type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "in-memory" }
