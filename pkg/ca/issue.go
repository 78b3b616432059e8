package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Object identifiers the CA writes or inspects.
var (
	oidCommonName       = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidSubjectAltName   = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidAuthorityKeyID   = asn1.ObjectIdentifier{2, 5, 29, 35}
	oidExtKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidNetscapeComment  = asn1.ObjectIdentifier{2, 16, 840, 1, 113730, 1, 13}
	oidServerAuth       = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidClientAuth       = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}
	oidPuppetRegistered = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 1} // ppRegCertExt
	oidPuppetPrivate    = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 2} // ppPrivCertExt
	oidPuppetAuth       = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 3} // ppAuthCertExt
	// oidPuppetCliAuth (pp_cli_auth) marks Puppet Server's own certificate as
	// allowed to administer the CA; never copied from an agent's request.
	oidPuppetCliAuth = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 3, 39}
)

// netscapeCommentValue is the comment Puppet Server puts on every certificate.
const netscapeCommentValue = "Puppet Server Internal Certificate"

// under reports whether oid lies strictly below parent.
func under(oid, parent asn1.ObjectIdentifier) bool {
	return len(oid) > len(parent) && oid[:len(parent)].Equal(parent)
}

// cnName encodes the distinguished name CN=cn with a UTF8String, as Puppet
// Server writes subjects and issuers.
func cnName(cn string) ([]byte, error) {
	rdn := pkix.RDNSequence{{{
		Type:  oidCommonName,
		Value: asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: []byte(cn)},
	}}}
	b, err := asn1.Marshal(rdn)
	if err != nil {
		return nil, fmt.Errorf("encode subject CN=%s: %w", cn, err)
	}
	return b, nil
}

// subjectKeyID is RFC 5280's method 1: SHA-1 of the subjectPublicKey bits.
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("decode public key: %w", err)
	}
	sum := sha1.Sum(spki.PublicKey.Bytes)
	return sum[:], nil
}

func netscapeComment() pkix.Extension {
	v, _ := asn1.MarshalWithParams(netscapeCommentValue, "ia5") // a constant ASCII string cannot fail
	return pkix.Extension{Id: oidNetscapeComment, Value: v}
}

// criticalServerClientEKU is extendedKeyUsage serverAuth+clientAuth marked
// critical, as on Puppet Server's certificates (crypto/x509 would write it
// non-critical).
func criticalServerClientEKU() pkix.Extension {
	v, _ := asn1.Marshal([]asn1.ObjectIdentifier{oidServerAuth, oidClientAuth}) // fixed OIDs cannot fail
	return pkix.Extension{Id: oidExtKeyUsage, Critical: true, Value: v}
}

// authorityKeyID is the AKI Puppet Server writes on issued certificates: the
// CA's key identifier, its name and its serial number.
func authorityKeyID(caCert *x509.Certificate) (pkix.Extension, error) {
	dirName, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 4, IsCompound: true, Bytes: caCert.RawSubject})
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("encode authority key identifier: %w", err)
	}
	serialDER, err := asn1.Marshal(caCert.SerialNumber)
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("encode authority key identifier: %w", err)
	}
	var serial asn1.RawValue
	if _, err := asn1.Unmarshal(serialDER, &serial); err != nil {
		return pkix.Extension{}, fmt.Errorf("encode authority key identifier: %w", err)
	}
	aki := struct {
		KeyID  asn1.RawValue
		Issuer asn1.RawValue
		Serial asn1.RawValue
	}{
		KeyID:  asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, Bytes: caCert.SubjectKeyId},
		Issuer: asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 1, IsCompound: true, Bytes: dirName},
		Serial: asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: serial.Bytes},
	}
	v, err := asn1.Marshal(aki)
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("encode authority key identifier: %w", err)
	}
	return pkix.Extension{Id: oidAuthorityKeyID, Value: v}, nil
}

