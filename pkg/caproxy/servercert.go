package caproxy

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

const (
	pollFirst = 200 * time.Millisecond
	pollMax   = 3 * time.Second
)

// remindEvery is how often ServerCert, waiting, says what the upstream CA's
// operator must do (and checks the request is still pending); tests shorten it.
var remindEvery = 10 * time.Second

// ServerCert returns the front door's own certificate and key, signed by
// the upstream CA: CN certname, DNS SANs certname plus dnsAltNames (entries
// that parse as IP addresses become IP SANs; Puppet's "DNS:"/"IP:"
// prefixes are understood). keyType is pki.KeyECDSAP256 (default when
// empty) or pki.KeyRSA (Options.KeyBits).
//
// The certificate and key kept in Dir are reused when they still verify,
// are valid for a while (30 days, or a third of their lifetime if
// shorter), are not revoked, have the requested key type and cover every
// requested name. Otherwise ServerCert makes a key (kept in Dir until the
// certificate arrives, so a restart waits for the same request), submits a
// request to the upstream CA unless the same request is already pending
// there, and polls until the upstream signs it or ctx ends, logging every
// 10s what the upstream CA's operator must do. It fails at once when the
// upstream refuses the request (for instance its SANs) or already holds an
// unrevoked certificate for certname with another key.
func (c *CA) ServerCert(ctx context.Context, certname string, dnsAltNames []string, keyType string) (tls.Certificate, error) {
	if err := farm.ValidateCertname(certname); err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate %q: %w", certname, err)
	}
	dnsNames, ips, err := pki.SplitAltNames(certname, dnsAltNames)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate %q: %w", certname, err)
	}
	if keyType == "" {
		keyType = pki.KeyECDSAP256
	}
	if keyType != pki.KeyECDSAP256 && keyType != pki.KeyRSA {
		return tls.Certificate{}, fmt.Errorf("server certificate %q: key type %q is not %q or %q: %w",
			certname, keyType, pki.KeyECDSAP256, pki.KeyRSA, farm.ErrInvalid)
	}
	c.serverMu.Lock()
	defer c.serverMu.Unlock()
	out, err := c.serverCert(ctx, certname, dnsNames, ips, keyType)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate %q: %w", certname, err)
	}
	return out, nil
}

func (c *CA) serverCert(ctx context.Context, certname string, dnsNames []string, ips []net.IP, keyType string) (tls.Certificate, error) {
	certPath, keyPath := c.path(dirServer, certname+".pem"), c.path(dirServer, certname+".key")
	kept, keptKey, why := pki.LoadKeyPair(certPath, keyPath)
	if why == "" {
		why = c.unusable(kept, keptKey, certname, dnsNames, ips, keyType)
	}
	if why == "" {
		c.log.Info("reusing server certificate", "certname", certname, "serial", pki.FormatSerial(kept.SerialNumber), "not_after", kept.NotAfter)
		return c.keyPair(kept, keptKey)
	}
	c.log.Info("requesting a server certificate from the upstream CA", "certname", certname, "reason", why,
		"dns", dnsNames, "ips", ips, "key", keyType)

	key, err := c.pendingKey(certname, keyType)
	if err != nil {
		return tls.Certificate{}, err
	}

	// The upstream may have signed our request already (before a restart),
	// or hold a certificate that blocks a new one.
	signed, err := c.fetchCert(ctx, certname)
	switch {
	case err == nil && pki.PublicKeysEqual(key.Public(), signed.PublicKey):
		return c.finishServerCert(certname, key, signed, dnsNames, ips)
	case err == nil:
		if err := c.heldElsewhere(ctx, certname, signed, why); err != nil {
			return tls.Certificate{}, err
		}
	case !errors.Is(err, farm.ErrNotFound):
		return tls.Certificate{}, err
	}

	pending := false
	if data, err := c.get(ctx, "certificate_request", certname); err == nil {
		if csr, err := parseCSRPEM(data); err == nil && pki.PublicKeysEqual(key.Public(), csr.PublicKey) && coversCSR(csr, dnsNames, ips) {
			pending = true
			c.log.Info("our certificate request is already pending on the upstream CA", "certname", certname)
		}
	} else if !errors.Is(err, farm.ErrNotFound) {
		return tls.Certificate{}, err
	}
	if !pending {
		csrPEM, err := newCSR(certname, key, dnsNames, ips)
		if err != nil {
			return tls.Certificate{}, err
		}
		if err := c.SubmitCSR(ctx, certname, csrPEM); err != nil {
			return tls.Certificate{}, c.explainRefusal(certname, dnsNames, ips, err)
		}
	}

	// Poll until signed.
	hint := fmt.Sprintf("waiting for the upstream CA to sign %s; on the CA run: puppetserver ca sign --certname %s", certname, certname)
	delay, lastRemind, started := pollFirst, time.Time{}, time.Now()
	for {
		signed, err := c.fetchCert(ctx, certname)
		switch {
		case err == nil && pki.PublicKeysEqual(key.Public(), signed.PublicKey):
			c.log.Info("the upstream CA signed the server certificate", "certname", certname,
				"serial", pki.FormatSerial(signed.SerialNumber), "waited", time.Since(started).Round(time.Millisecond))
			return c.finishServerCert(certname, key, signed, dnsNames, ips)
		case err == nil:
			if err := c.heldElsewhere(ctx, certname, signed, why); err != nil {
				return tls.Certificate{}, err
			}
		case errors.Is(err, farm.ErrNotFound):
		case ctx.Err() != nil:
		default:
			c.log.Warn("could not ask the upstream CA for the server certificate; retrying", "certname", certname, "err", err)
		}
		if lastRemind.IsZero() || time.Since(lastRemind) >= remindEvery {
			if !lastRemind.IsZero() {
				if err := c.stillPending(ctx, certname); err != nil {
					return tls.Certificate{}, err
				}
			}
			c.log.Warn(hint, "certname", certname, "waited", time.Since(started).Round(time.Second))
			lastRemind = time.Now()
		}
		if err := backoff.Sleep(ctx, delay); err != nil {
			return tls.Certificate{}, fmt.Errorf("the upstream CA %s has not signed the request (on the CA run: puppetserver ca sign --certname %s): %w",
				c.upstream, certname, err)
		}
		delay = min(delay*2, pollMax)
	}
}

