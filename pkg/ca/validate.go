package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"strings"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// maxCSRBytes bounds a submitted request; a 16384-bit RSA CSR is under 6 KiB.
const maxCSRBytes = 64 << 10

// RequestError is the CA refusing a request, in words an operator or agent
// can act on (Puppet Server's wording where it has one). Message is fit for
// an HTTP response body; Kind is farm.ErrInvalid, farm.ErrConflict or
// farm.ErrNotFound, so errors.Is works on it.
type RequestError struct {
	Kind    error
	Message string
}

func (e *RequestError) Error() string { return e.Message }
func (e *RequestError) Unwrap() error { return e.Kind }

// PuppetMessage is the response body Puppet Server would send.
func (e *RequestError) PuppetMessage() string { return e.Message }

func invalidf(format string, args ...any) error {
	return &RequestError{Kind: farm.ErrInvalid, Message: fmt.Sprintf(format, args...)}
}

func conflictf(format string, args ...any) error {
	return &RequestError{Kind: farm.ErrConflict, Message: fmt.Sprintf(format, args...)}
}

func notFoundf(format string, args ...any) error {
	return &RequestError{Kind: farm.ErrNotFound, Message: fmt.Sprintf(format, args...)}
}

// checkCertname rejects names that are not Puppet certnames before they get
// near the file system: farm.ValidateCertname plus Puppet Server's subject
// rules (no wildcard, every dot-separated label made of letters, digits, '-'
// and '_', not ending in '-').
func checkCertname(certname string) error {
	if strings.ToLower(certname) != certname {
		return invalidf("Certificate names must be lower case.")
	}
	if strings.Contains(certname, "*") {
		return invalidf("Subject contains a wildcard, which is not allowed: %s", certname)
	}
	if farm.ValidateCertname(certname) != nil {
		return invalidf("Subject hostname format is invalid: %q (a certname is lowercase letters, digits, '.', '-' and '_', at most 255)", certname)
	}
	for _, label := range strings.Split(certname, ".") {
		if label == "" || strings.HasSuffix(label, "-") {
			return invalidf("Subject hostname format is invalid: %q (empty label, or a label ending in '-')", certname)
		}
	}
	if certname == "ca" {
		return invalidf("Certname %q is reserved: it names the CA certificate", certname)
	}
	return nil
}

// parseCSR decodes the first PEM certificate request in data.
func parseCSR(data []byte) (*x509.CertificateRequest, error) {
	if len(data) > maxCSRBytes {
		return nil, invalidf("Certificate request is %d bytes; at most %d are accepted", len(data), maxCSRBytes)
	}
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, invalidf("Request body is not a PEM certificate request (expected -----BEGIN CERTIFICATE REQUEST-----)")
		}
		if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
			continue
		}
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, invalidf("Certificate request is malformed: %v", err)
		}
		return csr, nil
	}
}

// vetted is a request that passed the CA's policy: what goes into the
// certificate besides the CN.
type vetted struct {
	csr      *x509.CertificateRequest
	dnsNames []string // SAN DNS names, certname included
	ips      []net.IP
	extra    []pkix.Extension // Puppet extensions copied from the request
	// auth are the authorization extensions among extra (OIDs under
	// 1.3.6.1.4.1.34380.1.3); cliAuth is whether pp_cli_auth is one.
	auth    []string
	cliAuth bool
}

// authRefusal says why the CA does not sign v under opts (nil: it may).
// pp_cli_auth makes its holder an operator (the front door's operator API),
// so only the operator's explicit opts.AllowAuthorizationExtensions signs
// it, as Puppet Server only issues it with `puppetserver ca generate
// --ca-client`; other authorization extensions are signed when the CA
// allows them (Options.AllowAuthorizationExtensions) or the operator does.
func (c *CA) authRefusal(certname string, v *vetted, opts farm.SignOptions) error {
	switch {
	case len(v.auth) == 0 || opts.AllowAuthorizationExtensions:
		return nil
	case v.cliAuth:
		return invalidf("CSR '%s' requests pp_cli_auth (%s), which makes its holder an operator of the farm (the operator API on the front door); "+
			"the CA never signs it on its own. If %s is to be an operator, sign it with: broker ca sign %s --allow-authorization-extensions "+
			"(or create operator certificates with: broker ca generate NAME --operator)", certname, oidPuppetCliAuth, certname, certname)
	case !c.opts.AllowAuthorizationExtensions:
		return invalidf("CSR '%s' contains an authorization extension, which is disallowed (%s). "+
			"To allow authorization extensions, enable allow-authorization-extensions on the farm's CA, or sign this request with: "+
			"broker ca sign %s --allow-authorization-extensions", certname, strings.Join(v.auth, ", "), certname)
	}
	return nil
}

