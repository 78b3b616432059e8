package ca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"time"

	"github.com/compilefarm/compilefarm/pkg/clientcert"
)

// CACert returns the CA certificate. Callers must not modify it.
func (c *CA) CACert() *x509.Certificate { return c.cert }

// Pool returns a pool holding the CA certificate, for tls.Config.ClientCAs
// (and RootCAs of clients). Callers must not modify it.
func (c *CA) Pool() *x509.CertPool { return c.pool }

// IsRevoked reports whether the CA has revoked the certificate with this
// serial. It answers from memory and is safe for concurrent use; at most
// once a second one caller also reads the store's CRL, picking up
// revocations made by other processes sharing the store.
func (c *CA) IsRevoked(serial *big.Int) bool {
	if serial == nil {
		return false
	}
	due := func() bool { return time.Since(time.Unix(0, c.lastCheck.Load())) > refreshEvery }
	if due() && c.reloadMu.TryLock() {
		// Look again: another caller may have refreshed since the first look.
		if due() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := c.refreshCRLLocked(ctx); err != nil {
				c.log.Error("refresh CRL", "err", err)
			}
			cancel()
		}
		c.reloadMu.Unlock()
	}
	return c.crl.Load().revokes(serial)
}

// VerifyClient checks a client certificate the way the front door must:
// issued by this CA, valid now, good for client authentication, not revoked.
// intermediates may be nil.
func (c *CA) VerifyClient(cert *x509.Certificate, intermediates *x509.CertPool) error {
	return c.clientCheck().VerifyClient(cert, intermediates)
}

// VerifyPeer checks the certificates a TLS client presented (leaf first)
// as VerifyClient does; a certificate that verified before has its dates
// and revocation checked only. The front door asks it of each request on
// a connection that ServerTLSConfig's VerifyConnection let through.
func (c *CA) VerifyPeer(certs []*x509.Certificate) error {
	return c.clientCheck().VerifyPeer(certs)
}

// VerifyConnection is a tls.Config.VerifyConnection for the front door: it
// refuses a client certificate the CA has revoked (crypto/tls has already
// verified the chain against ClientCAs) and verifies fully when the config
// did not ask crypto/tls to. Connections without a client certificate pass:
// the CA endpoints serve them, and authorization is per path.
func (c *CA) VerifyConnection(cs tls.ConnectionState) error {
	return c.clientCheck().VerifyConnection(cs)
}

// ServerTLSConfig returns a TLS configuration for Puppet's port 8140: it
// presents server (from IssueServerCert), asks for client certificates
// without requiring them, verifies those given against the CA (remembering
// the ones that verified, see clientcert.Check.TLSConfig) and refuses revoked
// ones. Requests on its connections carry no VerifiedChains: check their
// certificates with VerifyPeer. Callers may adjust the result (NextProtos, timeouts).
func (c *CA) ServerTLSConfig(server tls.Certificate) *tls.Config {
	return c.clientCheck().TLSConfig(server)
}

// clientCheck checks client certificates against this CA and its CRL, at
// the CA's clock.
func (c *CA) clientCheck() clientcert.Check {
	return clientcert.Check{Roots: c.pool, Issuers: []*x509.Certificate{c.cert}, IsRevoked: c.IsRevoked, Now: c.now, Verified: c.verified}
}
