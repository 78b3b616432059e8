package agentcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pki"
)

// testCA is a throwaway CA that signs client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	farm *Farm
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * 365 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, farm: &Farm{Target: "127.0.0.1:1", Roots: pool}}
}

// issue returns an agent identity for name valid until notAfter, and its key PEM.
func (c *testCA) issue(t *testing.T, name string, notAfter time.Time) (*Agent, []byte) {
	t.Helper()
	key, keyPEM, err := pki.NewServerKey(KeyECDSA, 0)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return &Agent{Name: name, Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}, keyPEM
}

func TestStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCA(t)
	a, keyPEM := c.issue(t, "a.example.test", time.Now().Add(30*24*time.Hour))
	if err := s.Save(a, keyPEM); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a.example.test.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stored file: %v, %v", fi, err)
	}
	expiring, keyPEM2 := c.issue(t, "b.example.test", time.Now().Add(time.Hour))
	if err := s.Save(expiring, keyPEM2); err != nil {
		t.Fatal(err)
	}
	other := newTestCA(t)

	for _, tc := range []struct {
		what string
		farm *Farm
		name string
		ok   bool
	}{
		{"same CA", c.farm, "a.example.test", true},
		{"another CA (the broker's data was reset)", other.farm, "a.example.test", false},
		{"never stored", c.farm, "c.example.test", false},
		{"expires within a day", c.farm, "b.example.test", false},
		{"not a file name", c.farm, "../a.example.test", false},
	} {
		got, ok := s.Load(tc.farm, tc.name)
		if ok != tc.ok {
			t.Errorf("%s: Load(%q) ok = %v, want %v", tc.what, tc.name, ok, tc.ok)
			continue
		}
		if ok && (got.Name != tc.name || got.Cert.Leaf == nil || got.Cert.PrivateKey == nil) {
			t.Errorf("%s: Load(%q) = %+v", tc.what, tc.name, got)
		}
	}
}
