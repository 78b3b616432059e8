// Package trusted reads what Puppet calls a node's trusted data from its
// certificate: the extensions under Puppet's arcs, named as Puppet Server
// names them in $trusted['extensions'] (short names for Puppet's registered
// OIDs, dotted OIDs otherwise) with their decoded values.
package trusted

import (
	"crypto/x509"
	"encoding/asn1"
	"strings"
)

// Puppet's certificate extension arcs (Puppet::SSL::Oids): registered
// (ppRegCertExt), private (ppPrivCertExt) and authorization (ppAuthCertExt).
// An extension at an arc or below it is Puppet's (Oids.subtree_of? is
// inclusive).
var arcs = []asn1.ObjectIdentifier{
	{1, 3, 6, 1, 4, 1, 34380, 1, 1},
	{1, 3, 6, 1, 4, 1, 34380, 1, 2},
	{1, 3, 6, 1, 4, 1, 34380, 1, 3},
}

// shortNames are the OIDs Puppet 7 registers with OpenSSL
// (Puppet::SSL::Oids::PUPPET_OIDS) below its arcs: Ruby names an extension
// by its short name when OpenSSL knows one.
var shortNames = map[string]string{
	"1.3.6.1.4.1.34380.1.1":    "ppRegCertExt",
	"1.3.6.1.4.1.34380.1.2":    "ppPrivCertExt",
	"1.3.6.1.4.1.34380.1.3":    "ppAuthCertExt",
	"1.3.6.1.4.1.34380.1.1.1":  "pp_uuid",
	"1.3.6.1.4.1.34380.1.1.2":  "pp_instance_id",
	"1.3.6.1.4.1.34380.1.1.3":  "pp_image_name",
	"1.3.6.1.4.1.34380.1.1.4":  "pp_preshared_key",
	"1.3.6.1.4.1.34380.1.1.5":  "pp_cost_center",
	"1.3.6.1.4.1.34380.1.1.6":  "pp_product",
	"1.3.6.1.4.1.34380.1.1.7":  "pp_project",
	"1.3.6.1.4.1.34380.1.1.8":  "pp_application",
	"1.3.6.1.4.1.34380.1.1.9":  "pp_service",
	"1.3.6.1.4.1.34380.1.1.10": "pp_employee",
	"1.3.6.1.4.1.34380.1.1.11": "pp_created_by",
	"1.3.6.1.4.1.34380.1.1.12": "pp_environment",
	"1.3.6.1.4.1.34380.1.1.13": "pp_role",
	"1.3.6.1.4.1.34380.1.1.14": "pp_software_version",
	"1.3.6.1.4.1.34380.1.1.15": "pp_department",
	"1.3.6.1.4.1.34380.1.1.16": "pp_cluster",
	"1.3.6.1.4.1.34380.1.1.17": "pp_provisioner",
	"1.3.6.1.4.1.34380.1.1.18": "pp_region",
	"1.3.6.1.4.1.34380.1.1.19": "pp_datacenter",
	"1.3.6.1.4.1.34380.1.1.20": "pp_zone",
	"1.3.6.1.4.1.34380.1.1.21": "pp_network",
	"1.3.6.1.4.1.34380.1.1.22": "pp_securitypolicy",
	"1.3.6.1.4.1.34380.1.1.23": "pp_cloudplatform",
	"1.3.6.1.4.1.34380.1.1.24": "pp_apptier",
	"1.3.6.1.4.1.34380.1.1.25": "pp_hostname",
	"1.3.6.1.4.1.34380.1.1.26": "pp_owner",
	"1.3.6.1.4.1.34380.1.3.1":  "pp_authorization",
	"1.3.6.1.4.1.34380.1.3.13": "pp_auth_role",
}

// Extensions returns the certificate's extensions under Puppet's arcs, as
// Puppet::SSL::Certificate#custom_extensions and TrustedInformation.remote
// present them to a compile: keyed by short name or dotted OID, each value
// the content of the DER value it holds (a UTF8String's text, say), or the
// raw DER bytes when they do not decode. nil when there are none.
func Extensions(cert *x509.Certificate) map[string]string {
	var out map[string]string
	for _, ext := range cert.Extensions {
		if !underPuppet(ext.Id) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[Name(ext.Id)] = value(ext.Value)
	}
	return out
}

// Name is the key Puppet gives an extension in $trusted['extensions'].
func Name(oid asn1.ObjectIdentifier) string {
	s := oid.String()
	if n, ok := shortNames[s]; ok {
		return n
	}
	return s
}

func underPuppet(oid asn1.ObjectIdentifier) bool {
	for _, arc := range arcs {
		if len(oid) >= len(arc) && oid[:len(arc)].Equal(arc) {
			return true
		}
	}
	return false
}

// value decodes an extension value as Ruby's OpenSSL::ASN1.decode(der).value
// does for the primitive string and number types Puppet writes; anything
// else (and bytes that are not one DER value) stays as it is, as Puppet
// keeps a value it cannot decode (PUP-3560).
func value(der []byte) string {
	var v asn1.RawValue
	rest, err := asn1.Unmarshal(der, &v)
	if err != nil || len(rest) > 0 || v.Class != asn1.ClassUniversal || v.IsCompound {
		return string(der)
	}
	switch v.Tag {
	case asn1.TagUTF8String, asn1.TagPrintableString, asn1.TagIA5String, asn1.TagT61String,
		asn1.TagNumericString, asn1.TagOctetString, 26 /* VisibleString */, 27 /* GeneralString */ :
		return string(v.Bytes)
	case 30: // BMPString: UTF-16BE
		if len(v.Bytes)%2 != 0 {
			return string(der)
		}
		var b strings.Builder
		for i := 0; i < len(v.Bytes); i += 2 {
			b.WriteRune(rune(v.Bytes[i])<<8 | rune(v.Bytes[i+1]))
		}
		return b.String()
	}
	return string(der)
}
