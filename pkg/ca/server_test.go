package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestIssueServerCert(t *testing.T) {
	tests := []struct {
		name     string
		alt      []string
		keyType  string
		wantDNS  []string
		wantIPs  []string
		wantKU   x509.KeyUsage
		checkKey func(any) bool
	}{
		{name: "default ECDSA P-256", alt: []string{"puppet", "localhost"},
			wantDNS: []string{"puppet.test", "puppet", "localhost"}, wantKU: x509.KeyUsageDigitalSignature,
			checkKey: func(k any) bool { e, ok := k.(*ecdsa.PublicKey); return ok && e.Curve == elliptic.P256() }},
		{name: "RSA", alt: []string{"puppet"}, keyType: pki.KeyRSA,
			wantDNS: []string{"puppet.test", "puppet"}, wantKU: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			checkKey: func(k any) bool { r, ok := k.(*rsa.PublicKey); return ok && r.N.BitLen() == 2048 }},
		{name: "Puppet's dns_alt_names notation, IPs, case and duplicates",
			alt:     []string{"DNS:Puppet", "IP:10.0.0.5", "192.0.2.1", "::1", "puppet", "puppet.test", " localhost "},
			keyType: pki.KeyECDSAP256,
			wantDNS: []string{"puppet.test", "puppet", "localhost"}, wantIPs: []string{"10.0.0.5", "192.0.2.1", "::1"},
			wantKU:   x509.KeyUsageDigitalSignature,
			checkKey: func(k any) bool { _, ok := k.(*ecdsa.PublicKey); return ok }},
		{name: "no alt names", wantDNS: []string{"puppet.test"}, wantKU: x509.KeyUsageDigitalSignature,
			checkKey: func(k any) bool { _, ok := k.(*ecdsa.PublicKey); return ok }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := openCA(t, Options{})
			got, err := c.IssueServerCert(t.Context(), "puppet.test", tc.alt, tc.keyType)
			if err != nil {
				t.Fatalf("IssueServerCert: %v", err)
			}
			leaf := got.Leaf
			if leaf == nil || len(got.Certificate) != 1 || got.PrivateKey == nil {
				t.Fatalf("incomplete tls.Certificate: %+v", got)
			}
			if leaf.Subject.CommonName != "puppet.test" || !slices.Equal(leaf.DNSNames, tc.wantDNS) {
				t.Errorf("CN %q DNS %v, want puppet.test %v", leaf.Subject.CommonName, leaf.DNSNames, tc.wantDNS)
			}
			var ips []string
			for _, ip := range leaf.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tc.wantIPs) {
				t.Errorf("IPs %v, want %v", ips, tc.wantIPs)
			}
			if leaf.KeyUsage != tc.wantKU {
				t.Errorf("key usage %v, want %v", leaf.KeyUsage, tc.wantKU)
			}
			if !tc.checkKey(leaf.PublicKey) {
				t.Errorf("key %T is not the requested type", leaf.PublicKey)
			}
			for _, name := range append(append([]string{}, tc.wantDNS...), tc.wantIPs...) {
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.Pool(), DNSName: name,
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
					t.Errorf("verify as server %q: %v", name, err)
				}
			}
			if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
				t.Errorf("EKU %v", leaf.ExtKeyUsage)
			}
			if !slices.ContainsFunc(leaf.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(oidPuppetCliAuth) }) {
				t.Errorf("no pp_cli_auth extension, which Puppet Server puts on its own certificate")
			}
			// Kept on disk like Puppet's own certificate, key private.
			if signed := mustParseCert(t, c.signedPEM(t, "puppet.test")); !signed.Equal(leaf) {
				t.Errorf("signed/puppet.test.pem is not the server certificate")
			}
			info, err := os.Stat(filepath.Join(c.opts.ServerDir, "puppet.test.key"))
			if err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("server key file: %v, mode %v", err, info.Mode())
			}
		})
	}
}

func TestIssueServerCertRefuses(t *testing.T) {
	c := openCA(t, Options{})
	tests := []struct {
		name     string
		certname string
		alt      []string
		keyType  string
	}{
		{"unknown key type", "puppet.test", nil, "dsa"},
		{"wildcard alt name", "puppet.test", []string{"*.example.test"}, ""},
		{"bad IP alt name", "puppet.test", []string{"IP:300.1.1.1"}, ""},
		{"empty alt name", "puppet.test", []string{""}, ""},
		{"bad certname", "Puppet", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.IssueServerCert(t.Context(), tc.certname, tc.alt, tc.keyType); !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("IssueServerCert: err = %v, want ErrInvalid", err)
			}
		})
	}
	if names, _ := os.ReadDir(c.opts.ServerDir); len(names) != 0 {
		t.Fatalf("refused requests left server certificates: %v", names)
	}
}