// newCACert makes the self-signed CA certificate Puppet Server makes:
// subject "Puppet CA: <name>", serial 1, basicConstraints CA:TRUE and
// keyUsage certSign+cRLSign (both critical), SKI, AKI and the Netscape comment.
func newCACert(name string, key crypto.Signer, now time.Time) ([]byte, error) {
	subject, err := cnName("Puppet CA: " + name)
	if err != nil {
		return nil, err
	}
	ski, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		RawSubject:            subject,
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            -1,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          ski,
		AuthorityKeyId:        ski,
		ExtraExtensions:       []pkix.Extension{netscapeComment()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	return der, nil
}

// leafSpec is what varies between the certificates the CA issues.
type leafSpec struct {
	certname  string
	pub       crypto.PublicKey
	serial    *big.Int
	dnsNames  []string
	ips       []net.IP
	keyUsage  x509.KeyUsage
	extra     []pkix.Extension // copied Puppet extensions, pp_cli_auth
	notBefore time.Time
	notAfter  time.Time
}

// issueLeaf signs a certificate the way Puppet Server 7 signs agent and
// server certificates: CN=certname (UTF8String), SANs, basicConstraints
// CA:FALSE critical, the given keyUsage (critical), extKeyUsage serverAuth +
// clientAuth (critical), SKI, AKI (key id, issuer, serial) and the Netscape
// comment, signed with SHA-256.
func (c *CA) issueLeaf(s leafSpec) (*x509.Certificate, []byte, error) {
	subject, err := cnName(s.certname)
	if err != nil {
		return nil, nil, err
	}
	ski, err := subjectKeyID(s.pub)
	if err != nil {
		return nil, nil, err
	}
	aki, err := authorityKeyID(c.cert)
	if err != nil {
		return nil, nil, err
	}
	if s.notAfter.After(c.cert.NotAfter) {
		// Never outlive the CA: verifiers would reject the chain at the CA's end anyway.
		s.notAfter = c.cert.NotAfter
	}
	exts := []pkix.Extension{netscapeComment(), aki, criticalServerClientEKU()}
	exts = append(exts, s.extra...)
	tmpl := &x509.Certificate{
		SerialNumber:          s.serial,
		RawSubject:            subject,
		NotBefore:             s.notBefore,
		NotAfter:              s.notAfter,
		BasicConstraintsValid: true,
		IsCA:                  false,
		KeyUsage:              s.keyUsage,
		DNSNames:              s.dnsNames,
		IPAddresses:           s.ips,
		SubjectKeyId:          ski,
		ExtraExtensions:       exts,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, s.pub, c.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %q: %w", s.certname, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse certificate just signed for %q: %w", s.certname, err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newCRL signs, at now, a CRL (v2, with CRL number and AKI) listing
// entries, dated by crlDates. Its nextUpdate is far ahead, as Puppet's: the
// CRL is re-signed on every revocation, not on a schedule.
func (c *CA) newCRL(number *big.Int, entries []x509.RevocationListEntry, now time.Time) ([]byte, error) {
	thisUpdate, nextUpdate := crlDates(now)
	tmpl := &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                thisUpdate,
		NextUpdate:                nextUpdate,
		RevokedCertificateEntries: entries,
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, c.cert, c.key)
	if err != nil {
		return nil, fmt.Errorf("sign CRL %s: %w", number, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), nil
}

// crlDates dates a CRL signed at now. thisUpdate is never later than now:
// Puppet's agent refuses a CRL that is not valid yet ("The CRL issued by …
// is not yet valid"), even by a second. It is backdated as certificates
// are, so that agents whose clock is up to a day behind accept the CRL as
// they accept the certificates (Puppet's CA backdates its CRLs by a second
// only). So thisUpdate does not tell when the CRL was made: the revocation
// a new CRL adds, dated now, does, and that is what front doors read for
// Last-Modified. nextUpdate is crlValidity after now.
func crlDates(now time.Time) (thisUpdate, nextUpdate time.Time) {
	now = now.Truncate(time.Second) // a CRL's times are whole seconds
	return now.Add(-backdate), now.Add(crlValidity)
}
