package ca

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pki"
)

// The recorded Puppet Server 7.9.5 artefacts (from shared/puppet-protocol):
// its CA certificate ("Puppet CA: puppet.localdomain"), CRL, the agent
// certificate it signed for agent1.example.test and the agent's CSR.
const (
	goldenCACert    = "testdata/puppet-ca-cert.pem"
	goldenCRL       = "testdata/puppet-crl.pem"
	goldenAgentCert = "testdata/puppet-agent1-cert.pem"
	goldenAgentCSR  = "testdata/puppet-agent1-csr.pem"
)

// extShape is an extension's OID and criticality.
func extShape(exts []pkix.Extension) []string {
	var out []string
	for _, e := range exts {
		out = append(out, fmt.Sprintf("%s critical=%v", e.Id, e.Critical))
	}
	sort.Strings(out)
	return out
}

// akiTags lists the context tags present in an AuthorityKeyIdentifier.
func akiTags(t *testing.T, exts []pkix.Extension) []int {
	t.Helper()
	for _, e := range exts {
		if !e.Id.Equal(oidAuthorityKeyID) {
			continue
		}
		var seq asn1.RawValue
		if _, err := asn1.Unmarshal(e.Value, &seq); err != nil {
			t.Fatalf("AKI: %v", err)
		}
		var tags []int
		for rest := seq.Bytes; len(rest) > 0; {
			var f asn1.RawValue
			var err error
			if rest, err = asn1.Unmarshal(rest, &f); err != nil {
				t.Fatalf("AKI field: %v", err)
			}
			tags = append(tags, f.Tag)
		}
		return tags
	}
	t.Fatalf("no AKI")
	return nil
}

// goldenCA is a CA named like the recorded one, signing the recorded CSR.
func goldenCA(t *testing.T) (*CA, *x509.Certificate) {
	t.Helper()
	c := freshCA(t, Options{Name: "puppet.localdomain"})
	if err := c.SubmitCSR(t.Context(), "agent1.example.test", mustReadFile(t, goldenAgentCSR)); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(t.Context(), "agent1.example.test"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return c, mustParseCert(t, c.signedPEM(t, "agent1.example.test"))
}

func TestGoldenCertificates(t *testing.T) {
	c, ours := goldenCA(t)
	theirs := mustParseCert(t, mustReadFile(t, goldenAgentCert))
	theirCA := mustParseCert(t, mustReadFile(t, goldenCACert))

	t.Run("agent certificate", func(t *testing.T) {
		if !bytes.Equal(ours.RawSubject, theirs.RawSubject) {
			t.Errorf("subject encoding differs: %x vs Puppet's %x", ours.RawSubject, theirs.RawSubject)
		}
		if !bytes.Equal(ours.RawIssuer, theirs.RawIssuer) {
			t.Errorf("issuer encoding differs: %x vs Puppet's %x", ours.RawIssuer, theirs.RawIssuer)
		}
		if !pki.PublicKeysEqual(theirs.PublicKey, ours.PublicKey) {
			t.Errorf("certificate does not carry the CSR's key")
		}
		if got, want := extShape(ours.Extensions), extShape(theirs.Extensions); !slices.Equal(got, want) {
			t.Errorf("extensions:\n%s\nPuppet's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if got, want := akiTags(t, ours.Extensions), akiTags(t, theirs.Extensions); !slices.Equal(got, want) {
			t.Errorf("AKI fields %v, Puppet's %v (key id, issuer, serial)", got, want)
		}
		if ours.KeyUsage != theirs.KeyUsage || !slices.Equal(ours.ExtKeyUsage, theirs.ExtKeyUsage) ||
			ours.IsCA != theirs.IsCA || !slices.Equal(ours.DNSNames, theirs.DNSNames) {
			t.Errorf("usage/SAN differ: ours KU=%v EKU=%v CA=%v DNS=%v; Puppet's KU=%v EKU=%v CA=%v DNS=%v",
				ours.KeyUsage, ours.ExtKeyUsage, ours.IsCA, ours.DNSNames,
				theirs.KeyUsage, theirs.ExtKeyUsage, theirs.IsCA, theirs.DNSNames)
		}
		if got, want := ours.NotAfter.Sub(ours.NotBefore), theirs.NotAfter.Sub(theirs.NotBefore); got != want {
			t.Errorf("lifetime %s, Puppet's %s", got, want)
		}
		if ours.SignatureAlgorithm != theirs.SignatureAlgorithm {
			t.Errorf("signature algorithm %s, Puppet's %s", ours.SignatureAlgorithm, theirs.SignatureAlgorithm)
		}
		if ours.SerialNumber.Int64() != 2 {
			t.Errorf("first agent serial = %d, want 2 (the CA has 1)", ours.SerialNumber)
		}
	})

	t.Run("CA certificate", func(t *testing.T) {
		ca := c.CACert()
		if !bytes.Equal(ca.RawSubject, theirCA.RawSubject) {
			t.Errorf("CA subject encoding differs: %x vs Puppet's %x", ca.RawSubject, theirCA.RawSubject)
		}
		if got, want := extShape(ca.Extensions), extShape(theirCA.Extensions); !slices.Equal(got, want) {
			t.Errorf("CA extensions:\n%s\nPuppet's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if got, want := akiTags(t, ca.Extensions), akiTags(t, theirCA.Extensions); !slices.Equal(got, want) {
			t.Errorf("CA AKI fields %v, Puppet's %v", got, want)
		}
		if ca.KeyUsage != theirCA.KeyUsage || ca.MaxPathLen != theirCA.MaxPathLen || ca.SerialNumber.Cmp(theirCA.SerialNumber) != 0 {
			t.Errorf("CA KU=%v pathlen=%d serial=%d; Puppet's KU=%v pathlen=%d serial=%d",
				ca.KeyUsage, ca.MaxPathLen, ca.SerialNumber, theirCA.KeyUsage, theirCA.MaxPathLen, theirCA.SerialNumber)
		}
		if !bytes.Equal(ca.SubjectKeyId, akiKeyID(t, ca)) {
			t.Errorf("CA AKI key id is not its SKI")
		}
	})

	t.Run("CRL", func(t *testing.T) {
		oursCRL, err := x509.ParseRevocationList(mustPEMBytes(t, must(c.CRL(t.Context()))))
		if err != nil {
			t.Fatalf("parse CRL: %v", err)
		}
		theirCRL, err := x509.ParseRevocationList(mustPEMBytes(t, mustReadFile(t, goldenCRL)))
		if err != nil {
			t.Fatalf("parse Puppet's CRL: %v", err)
		}
		if !bytes.Equal(oursCRL.RawIssuer, theirCRL.RawIssuer) {
			t.Errorf("CRL issuer encoding differs")
		}
		if got, want := extShape(oursCRL.Extensions), extShape(theirCRL.Extensions); !slices.Equal(got, want) {
			t.Errorf("CRL extensions %v, Puppet's %v", got, want)
		}
		if oursCRL.Number.Sign() != 0 || theirCRL.Number.Sign() != 0 {
			t.Errorf("first CRL numbers: ours %d, Puppet's %d; want 0", oursCRL.Number, theirCRL.Number)
		}
		// Five years from signing, as Puppet's; thisUpdate a day before signing.
		if got, want := oursCRL.NextUpdate.Sub(oursCRL.ThisUpdate), 5*365*24*time.Hour+24*time.Hour; got != want {
			t.Errorf("CRL nextUpdate - thisUpdate = %s, want %s", got, want)
		}
	})
}

func akiKeyID(t *testing.T, cert *x509.Certificate) []byte {
	t.Helper()
	if len(cert.AuthorityKeyId) == 0 {
		t.Fatalf("no AKI key id")
	}
	return cert.AuthorityKeyId
}

// requireOpenSSL returns the openssl binary; the interop tests are part of
// the CA's proof, so a missing openssl fails them.
func requireOpenSSL(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is required to check the CA's output against OpenSSL (install the openssl package): %v", err)
	}
	return p
}

func opensslText(t *testing.T, openssl, kind, path string) string {
	t.Helper()
	out, err := exec.Command(openssl, kind, "-in", path, "-noout", "-text").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl %s -text %s: %v\n%s", kind, path, err, out)
	}
	return string(out)
}

// extHeaderRE matches the extension names in openssl's -text output.
var extHeaderRE = regexp.MustCompile(`(?m)^\s+((?:X509v3 [A-Za-z ]+|Netscape Comment)):( critical)?\s*$`)

func extHeaders(text string) []string {
	var out []string
	for _, m := range extHeaderRE.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1]+m[2])
	}
	sort.Strings(out)
	return out
}

