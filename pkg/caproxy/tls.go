package caproxy

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/compilefarm/compilefarm/pkg/clientcert"
)

// Pool returns a pool holding the upstream CA certificate(s), for
// tls.Config.ClientCAs (and RootCAs of clients). Callers must not modify it.
func (c *CA) Pool() *x509.CertPool { return c.pool }

// VerifyConnection is a tls.Config.VerifyConnection for the front door, as
// package ca's: it refuses a client certificate the upstream CA has
// revoked (crypto/tls has already verified the chain against ClientCAs)
// and verifies fully when the config did not ask crypto/tls to.
// Connections without a client certificate pass: the CA endpoints serve
// them, and authorization is per path.
func (c *CA) VerifyConnection(cs tls.ConnectionState) error {
	return c.clientCheck().VerifyConnection(cs)
}

// VerifyPeer checks the certificates a TLS client presented (leaf first)
// against the upstream CA, as package ca's: a certificate that verified
// before has its dates and revocation checked only.
func (c *CA) VerifyPeer(certs []*x509.Certificate) error {
	return c.clientCheck().VerifyPeer(certs)
}

// ServerTLSConfig returns a TLS configuration for Puppet's port 8140, as
// package ca's: it presents server (from ServerCert), asks for client
// certificates without requiring them, verifies those given against the
// upstream CA and refuses revoked ones. Callers may adjust the result.
func (c *CA) ServerTLSConfig(server tls.Certificate) *tls.Config {
	return c.clientCheck().TLSConfig(server)
}

// clientCheck checks client certificates against the upstream CA
// certificate(s) and the upstream's CRL.
func (c *CA) clientCheck() clientcert.Check {
	return clientcert.Check{Roots: c.pool, Issuers: c.caCerts, IsRevoked: c.IsRevoked, Verified: c.verified}
}
