package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/peer"
)

// The adversary's connection resets (ChoiceConnReset) close the client's
// whole connection, not only the watch stream: the server remembers, by the
// client's address, every connection it accepted while an adversary is set,
// and a watch stream finds its own from its peer address.

// connTracker is a listener that remembers what it accepts until closed.
type connTracker struct {
	net.Listener
	conns    *sync.Map // client address → *trackedConn
	accepted *atomic.Int64
}

func (l connTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	l.accepted.Add(1)
	tc := &trackedConn{Conn: c, conns: l.conns}
	l.conns.Store(c.RemoteAddr().String(), tc)
	return tc, nil
}

type trackedConn struct {
	net.Conn
	conns *sync.Map
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.conns.CompareAndDelete(c.RemoteAddr().String(), c) })
	return c.Conn.Close()
}

// closeConnOf closes the connection the stream or call of ctx arrived on,
// if the server tracks it (an adversary is set).
func (s *Server) closeConnOf(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	if c, ok := s.advConns.Load(p.Addr.String()); ok {
		c.(net.Conn).Close()
	}
}