// stillPending returns an error when the upstream holds neither our
// request nor a certificate for certname: its operator rejected (cleaned)
// the request.
func (c *CA) stillPending(ctx context.Context, certname string) error {
	_, err := c.get(ctx, "certificate_request", certname)
	if !errors.Is(err, farm.ErrNotFound) {
		return nil // pending, or the upstream cannot say: keep waiting
	}
	if _, err := c.get(ctx, "certificate", certname); !errors.Is(err, farm.ErrNotFound) {
		return nil // signed meanwhile: the next poll fetches it
	}
	return fmt.Errorf("the certificate request for %s is no longer pending on the upstream CA %s and nothing was signed "+
		"(was it rejected with puppetserver ca clean?); start again to submit a new request: %w", certname, c.upstream, farm.ErrNotFound)
}

// fetchCert gets and parses certname's certificate from the upstream.
func (c *CA) fetchCert(ctx context.Context, certname string) (*x509.Certificate, error) {
	data, err := c.get(ctx, "certificate", certname)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("upstream CA answered certificate %s with no PEM certificate", certname)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("upstream CA answered certificate %s: %w", certname, err)
	}
	return cert, nil
}

// heldElsewhere returns an error when the upstream's certificate for
// certname (not ours) is unrevoked: it blocks our request until the CA's
// operator cleans it. A revoked one is replaced when ours is signed.
func (c *CA) heldElsewhere(ctx context.Context, certname string, held *x509.Certificate, why string) error {
	if c.IsRevoked(held.SerialNumber) {
		return nil
	}
	if err := c.RefreshCRL(ctx); err != nil {
		c.log.Warn("could not refresh the CRL", "err", err)
	}
	if c.IsRevoked(held.SerialNumber) {
		return nil
	}
	return fmt.Errorf("the upstream CA already holds a certificate for %s with another key (serial %s, not after %s) and will not sign a new one; "+
		"this front door cannot use it (%s). If that certificate is not an agent's, on the CA run: puppetserver ca clean --certname %s; "+
		"otherwise give the front door another certname: %w",
		certname, pki.FormatSerial(held.SerialNumber), held.NotAfter.Format(time.RFC3339), why, certname, farm.ErrConflict)
}

// explainRefusal adds what to do to the upstream's refusal of our request.
func (c *CA) explainRefusal(certname string, dnsNames []string, ips []net.IP, err error) error {
	var ue *UpstreamError
	if !errors.As(err, &ue) {
		return err
	}
	low := strings.ToLower(ue.Message)
	switch {
	case ue.Status == 400 && (strings.Contains(low, "subject alternative name") || strings.Contains(low, "subjectaltname") || strings.Contains(low, "alt-names")):
		return fmt.Errorf("the upstream CA refuses certificate requests with subject alternative names (%s). "+
			"Allow them on the CA (Puppet Server: allow-subject-alt-names: true in ca.conf, then restart it; "+
			"compilefarm: the CA option AllowSubjectAltNames), or give the front door no alt names: %w",
			strings.Join(altNamesText(certname, dnsNames, ips), ", "), err)
	case errors.Is(err, farm.ErrConflict):
		return fmt.Errorf("%w; if that certificate is not an agent's, on the CA run: puppetserver ca clean --certname %s", err, certname)
	}
	return err
}

