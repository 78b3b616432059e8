package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// benchCA is a throwaway certificate authority that lives for one run: an
// ECDSA P-256 key in memory, as the farm's agents' keys are. It is not the
// farm's CA (pkg/ca): signing 10,000 client certificates through that one
// would measure the CA, not the broker.
type benchCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial atomic.Int64
}

// The files `pcpbench serve --certs DIR` reads.
const (
	caFile        = "ca.pem"
	serverFile    = "broker.pem"
	serverKeyFile = "broker-key.pem"
)

// brokerCN is the broker certificate's common name.
const brokerCN = "pcpbench-broker"

func newBenchCA() (*benchCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pcpbench CA " + now.UTC().Format(time.RFC3339)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &benchCA{cert: cert, key: key}
	ca.serial.Store(1)
	return ca, nil
}

// issue signs a new key's certificate for cn: a server certificate for
// loopback (127.0.0.1, ::1, localhost) when server is set, else a client
// certificate.
func (ca *benchCA) issue(cn string, server bool) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = []string{"localhost", cn}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// issueAll signs a client certificate for each name, on every CPU.
func (ca *benchCA) issueAll(names []string) ([]tls.Certificate, error) {
	certs := make([]tls.Certificate, len(names))
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) {
					return
				}
				c, err := ca.issue(names[i], false)
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("signing %s: %w", names[i], err) })
					return
				}
				certs[i] = c
			}
		}()
	}
	wg.Wait()
	return certs, firstErr
}

// pool is a certificate pool holding the CA.
func (ca *benchCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// writeServerFiles writes the CA certificate and a new broker certificate
// and key into dir, for `pcpbench serve --certs dir`.
func (ca *benchCA) writeServerFiles(dir string) error {
	srv, err := ca.issue(brokerCN, true)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srv.PrivateKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		caFile:        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}),
		serverFile:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate[0]}),
		serverKeyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// loadServerFiles reads what writeServerFiles wrote: the broker's TLS
// certificate and the CA certificate its clients' certificates chain to.
func loadServerFiles(dir string) (tls.Certificate, *x509.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, serverFile), filepath.Join(dir, serverKeyFile))
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("the broker's certificate in %s: %w", dir, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, caFile))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return tls.Certificate{}, nil, fmt.Errorf("%s: no CA certificate", filepath.Join(dir, caFile))
	}
	caCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%s: %w", filepath.Join(dir, caFile), err)
	}
	return cert, caCert, nil
}
