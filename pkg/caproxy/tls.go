package caproxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"
)

// Pool returns a pool holding the upstream CA certificate(s), for
// tls.Config.ClientCAs (and RootCAs of clients). Callers must not modify it.
func (c *CA) Pool() *x509.CertPool { return c.pool }

// verifyClient checks a client certificate: issued by the upstream CA,
// valid now, good for client authentication, not revoked.
func (c *CA) verifyClient(cert *x509.Certificate, intermediates *x509.CertPool) error {
	if _, err := cert.Verify(x509.VerifyOptions{
		Roots:         c.pool,
		Intermediates: intermediates,
		CurrentTime:   time.Now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return fmt.Errorf("verify client certificate %q: %w", cert.Subject.CommonName, err)
	}
	if c.IsRevoked(cert.SerialNumber) {
		return fmt.Errorf("verify client certificate %q: certificate serial %s is revoked", cert.Subject.CommonName, formatSerial(cert.SerialNumber))
	}
	return nil
}

// issuedByUpstream reports whether cert names one of the trusted CA
// certificates as its issuer.
func (c *CA) issuedByUpstream(cert *x509.Certificate) bool {
	for _, ca := range c.caCerts {
		if bytes.Equal(cert.RawIssuer, ca.RawSubject) {
			return true
		}
	}
	return false
}

// VerifyConnection is a tls.Config.VerifyConnection for the front door, as
// package ca's: it refuses a client certificate the upstream CA has
// revoked (crypto/tls has already verified the chain against ClientCAs)
// and verifies fully when the config did not ask crypto/tls to.
// Connections without a client certificate pass: the CA endpoints serve
// them, and authorization is per path.
func (c *CA) VerifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	leaf := cs.PeerCertificates[0]
	if len(cs.VerifiedChains) == 0 {
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		return c.verifyClient(leaf, inter)
	}
	if c.issuedByUpstream(leaf) && c.IsRevoked(leaf.SerialNumber) {
		return fmt.Errorf("client certificate %q (serial %s) is revoked", leaf.Subject.CommonName, formatSerial(leaf.SerialNumber))
	}
	return nil
}

// ServerTLSConfig returns a TLS configuration for Puppet's port 8140, as
// package ca's: it presents server (from ServerCert), asks for client
// certificates without requiring them, verifies those given against the
// upstream CA and refuses revoked ones. Callers may adjust the result.
func (c *CA) ServerTLSConfig(server tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		Certificates:     []tls.Certificate{server},
		ClientAuth:       tls.VerifyClientCertIfGiven,
		ClientCAs:        c.pool,
		VerifyConnection: c.VerifyConnection,
	}
}
