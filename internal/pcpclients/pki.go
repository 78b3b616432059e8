package pcpclients

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// Identity is a client's TLS identity as files, the way the real clients
// take it: the CA certificate, the client certificate and its key (PEM).
type Identity struct {
	Certname string
	CA       string
	Cert     string
	Key      string
}

// PKI is a throw-away farm CA (package ca) kept in a test's temporary
// directory.
type PKI struct {
	CA     *ca.CA
	Dir    string // where identities are written
	CAFile string // the CA certificate (PEM)

	mu     sync.Mutex
	server map[string]tls.Certificate
}

// NewPKI creates a CA (2048-bit key, autosigning) in t.TempDir().
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	c, err := cadir.OpenCA(context.Background(), filepath.Join(dir, "ca"), ca.Options{Name: "pcp-test", KeyBits: 2048, Autosign: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("pcpclients: creating a CA: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p := &PKI{CA: c, Dir: filepath.Join(dir, "ssl"), CAFile: filepath.Join(dir, "ssl", "ca.pem")}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	caPEM, err := c.CACertificate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p.CAFile, caPEM)
	return p
}

// Identity has the CA sign a certificate for certname (a new ECDSA P-256
// key) and writes it as <Dir>/<certname>.pem and .key.
func (p *PKI) Identity(t testing.TB, certname string) Identity {
	t.Helper()
	ctx := context.Background()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: certname}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	if err := p.CA.SubmitCSR(ctx, certname, csr); err != nil {
		t.Fatalf("pcpclients: submitting a request for %s: %v", certname, err)
	}
	cert, err := p.CA.Certificate(ctx, certname)
	if err != nil {
		t.Fatalf("pcpclients: the certificate of %s: %v", certname, err)
	}
	keyPEM, err := pki.EncodePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	id := Identity{Certname: certname, CA: p.CAFile, Cert: filepath.Join(p.Dir, certname+".pem"), Key: filepath.Join(p.Dir, certname+".key")}
	writeFile(t, id.Cert, cert)
	writeFile(t, id.Key, keyPEM)
	return id
}

// TLSCertificate loads id as a tls.Certificate, for Go test clients.
func (id Identity) TLSCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(id.Cert, id.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ServerTLS returns a broker's TLS configuration as the farm serves PCP:
// a certificate from the CA for certname with the names 127.0.0.1 and
// localhost (pxp-agent checks the name against the URL's host), client
// certificates required and verified against the CA, revoked ones refused
// (VerifyConnection), TLS 1.2 at least (pxp-agent speaks only 1.2).
func (p *PKI) ServerTLS(t testing.TB, certname string) *tls.Config {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cert, ok := p.server[certname]
	if !ok {
		var err error
		cert, err = p.CA.IssueServerCert(context.Background(), certname, []string{"127.0.0.1", "localhost"}, "")
		if err != nil {
			t.Fatalf("pcpclients: the broker's certificate: %v", err)
		}
		if p.server == nil {
			p.server = map[string]tls.Certificate{}
		}
		p.server[certname] = cert
	}
	return &tls.Config{
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        p.CA.Pool(),
		MinVersion:       tls.VersionTLS12,
		VerifyConnection: p.CA.VerifyConnection,
	}
}

// ClientTLS returns a Go client configuration for id against a broker of
// this CA.
func (p *PKI) ClientTLS(t testing.TB, id Identity) *tls.Config {
	t.Helper()
	return &tls.Config{
		Certificates: []tls.Certificate{id.TLSCertificate(t)},
		RootCAs:      p.CA.Pool(),
		MinVersion:   tls.VersionTLS12,
	}
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