func TestServerCertReuse(t *testing.T) {
	base := []string{"puppet", "127.0.0.1"}
	tests := []struct {
		name   string
		change func(t *testing.T, c *CA, clk *clock) // between the first and second call
		alt    []string
		key    string
		reuse  bool
	}{
		{name: "same names", alt: base, reuse: true},
		{name: "fewer names", alt: []string{"puppet"}, reuse: true},
		{name: "names in another order and notation", alt: []string{"IP:127.0.0.1", "DNS:puppet"}, reuse: true},
		{name: "explicit default key type", alt: base, key: pki.KeyECDSAP256, reuse: true},
		{name: "a new DNS name", alt: append([]string{"puppet.example.test"}, base...)},
		{name: "a new IP", alt: append([]string{"10.9.8.7"}, base...)},
		{name: "another key type", alt: base, key: pki.KeyRSA},
		{name: "ten days on", alt: base, reuse: true,
			change: func(t *testing.T, c *CA, clk *clock) { clk.Add(10 * 24 * time.Hour) }},
		{name: "within 30 days of expiry", alt: base,
			change: func(t *testing.T, c *CA, clk *clock) { clk.Add(61 * 24 * time.Hour) }},
		{name: "revoked", alt: base,
			change: func(t *testing.T, c *CA, clk *clock) {
				if err := c.Revoke(t.Context(), "puppet.test"); err != nil {
					t.Fatalf("Revoke: %v", err)
				}
			}},
		{name: "key file damaged", alt: base,
			change: func(t *testing.T, c *CA, clk *clock) {
				mustWriteFile(t, filepath.Join(c.opts.ServerDir, "puppet.test.key"), []byte("garbage"))
			}},
		{name: "key of another certificate", alt: base,
			change: func(t *testing.T, c *CA, clk *clock) {
				mustWriteFile(t, filepath.Join(c.opts.ServerDir, "puppet.test.key"), pemKey(t, ecKey(t, elliptic.P256())))
			}},
		{name: "certificate of another CA", alt: base,
			change: func(t *testing.T, c *CA, clk *clock) {
				other := freshCA(t, Options{Name: "other"})
				o, err := other.IssueServerCert(t.Context(), "puppet.test", base, "")
				if err != nil {
					t.Fatalf("IssueServerCert at the other CA: %v", err)
				}
				mustWriteFile(t, filepath.Join(c.opts.ServerDir, "puppet.test.pem"), mustReadFile(t, filepath.Join(other.opts.ServerDir, "puppet.test.pem")))
				mustWriteFile(t, filepath.Join(c.opts.ServerDir, "puppet.test.key"), pemKey(t, o.PrivateKey.(*ecdsa.PrivateKey)))
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{t: time.Now()}
			c := openCA(t, Options{Now: clk.Now, Validity: 90 * 24 * time.Hour})
			first, err := c.IssueServerCert(t.Context(), "puppet.test", base, "")
			if err != nil {
				t.Fatalf("first IssueServerCert: %v", err)
			}
			if tc.change != nil {
				tc.change(t, c, clk)
			}
			second, err := c.IssueServerCert(t.Context(), "puppet.test", tc.alt, tc.key)
			if err != nil {
				t.Fatalf("second IssueServerCert: %v", err)
			}
			reused := second.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0
			if reused != tc.reuse {
				t.Fatalf("reused = %v, want %v", reused, tc.reuse)
			}
			// Whatever happened, what is on disk is what was returned.
			third, err := c.IssueServerCert(t.Context(), "puppet.test", tc.alt, tc.key)
			if err != nil {
				t.Fatalf("third IssueServerCert: %v", err)
			}
			if !third.Leaf.Equal(second.Leaf) {
				t.Fatalf("the certificate just issued was not kept")
			}
			if got := mustParseCert(t, c.signedPEM(t, "puppet.test")); !got.Equal(second.Leaf) {
				t.Fatalf("signed/ copy is stale")
			}
		})
	}
}