// TestOpenSSLSeesWhatPuppetIssues compares openssl's reading of our
// certificates and CRL with its reading of Puppet Server's.
func TestOpenSSLSeesWhatPuppetIssues(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the openssl binary; skipped with -short")
	}
	openssl := requireOpenSSL(t)
	c, _ := goldenCA(t)
	for _, tc := range []struct{ name, kind, ours, theirs string }{
		{"agent certificate", "x509", writeTemp(t, "agent.pem", c.signedPEM(t, "agent1.example.test")), goldenAgentCert},
		{"CA certificate", "x509", writeTemp(t, "ca.pem", must(c.CACertificate(t.Context()))), goldenCACert},
		{"CRL", "crl", writeTemp(t, "crl.pem", must(c.CRL(t.Context()))), goldenCRL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours := opensslText(t, openssl, tc.kind, tc.ours)
			theirs := opensslText(t, openssl, tc.kind, filepath.FromSlash(tc.theirs))
			if got, want := extHeaders(ours), extHeaders(theirs); !slices.Equal(got, want) {
				t.Errorf("openssl sees extensions\n  %s\nin Puppet's:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			for _, line := range []string{
				"Issuer: CN = Puppet CA: puppet.localdomain",
				"Signature Algorithm: sha256WithRSAEncryption",
			} {
				if !strings.Contains(ours, line) {
					t.Errorf("openssl output lacks %q:\n%s", line, ours)
				}
			}
			var want []string
			switch tc.name {
			case "agent certificate":
				want = []string{"Subject: CN = agent1.example.test", "DNS:agent1.example.test", "CA:FALSE",
					"Digital Signature, Key Encipherment", "TLS Web Server Authentication, TLS Web Client Authentication",
					"Puppet Server Internal Certificate", "DirName:/CN=Puppet CA: puppet.localdomain", "serial:01"}
			case "CA certificate":
				want = []string{"Serial Number: 1 (0x1)", "CA:TRUE", "Certificate Sign, CRL Sign", "Puppet Server Internal Certificate"}
			case "CRL":
				want = []string{"Version 2 (0x1)", "X509v3 CRL Number:", "No Revoked Certificates."}
			}
			for _, w := range want {
				if !strings.Contains(ours, w) {
					t.Errorf("openssl output lacks %q:\n%s", w, ours)
				}
				if !strings.Contains(theirs, w) {
					t.Errorf("test expectation %q is not in Puppet's own output", w)
				}
			}
		})
	}
}
