package conformance

import (
	"net"
	"testing"
)

// freePort reserves a loopback port, released for etcd to bind.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
