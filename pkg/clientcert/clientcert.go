// Package clientcert checks the client certificates a Puppet TLS server
// (port 8140) is given against the CA certificates it trusts and their CRL,
// remembering the ones that verified; the built-in CA (package ca) and the
// proxy to an upstream CA (package caproxy) both serve TLS with it.
package clientcert

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"time"

	"github.com/compilefarm/compilefarm/pkg/pki"
)

// Check checks the client certificates a Puppet TLS server (port 8140) is
// given: issued by one of a set of CAs, valid now, good for client
// authentication, not revoked. Client certificates are optional: the CA
// endpoints serve agents without one, and authorization is per path. Both
// package ca's CA and a proxy to an upstream CA (package caproxy) build
// their VerifyConnection and ServerTLSConfig on it.
type Check struct {
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
	// Verified, when set, remembers the certificates that verified
	// against Roots, so that VerifyPeer checks a known one's dates and
	// revocation only; without it, every check verifies the chain.
	Verified *VerifiedCache
}

// VerifyClient checks a client certificate: it chains to Roots (through
// intermediates, which may be nil), is valid now, is good for client
// authentication and is not revoked.
func (cc Check) VerifyClient(cert *x509.Certificate, intermediates *x509.CertPool) error {
	now := cc.now()
	chains, err := cert.Verify(x509.VerifyOptions{
		Roots:         cc.Roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return fmt.Errorf("verify client certificate %q: %w", cert.Subject.CommonName, err)
	}
	if cc.Verified != nil {
		cc.Verified.remember(cert, chains[0])
	}
	return cc.checkRevoked(cert)
}

// VerifyPeer checks the certificates a TLS client presented (leaf first,
// then intermediates) as VerifyClient does. A leaf the Verified cache
// knows has its chain's dates and its revocation checked only.
func (cc Check) VerifyPeer(certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return fmt.Errorf("verify client certificate: none given")
	}
	leaf := certs[0]
	if cc.Verified != nil && cc.Verified.verifiedAt(leaf, cc.now()) {
		return cc.checkRevoked(leaf)
	}
	var inter *x509.CertPool
	if len(certs) > 1 {
		inter = x509.NewCertPool()
		for _, ic := range certs[1:] {
			inter.AddCert(ic)
		}
	}
	return cc.VerifyClient(leaf, inter)
}

func (cc Check) now() time.Time {
	if cc.Now != nil {
		return cc.Now()
	}
	return time.Now()
}

func (cc Check) checkRevoked(cert *x509.Certificate) error {
	if cc.IsRevoked(cert.SerialNumber) {
		return fmt.Errorf("verify client certificate %q: certificate serial %s is revoked", cert.Subject.CommonName, pki.FormatSerial(cert.SerialNumber))
	}
	return nil
}

// VerifyConnection is a tls.Config.VerifyConnection: it refuses a client
// certificate that is revoked (crypto/tls has already verified the chain
// against ClientCAs) and verifies fully (VerifyPeer) when the configuration
// did not ask crypto/tls to. Connections without a client certificate pass.
func (cc Check) VerifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	leaf := cs.PeerCertificates[0]
	if len(cs.VerifiedChains) == 0 {
		return cc.VerifyPeer(cs.PeerCertificates)
	}
	if cc.issuedByIssuer(leaf) && cc.IsRevoked(leaf.SerialNumber) {
		return fmt.Errorf("client certificate %q (serial %s) is revoked", leaf.Subject.CommonName, pki.FormatSerial(leaf.SerialNumber))
	}
	return nil
}

// TLSConfig returns a TLS server configuration that presents server, asks
// for client certificates without requiring them, verifies those given
// against Roots and refuses revoked ones (VerifyConnection), with TLS 1.2
// at least and no session tickets (agents never resume a session, and a
// resumed one would skip the client certificate's checks). Records are
// always full-size: agents read whole documents, and crypto/tls's small
// first records (one write each, about 1.2 KB) would cost a served catalog
// several system calls on every new connection, which is every agent run.
//
// crypto/tls only requests the certificate (RequestClientCert: it still
// checks the client's proof that it holds the key); VerifyConnection
// verifies the chain, through the Verified cache when there is one. So
// VerifiedChains stays empty: a server using this configuration asks
// VerifyPeer, not VerifiedChains, whether a request's certificate is good.
// Callers may adjust the result (NextProtos, timeouts).
func (cc Check) TLSConfig(server tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:                  tls.VersionTLS12,
		Certificates:                []tls.Certificate{server},
		ClientAuth:                  tls.RequestClientCert,
		ClientCAs:                   cc.Roots,
		VerifyConnection:            cc.VerifyConnection,
		SessionTicketsDisabled:      true,
		DynamicRecordSizingDisabled: true,
	}
}

// issuedByIssuer reports whether cert names one of Issuers as its issuer.
func (cc Check) issuedByIssuer(cert *x509.Certificate) bool {
	for _, ca := range cc.Issuers {
		if bytes.Equal(cert.RawIssuer, ca.RawSubject) {
			return true
		}
	}
	return false
}
