package cachertest

import (
	"io"
	"net"
	"net/url"
	"sync"
)

// pauseProxy forwards TCP connections to target; while paused, it holds
// back what target sends (what the client sends still goes through), as a
// slow or congested network would. It is how the harness makes the watch
// cache lag etcd.
type pauseProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	gate   chan struct{} // closed while open; a fresh one while paused
	conns  []net.Conn
	closed bool
}

func newPauseProxy(target string) (*pauseProxy, error) {
	if u, err := urlHost(target); err == nil {
		target = u
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pauseProxy{ln: ln, target: target, gate: make(chan struct{})}
	close(p.gate)
	go p.serve()
	return p, nil
}

// addr is the proxy's endpoint, as an etcd client URL.
func (p *pauseProxy) addr() string { return "http://" + p.ln.Addr().String() }

func (p *pauseProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		t, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			t.Close()
			return
		}
		p.conns = append(p.conns, c, t)
		p.mu.Unlock()
		go func() {
			io.Copy(t, c) // client → etcd: never held back
			t.Close()
		}()
		go func() {
			p.copyGated(c, t) // etcd → client: held back while paused
			c.Close()
		}()
	}
}

func (p *pauseProxy) copyGated(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *pauseProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already paused
	}
}

func (p *pauseProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *pauseProxy) close() {
	p.resume()
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// urlHost returns the host:port of a client URL such as http://127.0.0.1:2379.
func urlHost(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
