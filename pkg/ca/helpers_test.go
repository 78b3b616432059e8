package ca

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/pki"
)

var discard = slog.New(slog.DiscardHandler)

// templateDir holds one CA made with 2048-bit keys, copied by openCA so most
// tests do not pay for RSA key generation.
var templateDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "ca-template-*")
	if err != nil {
		return "", err
	}
	c, err := Open(context.Background(), filepath.Join(dir, "ca"), Options{Name: "puppet.test", KeyBits: 2048, Logger: discard})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "ca"), c.Close()
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := templateDir(); err == nil {
		os.RemoveAll(filepath.Dir(dir))
	}
	os.Exit(code)
}

// openCA opens a copy of the template CA (name "puppet.test", 2048 bits)
// with opts; Name and KeyBits in opts are ignored.
func openCA(t testing.TB, opts Options) *CA {
	t.Helper()
	tmpl, err := templateDir()
	if err != nil {
		t.Fatalf("template CA: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "ca")
	if err := os.CopyFS(dir, os.DirFS(tmpl)); err != nil {
		t.Fatalf("copy template CA: %v", err)
	}
	return openDir(t, dir, opts)
}

// freshCA creates a new CA in a new directory (2048 bits unless opts say).
func freshCA(t testing.TB, opts Options) (*CA, string) {
	t.Helper()
	if opts.KeyBits == 0 {
		opts.KeyBits = 2048
	}
	dir := filepath.Join(t.TempDir(), "ca")
	return openDir(t, dir, opts), dir
}

func openDir(t testing.TB, dir string, opts Options) *CA {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard
	}
	if opts.KeyBits == 0 {
		opts.KeyBits = 2048
	}
	c, err := Open(t.Context(), dir, opts)
	if err != nil {
		t.Fatalf("Open %s: %v", dir, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var rsa2048 = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

func rsaKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa2048()
	if err != nil {
		t.Fatalf("generate RSA key: %v", err)
	}
	return k
}

func ecKey(t testing.TB, curve elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatalf("generate EC key: %v", err)
	}
	return k
}

// csrSpec describes a certificate request to build.
type csrSpec struct {
	cn     string
	key    crypto.Signer // default: a new ECDSA P-256 key
	dns    []string
	ips    []net.IP
	emails []string
	exts   []pkix.Extension
}

func makeCSR(t testing.TB, s csrSpec) []byte {
	t.Helper()
	if s.key == nil {
		s.key = ecKey(t, elliptic.P256())
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: s.cn},
		DNSNames:        s.dns,
		IPAddresses:     s.ips,
		EmailAddresses:  s.emails,
		ExtraExtensions: s.exts,
	}, s.key)
	if err != nil {
		t.Fatalf("create CSR: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func mustParseCert(t testing.TB, data []byte) *x509.Certificate {
	t.Helper()
	cert, err := pki.ParseCertPEM(data)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return cert
}

func mustReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}

func mustWriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func pemKey(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// Views of a CA opened with Open on its directory store, for tests that
// look at or damage the files.
func (c *CA) ds() *DirStore                      { return c.store.(*DirStore) }
func (c *CA) dir() string                        { return c.ds().dir }
func (c *CA) path(elem ...string) string         { return c.ds().path(elem...) }
func (c *CA) signedPath(certname string) string  { return c.ds().signedPath(certname) }
func (c *CA) names(sub string) ([]string, error) { return c.ds().names(sub) }
func (c *CA) readSerial() (*big.Int, error)      { return c.ds().readSerial() }
