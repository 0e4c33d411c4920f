package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TLS for the commands, with etcd's own configuration builder
// (go.etcd.io/etcd/client/pkg/v3/transport.TLSInfo), so that the flags
// mean exactly what they mean to etcd and etcdctl: the certificate and key
// are read again at every handshake (rotation works), TLS 1.2 at least.

// serverTLSFlags are etcd's server flags: --cert-file, --key-file,
// --trusted-ca-file, --client-cert-auth.
type serverTLSFlags struct {
	certFile, keyFile, trustedCAFile string
	clientCertAuth                   bool
}

func (f *serverTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.certFile, "cert-file", "", "serve TLS only, with the certificate in `FILE` (PEM; etcd's --cert-file)")
	fs.StringVar(&f.keyFile, "key-file", "", "the certificate's private key in `FILE` (PEM; etcd's --key-file)")
	fs.StringVar(&f.trustedCAFile, "trusted-ca-file", "", "require client certificates signed by the CA in `FILE` (PEM; etcd's --trusted-ca-file)")
	fs.BoolVar(&f.clientCertAuth, "client-cert-auth", false, "require client certificates (etcd's --client-cert-auth; verified against --trusted-ca-file)")
}

// config returns the server's TLS configuration, nil for plaintext.
func (f *serverTLSFlags) config() (*tls.Config, error) {
	switch {
	case f.certFile == "" && f.keyFile == "" && f.trustedCAFile == "" && !f.clientCertAuth:
		return nil, nil
	case f.certFile == "" || f.keyFile == "":
		return nil, errors.New("--cert-file and --key-file go together, and --trusted-ca-file and --client-cert-auth need them: TLS needs the server's certificate and key")
	case f.clientCertAuth && f.trustedCAFile == "":
		return nil, errors.New("--client-cert-auth needs --trusted-ca-file, the CA that signs the clients' certificates")
	}
	info := transport.TLSInfo{CertFile: f.certFile, KeyFile: f.keyFile, TrustedCAFile: f.trustedCAFile, ClientCertAuth: f.clientCertAuth}
	cfg, err := info.ServerConfig()
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return cfg, nil
}

// clientTLSFlags are etcdctl's client flags: --cacert, --cert, --key,
// --insecure-skip-tls-verify.
type clientTLSFlags struct {
	caFile, certFile, keyFile string
	insecureSkipVerify        bool
}

func (f *clientTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.caFile, "cacert", "", "verify the server's certificate with the CA in `FILE` (PEM; etcdctl's --cacert)")
	fs.StringVar(&f.certFile, "cert", "", "identify with the client certificate in `FILE` (PEM; etcdctl's --cert)")
	fs.StringVar(&f.keyFile, "key", "", "the client certificate's private key in `FILE` (PEM; etcdctl's --key)")
	fs.BoolVar(&f.insecureSkipVerify, "insecure-skip-tls-verify", false, "do not verify the server's certificate (etcdctl's flag of the same name; for tests only)")
}

// set reports whether any TLS flag was given.
func (f *clientTLSFlags) set() bool {
	return f.caFile != "" || f.certFile != "" || f.keyFile != "" || f.insecureSkipVerify
}

// config returns the client's TLS configuration, nil when no flag was
// given, as etcdctl builds it (etcdctl/ctlv3/command/global.go).
func (f *clientTLSFlags) config() (*tls.Config, error) {
	if !f.set() {
		return nil, nil
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, errors.New("--cert and --key go together")
	}
	info := transport.TLSInfo{CertFile: f.certFile, KeyFile: f.keyFile, TrustedCAFile: f.caFile, InsecureSkipVerify: f.insecureSkipVerify}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return cfg, nil
}

// checkTLSEndpoints refuses endpoints that would silently drop the TLS
// configuration: clientv3 dials an http:// endpoint in plaintext whatever
// its Config.TLS says.
func checkTLSEndpoints(endpoints []string, tlsOn bool) error {
	for _, ep := range endpoints {
		switch {
		case tlsOn && strings.HasPrefix(ep, "http://"):
			return fmt.Errorf("endpoint %s is plaintext (http://) but TLS flags were given: use https://", ep)
		case !tlsOn && strings.HasPrefix(ep, "https://"):
			return fmt.Errorf("endpoint %s needs TLS: give --cacert (and --cert, --key if the server requires client certificates)", ep)
		}
	}
	return nil
}

// tlsDial returns a function that connects a clientv3 client with the TLS
// configuration cfg (nil: plaintext) — the shape of conform.Config.Dial.
func tlsDial(cfg *tls.Config) func(clientv3.Config) (*clientv3.Client, error) {
	return func(c clientv3.Config) (*clientv3.Client, error) {
		if cfg != nil {
			c.TLS = cfg.Clone()
		}
		return clientv3.New(c)
	}
}