func altNamesText(certname string, dnsNames []string, ips []net.IP) []string {
	var out []string
	for _, d := range dnsNames {
		if d != certname {
			out = append(out, "DNS:"+d)
		}
	}
	for _, ip := range ips {
		out = append(out, "IP:"+ip.String())
	}
	return out
}

// finishServerCert checks the signed certificate and keeps it with its key.
func (c *CA) finishServerCert(certname string, key crypto.Signer, cert *x509.Certificate, dnsNames []string, ips []net.IP) (tls.Certificate, error) {
	if why := c.unusable(cert, key, certname, dnsNames, ips, pki.KeyTypeOf(key)); why != "" {
		return tls.Certificate{}, fmt.Errorf("the upstream CA signed a certificate (serial %s) this front door cannot use: %s", pki.FormatSerial(cert.SerialNumber), why)
	}
	keyPEM, err := pki.EncodePrivateKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	// Key first: a crash between the writes leaves a key that does not
	// match the old certificate, which the next start replaces.
	if err := atomicfile.Write(c.path(dirServer, certname+".key"), keyPEM, 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("keep server key: %w", err)
	}
	if err := atomicfile.Write(c.path(dirServer, certname+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("keep server certificate: %w", err)
	}
	if err := os.Remove(c.path(dirPending, certname+".key")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("could not remove the pending key", "err", err)
	}
	c.log.Info("server certificate kept", "certname", certname, "serial", pki.FormatSerial(cert.SerialNumber),
		"not_after", cert.NotAfter, "fingerprint", pki.Fingerprint(cert.Raw))
	return c.keyPair(cert, key)
}

// keyPair builds the tls.Certificate, with the intermediate CAs of the
// upstream's chain after the leaf.
func (c *CA) keyPair(cert *x509.Certificate, key crypto.Signer) (tls.Certificate, error) {
	chains, err := cert.Verify(x509.VerifyOptions{Roots: c.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("verify server certificate: %w", err)
	}
	out := tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
	if chain := chains[0]; len(chain) > 2 {
		for _, ic := range chain[1 : len(chain)-1] {
			out.Certificate = append(out.Certificate, ic.Raw)
		}
	}
	return out, nil
}

// unusable says why cert (with key) cannot serve as the front door's
// certificate, or "".
func (c *CA) unusable(cert *x509.Certificate, key crypto.Signer, certname string, dnsNames []string, ips []net.IP, keyType string) string {
	now := time.Now()
	if !pki.PublicKeysEqual(key.Public(), cert.PublicKey) {
		return "key does not match the certificate"
	}
	if cert.Subject.CommonName != certname {
		return fmt.Sprintf("certificate is for CN=%s, not %s", cert.Subject.CommonName, certname)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: c.pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return "certificate does not verify against the upstream CA: " + err.Error()
	}
	if c.IsRevoked(cert.SerialNumber) {
		return "certificate is revoked"
	}
	return pki.ServerCertUnfit(cert, key, keyType, now, dnsNames, ips)
}

// coversCSR reports whether a pending request asks for every name wanted.
func coversCSR(csr *x509.CertificateRequest, dnsNames []string, ips []net.IP) bool {
	for _, n := range dnsNames[1:] { // the certname is the CN; Puppet adds it as a SAN
		if !slices.Contains(csr.DNSNames, n) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(csr.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// pendingKey returns the key of a request not signed yet, kept in Dir, or
// a new one (kept there) when there is none of keyType.
func (c *CA) pendingKey(certname, keyType string) (crypto.Signer, error) {
	path := c.path(dirPending, certname+".key")
	if data, err := os.ReadFile(path); err == nil {
		key, err := pki.ParsePrivateKey(data)
		if err == nil && pki.KeyTypeOf(key) == keyType {
			return key, nil
		}
		if err != nil {
			c.log.Warn("replacing unreadable pending key", "file", path, "err", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read pending key: %w", err)
	}
	key, keyPEM, err := pki.NewServerKey(keyType, c.opts.KeyBits)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("keep pending key: %w", err)
	}
	return key, nil
}

// newCSR builds the request: CN certname, and SANs only when names besides
// the certname are wanted (Puppet Server refuses SANs unless allowed, and
// adds the certname itself).
func newCSR(certname string, key crypto.Signer, dnsNames []string, ips []net.IP) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: certname}}
	if len(dnsNames) > 1 || len(ips) > 0 {
		tmpl.DNSNames, tmpl.IPAddresses = dnsNames, ips
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

func parseCSRPEM(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("no PEM certificate request")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}
