// Package certtest writes the certificates a TLS test needs: a CA, a server
// certificate for the loopback addresses signed by it, a client certificate
// signed by it, and a client certificate signed by another CA (one a
// server that requires client certificates must refuse). Everything is
// made fresh with crypto/x509 (ECDSA P-256), valid for a day.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// Files are the PEM files written by Write.
type Files struct {
	CA                    string // the CA's certificate (etcd's --trusted-ca-file, etcdctl's --cacert)
	ServerCert, ServerKey string // for 127.0.0.1, ::1 and localhost (--cert-file, --key-file)
	ClientCert, ClientKey string // signed by CA, CN "client" (etcdctl's --cert, --key)
	// StrangerCert and StrangerKey are a client certificate signed by
	// another CA.
	StrangerCert, StrangerKey string
}

// Write writes fresh certificates into dir.
func Write(dir string) (Files, error) {
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		StrangerCert: filepath.Join(dir, "stranger.pem"), StrangerKey: filepath.Join(dir, "stranger-key.pem"),
	}
	ca, caKey, err := newCA("watchspec test CA")
	if err != nil {
		return f, err
	}
	if err := writeCert(f.CA, ca.Raw); err != nil {
		return f, err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if err := issue(server, ca, caKey, f.ServerCert, f.ServerKey); err != nil {
		return f, err
	}
	client := &x509.Certificate{Subject: pkix.Name{CommonName: "client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := issue(client, ca, caKey, f.ClientCert, f.ClientKey); err != nil {
		return f, err
	}
	other, otherKey, err := newCA("another CA")
	if err != nil {
		return f, err
	}
	stranger := &x509.Certificate{Subject: pkix.Name{CommonName: "stranger"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := issue(stranger, other, otherKey, f.StrangerCert, f.StrangerKey); err != nil {
		return f, err
	}
	return f, nil
}

var serial atomic.Int64

func template(t *x509.Certificate) *x509.Certificate {
	t.SerialNumber = big.NewInt(serial.Add(1))
	t.NotBefore = time.Now().Add(-time.Hour)
	t.NotAfter = time.Now().Add(24 * time.Hour)
	t.KeyUsage |= x509.KeyUsageDigitalSignature
	return t
}

func newCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	t := template(&x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	})
	der, err := x509.CreateCertificate(rand.Reader, t, t, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func issue(t, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, template(t), ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("certtest: %s: %w", certFile, err)
	}
	if err := writeCert(certFile, der); err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

func writeCert(file string, der []byte) error {
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
