package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

var discard = slog.New(slog.DiscardHandler)

// caKeyPEM is one 2048-bit CA key, imported into the key source of
// openCA's CAs so most tests do not pay for RSA key generation.
var caKeyPEM = sync.OnceValues(func() ([]byte, error) {
	_, keyPEM, err := pki.NewRSAKey(2048)
	return keyPEM, err
})

// openCA creates a CA (name "puppet.test" unless opts say) in a new memory
// store, with the shared 2048-bit key; opts.KeyBits is ignored.
func openCA(t testing.TB, opts Options) *CA {
	t.Helper()
	keyPEM, err := caKeyPEM()
	if err != nil {
		t.Fatalf("CA key: %v", err)
	}
	keys := memstore.NewCAKey()
	if err := keys.ImportKey(t.Context(), keyPEM); err != nil {
		t.Fatalf("import CA key: %v", err)
	}
	if opts.Name == "" {
		opts.Name = "puppet.test"
	}
	return initCA(t, memstore.NewCAStore(), keys, opts)
}

// freshCA creates a CA in a new memory store with a new key (2048 bits
// unless opts say).
func freshCA(t testing.TB, opts Options) *CA {
	t.Helper()
	return initCA(t, memstore.NewCAStore(), memstore.NewCAKey(), opts)
}

// reopen opens c's store and key again with opts, as another process
// would, sharing c's ServerDir.
func reopen(t testing.TB, c *CA, opts Options) *CA {
	t.Helper()
	opts.ServerDir = c.opts.ServerDir
	return initCA(t, c.store, c.keys, opts)
}

func initCA(t testing.TB, store farm.CAStore, keys farm.CAKeySource, opts Options) *CA {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard
	}
	if opts.KeyBits == 0 {
		opts.KeyBits = 2048
	}
	if opts.ServerDir == "" {
		opts.ServerDir = t.TempDir()
	}
	c, err := Init(t.Context(), store, keys, opts)
	if err != nil {
		t.Fatalf("Init: %v", err)
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

// signedPEM is the certificate the store holds for certname.
func (c *CA) signedPEM(t testing.TB, certname string) []byte {
	t.Helper()
	b, err := c.store.Signed(t.Context(), certname)
	if err != nil {
		t.Fatalf("certificate of %s: %v", certname, err)
	}
	return b
}

// writeTemp writes data to a new file named name, for tools that read
// files (openssl), and returns its path.
func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	mustWriteFile(t, path, data)
	return path
}

// must is v, panicking (failing the test) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func mustPEMBytes(t testing.TB, data []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %.40q", data)
	}
	return block.Bytes
}
