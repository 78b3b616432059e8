package ca

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"slices"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// IssueServerCert returns the front door's own certificate and key, signed by
// the CA: CN certname, SANs certname plus dnsAltNames (entries that parse as
// IP addresses become IP SANs; Puppet's "DNS:"/"IP:" prefixes are
// understood), serverAuth+clientAuth. keyType is pki.KeyECDSAP256 (default when
// empty) or pki.KeyRSA.
//
// The certificate and key are kept in Options.ServerDir as <certname>.pem
// and .key (0600); the store records the certificate as a front door's and
// as certname's certificate, as Puppet Server keeps its own. A kept certificate is reused when it is still valid for a
// while (30 days, or a third of its lifetime if shorter), not revoked, has
// the requested key type and covers every requested name; otherwise a new
// key and certificate replace it. It returns ErrConflict when an agent
// already holds a certificate for certname, and ErrInvalid for a bad name or
// key type.
func (c *CA) IssueServerCert(ctx context.Context, certname string, dnsAltNames []string, keyType string) (tls.Certificate, error) {
	if err := checkCertname(certname); err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate %q: %w", certname, err)
	}
	dnsNames, ips, err := pki.SplitAltNames(certname, dnsAltNames)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate %q: %w", certname, err)
	}
	if keyType == "" {
		keyType = pki.KeyECDSAP256
	}
	if keyType != pki.KeyECDSAP256 && keyType != pki.KeyRSA {
		return tls.Certificate{}, fmt.Errorf("issue server certificate %q: key type %q is not %q or %q: %w",
			certname, keyType, pki.KeyECDSAP256, pki.KeyRSA, farm.ErrInvalid)
	}
	var out tls.Certificate
	err = c.locked(ctx, func() error {
		certPath := filepath.Join(c.opts.ServerDir, certname+".pem")
		keyPath := filepath.Join(c.opts.ServerDir, certname+".key")
		old, oldKey, why := pki.LoadKeyPair(certPath, keyPath)
		if why == "" {
			why = c.serverCertStale(old, oldKey, dnsNames, ips, keyType)
		}
		if why == "" {
			out = tls.Certificate{Certificate: [][]byte{old.Raw}, PrivateKey: oldKey, Leaf: old}
			c.log.Info("reusing server certificate", "certname", certname, "serial", pki.FormatSerial(old.SerialNumber), "not_after", old.NotAfter)
			return nil
		}
		// Do not take over a name an agent holds a certificate for. A front
		// door's certificate (this process's, or another front door's
		// sharing the store and the certname) is replaced.
		var replace *big.Int
		if held, err := c.readCert(ctx, certname); err == nil {
			replace = held.SerialNumber
			if !isServerCert(held) && !c.crl.Load().revokes(held.SerialNumber) {
				return conflictf("%s already has a signed agent certificate; revoke it or give the front door another certname", certname)
			}
		} else if !errors.Is(err, farm.ErrNotFound) {
			return err
		}
		for _, n := range dnsNames[1:] {
			if held, err := c.readCert(ctx, n); err == nil && !c.crl.Load().revokes(held.SerialNumber) {
				c.log.Warn("an agent holds a certificate for one of the front door's names and could impersonate it; revoke it",
					"name", n, "serial", pki.FormatSerial(held.SerialNumber))
			}
		}

		key, keyPEM, err := pki.NewServerKey(keyType, c.opts.KeyBits)
		if err != nil {
			return err
		}
		serial, err := c.store.NextSerial(ctx)
		if err != nil {
			return err
		}
		ku := x509.KeyUsageDigitalSignature
		if keyType == pki.KeyRSA {
			ku |= x509.KeyUsageKeyEncipherment
		}
		cliAuth, _ := asn1.MarshalWithParams("true", "utf8") // a constant string cannot fail
		now := c.now()
		cert, certPEM, err := c.issueLeaf(leafSpec{
			certname:  certname,
			pub:       key.Public(),
			serial:    serial,
			dnsNames:  dnsNames,
			ips:       ips,
			keyUsage:  ku,
			extra:     []pkix.Extension{{Id: oidPuppetCliAuth, Value: cliAuth}},
			notBefore: now.Add(-backdate),
			notAfter:  now.Add(c.opts.Validity),
		})
		if err != nil {
			return err
		}
		// Key first: a crash between the two writes leaves a key that does
		// not match the old certificate, which the next start replaces.
		if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
			return err
		}
		if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
			return err
		}
		if err := c.store.PutServerCert(ctx, certname, certPEM); err != nil {
			return err
		}
		if err := c.store.PutSigned(ctx, certname, certPEM, replace); err != nil {
			return fmt.Errorf("record server certificate (another front door may have just replaced it: start again): %w", err)
		}
		if err := c.store.RecordIssued(ctx, farm.CertIssued{Certname: certname, Serial: cert.SerialNumber, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter}); err != nil {
			return err
		}
		c.log.Info("issued server certificate", "certname", certname, "serial", pki.FormatSerial(serial),
			"key", keyType, "dns", dnsNames, "ips", ips, "not_after", cert.NotAfter, "reason", why)
		out = tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
		return nil
	})
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate %q: %w", certname, err)
	}
	return out, nil
}

// serverCertStale says why a kept server certificate cannot be reused, or "".
func (c *CA) serverCertStale(cert *x509.Certificate, key crypto.Signer, dnsNames []string, ips []net.IP, keyType string) string {
	now := c.now()
	if _, err := cert.Verify(x509.VerifyOptions{Roots: c.pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return "kept certificate does not verify: " + err.Error()
	}
	if c.crl.Load().revokes(cert.SerialNumber) {
		return "kept certificate is revoked"
	}
	if why := pki.ServerCertUnfit(cert, key, keyType, now, dnsNames, ips); why != "" {
		return "kept " + why
	}
	return ""
}

// serverNameOwner returns the certname of an unrevoked front door
// certificate that carries name as a DNS SAN, or "". Agents must not get a
// certificate for such a name: it would let them impersonate the front door
// (agent certificates are good for serverAuth, as Puppet's are).
func (c *CA) serverNameOwner(ctx context.Context, name string) (string, error) {
	certs, err := c.serverCerts(ctx, name)
	if err != nil {
		return "", err
	}
	for _, cert := range certs {
		if slices.Contains(cert.DNSNames, name) && !c.crl.Load().revokes(cert.SerialNumber) {
			return cert.Subject.CommonName, nil
		}
	}
	return "", nil
}

// isServerCert reports whether cert is a front door's certificate: it
// carries pp_cli_auth, which IssueServerCert adds and agents' requests may
// never carry (vetExtensions).
func isServerCert(cert *x509.Certificate) bool {
	return slices.ContainsFunc(cert.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(oidPuppetCliAuth) })
}

// serverCerts returns the front doors' certificates recorded in the store
// that carry DNS name dnsName ("": all).
func (c *CA) serverCerts(ctx context.Context, dnsName string) ([]*x509.Certificate, error) {
	all, err := c.store.ServerCerts(ctx, dnsName)
	if err != nil {
		return nil, fmt.Errorf("list server certificates: %w", err)
	}
	out := make([]*x509.Certificate, 0, len(all))
	for _, data := range all {
		cert, err := pki.ParseCertPEM(data)
		if err != nil {
			c.log.Warn("unreadable server certificate in the CA's store", "err", err)
			continue
		}
		out = append(out, cert)
	}
	return out, nil
}