// vet applies the CA's policy to a request for certname: the CN matches,
// the key is RSA ≥ 2048 or ECDSA P-256/384/521, the signature holds, no SANs
// but the certname unless allowed, only Puppet's extensions, none critical.
// Authorization extensions (pp_cli_auth among them) pass here and are
// listed in the result: whether they may be signed is authRefusal's call.
func (c *CA) vet(certname string, csr *x509.CertificateRequest) (*vetted, error) {
	cn := csr.Subject.CommonName
	if cn != certname {
		return nil, invalidf("Instance name %q does not match requested key %q", cn, certname)
	}
	switch k := csr.PublicKey.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < 2048 {
			return nil, invalidf("CSR for %q has a %d-bit RSA key; the CA requires at least 2048 bits (Puppet's keylength defaults to 4096)", certname, bits)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return nil, invalidf("CSR for %q uses an unsupported elliptic curve; use P-256, P-384 or P-521", certname)
		}
	default:
		return nil, invalidf("CSR for %q has an unsupported %s key; the CA accepts RSA (at least 2048 bits) or ECDSA keys", certname, csr.PublicKeyAlgorithm)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, invalidf("CSR contains a public key that does not correspond to the signing key")
	}

	v := &vetted{csr: csr}
	if err := c.vetSANs(certname, csr, v); err != nil {
		return nil, err
	}
	if err := c.vetExtensions(certname, csr, v); err != nil {
		return nil, err
	}
	return v, nil
}

func (c *CA) vetSANs(certname string, csr *x509.CertificateRequest, v *vetted) error {
	var requested []string // Puppet's notation, IPs first
	for _, ip := range csr.IPAddresses {
		requested = append(requested, "IP:"+ip.String())
	}
	for _, d := range csr.DNSNames {
		requested = append(requested, "DNS:"+d)
	}
	for _, e := range csr.EmailAddresses {
		requested = append(requested, "email:"+e)
	}
	for _, u := range csr.URIs {
		requested = append(requested, "URI:"+u.String())
	}
	onlyCN := len(requested) == 1 && len(csr.DNSNames) == 1 && csr.DNSNames[0] == certname
	if len(requested) > 0 && !onlyCN && !c.opts.AllowSubjectAltNames {
		var extra []string
		for _, r := range requested {
			if r != "DNS:"+certname {
				extra = append(extra, r)
			}
		}
		return invalidf("CSR '%s' contains extra subject alternative names (%s), which are disallowed. "+
			"To allow subject alternative names, enable allow-subject-alt-names on the farm's CA, then submit the request again.",
			certname, strings.Join(extra, ", "))
	}
	if len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return invalidf("Only DNS and IP names are allowed in the Subject Alternative Names extension")
	}
	for _, d := range csr.DNSNames {
		if strings.Contains(d, "*") {
			return invalidf("Cert subjectAltName contains a wildcard, which is not allowed: %s", d)
		}
	}
	// As Puppet Server: the certname is always a DNS SAN, after any requested ones.
	for _, d := range csr.DNSNames {
		if d != certname {
			v.dnsNames = append(v.dnsNames, d)
		}
	}
	v.dnsNames = append(v.dnsNames, certname)
	v.ips = csr.IPAddresses
	return nil
}

func (c *CA) vetExtensions(certname string, csr *x509.CertificateRequest, v *vetted) error {
	var bad []string
	for _, ext := range csr.Extensions {
		switch {
		case ext.Id.Equal(oidSubjectAltName):
			continue // handled by vetSANs
		case under(ext.Id, oidPuppetAuth):
			v.auth = append(v.auth, ext.Id.String())
			v.cliAuth = v.cliAuth || ext.Id.Equal(oidPuppetCliAuth)
		case under(ext.Id, oidPuppetRegistered), under(ext.Id, oidPuppetPrivate):
		default:
			bad = append(bad, ext.Id.String())
			continue
		}
		if ext.Critical {
			// OpenSSL (the agent) and crypto/x509 (the front door) refuse
			// certificates with unknown critical extensions.
			return invalidf("CSR '%s' marks extension %s critical; Puppet extension requests must not be critical", certname, ext.Id)
		}
		v.extra = append(v.extra, pkix.Extension{Id: ext.Id, Value: ext.Value})
	}
	if len(bad) > 0 {
		return invalidf("Found extensions that are not permitted: %s", strings.Join(bad, ", "))
	}
	return nil
}
