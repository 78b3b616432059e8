package ca

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"time"
)

// ClientCheck checks the client certificates a Puppet TLS server (port
// 8140) is given: issued by one of a set of CAs, valid now, good for client
// authentication, not revoked. Client certificates are optional: the CA
// endpoints serve agents without one, and authorization is per path. Both
// this package's CA and a proxy to an upstream CA (package caproxy) build
// their VerifyConnection and ServerTLSConfig on it.
type ClientCheck struct {
	// Roots holds the CA certificates client certificates must chain to;
	// it is also the TLS configuration's ClientCAs.
	Roots *x509.CertPool
	// Issuers are the CA certificates whose revocations IsRevoked knows. A
	// client certificate crypto/tls has verified is refused when it names
	// one of them as its issuer and IsRevoked reports its serial.
	Issuers []*x509.Certificate
	// IsRevoked reports whether the certificate with this serial is
	// revoked (required).
	IsRevoked func(serial *big.Int) bool
	// Now is the time certificates are verified at (default time.Now).
	Now func() time.Time
}

// VerifyClient checks a client certificate: it chains to Roots (through
// intermediates, which may be nil), is valid now, is good for client
// authentication and is not revoked.
func (cc ClientCheck) VerifyClient(cert *x509.Certificate, intermediates *x509.CertPool) error {
	now := time.Now
	if cc.Now != nil {
		now = cc.Now
	}
	if _, err := cert.Verify(x509.VerifyOptions{
		Roots:         cc.Roots,
		Intermediates: intermediates,
		CurrentTime:   now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return fmt.Errorf("verify client certificate %q: %w", cert.Subject.CommonName, err)
	}
	if cc.IsRevoked(cert.SerialNumber) {
		return fmt.Errorf("verify client certificate %q: certificate serial %s is revoked", cert.Subject.CommonName, FormatSerial(cert.SerialNumber))
	}
	return nil
}

// VerifyConnection is a tls.Config.VerifyConnection: it refuses a client
// certificate that is revoked (crypto/tls has already verified the chain
// against ClientCAs) and verifies fully (VerifyClient, with the rest of the
// peer's chain as intermediates) when the configuration did not ask
// crypto/tls to. Connections without a client certificate pass.
func (cc ClientCheck) VerifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	leaf := cs.PeerCertificates[0]
	if len(cs.VerifiedChains) == 0 {
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		return cc.VerifyClient(leaf, inter)
	}
	if cc.issuedByIssuer(leaf) && cc.IsRevoked(leaf.SerialNumber) {
		return fmt.Errorf("client certificate %q (serial %s) is revoked", leaf.Subject.CommonName, FormatSerial(leaf.SerialNumber))
	}
	return nil
}

// TLSConfig returns a TLS server configuration that presents server, asks
// for client certificates without requiring them (VerifyClientCertIfGiven),
// verifies those given against Roots and refuses revoked ones
// (VerifyConnection), with TLS 1.2 at least. Callers may adjust the result
// (NextProtos, timeouts).
func (cc ClientCheck) TLSConfig(server tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		Certificates:     []tls.Certificate{server},
		ClientAuth:       tls.VerifyClientCertIfGiven,
		ClientCAs:        cc.Roots,
		VerifyConnection: cc.VerifyConnection,
	}
}

// issuedByIssuer reports whether cert names one of Issuers as its issuer.
func (cc ClientCheck) issuedByIssuer(cert *x509.Certificate) bool {
	for _, ca := range cc.Issuers {
		if bytes.Equal(cert.RawIssuer, ca.RawSubject) {
			return true
		}
	}
	return false
}
