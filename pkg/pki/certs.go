package pki

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"slices"
	"strings"
	"time"
)

// ParseCertPEM reads the first PEM block of data as a certificate.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return cert, nil
}

// Fingerprint is the SHA-256 of a certificate's (or request's) DER as
// colon-separated upper-case hex, as Puppet prints fingerprints.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// FormatSerial writes a certificate serial as Puppet does: upper-case hex,
// at least four digits (so 10 is "000A"). A nil serial gives "".
func FormatSerial(n *big.Int) string {
	if n == nil {
		return ""
	}
	s := strings.ToUpper(n.Text(16))
	for len(s) < 4 {
		s = "0" + s
	}
	return s
}

// LoadKeyPair reads a kept certificate (PEM) and its private key
// (ParsePrivateKey) and checks they belong together. When there is no
// usable pair it returns why, such as "none kept" when certPath does not
// exist, for a log line.
func LoadKeyPair(certPath, keyPath string) (cert *x509.Certificate, key crypto.Signer, why string) {
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, "none kept"
	}
	if err != nil {
		return nil, nil, err.Error()
	}
	cert, err = ParseCertPEM(certPEM)
	if err != nil {
		return nil, nil, "kept certificate unreadable: " + err.Error()
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, "kept key unreadable: " + err.Error()
	}
	key, err = ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, nil, "kept key unreadable: " + err.Error()
	}
	if !PublicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, nil, "kept key does not match kept certificate"
	}
	return cert, key, ""
}

// ServerCertUnfit says why a verified, unrevoked server certificate and its
// key should not be reused for a request for keyType and the names dnsNames
// and ips (as from SplitAltNames), or "": the key is of another type
// (KeyTypeOf), the certificate expires within its renewal window at now (30
// days, or a third of its lifetime if shorter), or it lacks one of the
// names.
func ServerCertUnfit(cert *x509.Certificate, key crypto.Signer, keyType string, now time.Time, dnsNames []string, ips []net.IP) string {
	if kt := KeyTypeOf(key); kt != keyType {
		return fmt.Sprintf("key is %s, %s requested", kt, keyType)
	}
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	renewBefore := min(30*24*time.Hour, lifetime/3)
	if cert.NotAfter.Sub(now) < renewBefore {
		return "certificate expires soon"
	}
	for _, n := range dnsNames {
		if !slices.Contains(cert.DNSNames, n) {
			return "certificate lacks DNS name " + n
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return "certificate lacks IP address " + ip.String()
		}
	}
	return ""
}
