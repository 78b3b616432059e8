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
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// IssueServerCert returns the front door's own certificate and key, signed by
// the CA: CN certname, SANs certname plus dnsAltNames (entries that parse as
// IP addresses become IP SANs; Puppet's "DNS:"/"IP:" prefixes are
// understood), serverAuth+clientAuth. keyType is KeyECDSAP256 (default when
// empty) or KeyRSA.
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
	dnsNames, ips, err := SplitAltNames(certname, dnsAltNames)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate %q: %w", certname, err)
	}
	if keyType == "" {
		keyType = KeyECDSAP256
	}
	if keyType != KeyECDSAP256 && keyType != KeyRSA {
		return tls.Certificate{}, fmt.Errorf("issue server certificate %q: key type %q is not %q or %q: %w",
			certname, keyType, KeyECDSAP256, KeyRSA, farm.ErrInvalid)
	}
	var out tls.Certificate
	err = c.locked(ctx, func() error {
		certPath := filepath.Join(c.opts.ServerDir, certname+".pem")
		keyPath := filepath.Join(c.opts.ServerDir, certname+".key")
		old, oldKey, why := LoadKeyPair(certPath, keyPath)
		if why == "" {
			why = c.serverCertStale(old, oldKey, dnsNames, ips, keyType)
		}
		if why == "" {
			out = tls.Certificate{Certificate: [][]byte{old.Raw}, PrivateKey: oldKey, Leaf: old}
			c.log.Info("reusing server certificate", "certname", certname, "serial", FormatSerial(old.SerialNumber), "not_after", old.NotAfter)
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
					"name", n, "serial", FormatSerial(held.SerialNumber))
			}
		}

		key, keyPEM, err := NewServerKey(keyType, c.opts.KeyBits)
		if err != nil {
			return err
		}
		serial, err := c.store.NextSerial(ctx)
		if err != nil {
			return err
		}
		ku := x509.KeyUsageDigitalSignature
		if keyType == KeyRSA {
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
		c.log.Info("issued server certificate", "certname", certname, "serial", FormatSerial(serial),
			"key", keyType, "dns", dnsNames, "ips", ips, "not_after", cert.NotAfter, "reason", why)
		out = tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
		return nil
	})
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate %q: %w", certname, err)
	}
	return out, nil
}

// SplitAltNames returns the DNS SANs (certname first, deduplicated, lower
// case) and IP SANs (deduplicated, IPv4 in 4-byte form) for a server
// certificate for certname with the alt names alt. Entries that parse as IP
// addresses become IP SANs; Puppet's "DNS:" and "IP:" prefixes are
// understood. An entry that is neither an IP address nor a plain DNS name
// (empty, wildcard, leading dot, slash or space) gives a *RequestError of
// kind farm.ErrInvalid.
func SplitAltNames(certname string, alt []string) ([]string, []net.IP, error) {
	dns := []string{certname}
	var ips []net.IP
	for _, a := range alt {
		a = strings.TrimSpace(a)
		if v, ok := strings.CutPrefix(a, "IP:"); ok {
			ip := net.ParseIP(v)
			if ip == nil {
				return nil, nil, invalidf("alt name %q is not an IP address", a)
			}
			ips = appendIP(ips, ip)
			continue
		}
		a = strings.ToLower(strings.TrimPrefix(a, "DNS:"))
		if ip := net.ParseIP(a); ip != nil {
			ips = appendIP(ips, ip)
			continue
		}
		if a == "" || strings.ContainsAny(a, "*/\\ ") || strings.HasPrefix(a, ".") {
			return nil, nil, invalidf("alt name %q is not a DNS name", a)
		}
		if !slices.Contains(dns, a) {
			dns = append(dns, a)
		}
	}
	return dns, ips, nil
}

// appendIP appends ip to ips unless it is already there.
func appendIP(ips []net.IP, ip net.IP) []net.IP {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	for _, have := range ips {
		if have.Equal(ip) {
			return ips
		}
	}
	return append(ips, ip)
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
	cert, err = parseCertPEM(certPEM)
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

// serverCertStale says why a kept server certificate cannot be reused, or "".
func (c *CA) serverCertStale(cert *x509.Certificate, key crypto.Signer, dnsNames []string, ips []net.IP, keyType string) string {
	now := c.now()
	if _, err := cert.Verify(x509.VerifyOptions{Roots: c.pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return "kept certificate does not verify: " + err.Error()
	}
	if c.crl.Load().revokes(cert.SerialNumber) {
		return "kept certificate is revoked"
	}
	if why := ServerCertUnfit(cert, key, keyType, now, dnsNames, ips); why != "" {
		return "kept " + why
	}
	return ""
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
		cert, err := parseCertPEM(data)
		if err != nil {
			c.log.Warn("unreadable server certificate in the CA's store", "err", err)
			continue
		}
		out = append(out, cert)
	}
	return out, nil
}
