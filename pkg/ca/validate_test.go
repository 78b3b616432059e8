package ca

import (
	"bytes"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func utf8Ext(t testing.TB, oid asn1.ObjectIdentifier, value string, critical bool) pkix.Extension {
	t.Helper()
	v, err := asn1.MarshalWithParams(value, "utf8")
	if err != nil {
		t.Fatalf("marshal extension: %v", err)
	}
	return pkix.Extension{Id: oid, Value: v, Critical: critical}
}

var (
	oidPPRole     = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 1, 13}
	oidPPUUID     = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 1, 1}
	oidPPPrivate  = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 2, 7}
	oidPPAuthRole = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 3, 13}
)

func TestRefusedRequests(t *testing.T) {
	const name = "agent.example.test"
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatalf("generate weak key: %v", err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate ed25519 key: %v", err)
	}
	badSignature := func(t *testing.T) []byte {
		der := mustPEMBytes(t, makeCSR(t, csrSpec{cn: name}))
		der[len(der)-3] ^= 0xff // inside the signature
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	basicConstraints, _ := asn1.Marshal(struct{ IsCA bool }{false})

	tests := []struct {
		name     string
		opts     Options
		certname string // default name
		csr      func(t *testing.T) []byte
		want     string // in the message
	}{
		{name: "CN does not match certname",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "other.example.test"}) },
			want: `Instance name "other.example.test" does not match requested key "agent.example.test"`},
		{name: "no CN",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{}) },
			want: `Instance name "" does not match requested key`},
		{name: "garbage",
			csr:  func(t *testing.T) []byte { return []byte("GET / HTTP/1.1\r\n") },
			want: "not a PEM certificate request"},
		{name: "PEM certificate instead of request",
			csr: func(t *testing.T) []byte {
				return mustReadFile(t, "testdata/puppet-agent1-cert.pem")
			},
			want: "not a PEM certificate request"},
		{name: "malformed DER",
			csr: func(t *testing.T) []byte {
				return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 0x03, 0x02, 0x01, 0x00}})
			},
			want: "Certificate request is malformed"},
		{name: "oversized",
			csr:  func(t *testing.T) []byte { return make([]byte, maxCSRBytes+1) },
			want: "at most 65536 are accepted"},
		{name: "bad signature", csr: badSignature,
			want: "CSR contains a public key that does not correspond to the signing key"},
		{name: "weak RSA key",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, key: weak}) },
			want: "1024-bit RSA key; the CA requires at least 2048 bits"},
		{name: "Ed25519 key",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, key: edKey}) },
			want: "has an unsupported Ed25519 key"},
		{name: "P-224 key",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, key: ecKey(t, elliptic.P224())}) },
			want: "unsupported elliptic curve"},
		{name: "DNS SAN",
			csr: func(t *testing.T) []byte {
				return makeCSR(t, csrSpec{cn: name, dns: []string{name, "puppet", "www.example.test"}})
			},
			want: "CSR 'agent.example.test' contains extra subject alternative names (DNS:puppet, DNS:www.example.test), which are disallowed."},
		{name: "IP SAN",
			csr: func(t *testing.T) []byte {
				return makeCSR(t, csrSpec{cn: name, ips: []net.IP{net.ParseIP("10.0.0.1")}})
			},
			want: "(IP:10.0.0.1)"},
		{name: "email SAN even when SANs are allowed", opts: Options{AllowSubjectAltNames: true},
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, emails: []string{"root@example.test"}}) },
			want: "Only DNS and IP names are allowed in the Subject Alternative Names extension"},
		{name: "wildcard SAN even when SANs are allowed", opts: Options{AllowSubjectAltNames: true},
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, dns: []string{"*.example.test"}}) },
			want: "Cert subjectAltName contains a wildcard, which is not allowed: *.example.test"},
		{name: "upper-case certname", certname: "Agent.example.test",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "Agent.example.test"}) },
			want: "Certificate names must be lower case."},
		{name: "wildcard certname", certname: "*.example.test",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "*.example.test"}) },
			want: "Subject contains a wildcard, which is not allowed: *.example.test"},
		{name: "path traversal", certname: "../../etc/passwd",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "../../etc/passwd"}) },
			want: "Subject hostname format is invalid"},
		{name: "empty label", certname: "agent..example.test",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "agent..example.test"}) },
			want: "Subject hostname format is invalid"},
		{name: "label ending in dash", certname: "agent-.example.test",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "agent-.example.test"}) },
			want: "Subject hostname format is invalid"},
		{name: "empty certname", certname: "-",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "-"}) },
			want: "Subject hostname format is invalid"},
		{name: "the CA's own name", certname: "ca",
			csr:  func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: "ca"}) },
			want: `Certname "ca" is reserved`},
		{name: "extension Puppet does not allow",
			csr: func(t *testing.T) []byte {
				return makeCSR(t, csrSpec{cn: name, exts: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Value: basicConstraints}}})
			},
			want: "Found extensions that are not permitted: 2.5.29.19"},
		{name: "critical Puppet extension",
			csr: func(t *testing.T) []byte {
				return makeCSR(t, csrSpec{cn: name, exts: []pkix.Extension{utf8Ext(t, oidPPRole, "web", true)}})
			},
			want: "marks extension 1.3.6.1.4.1.34380.1.1.13 critical"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Autosign = true // refusals must hold on the autosign path too
			c := openCA(t, tc.opts)
			certname := tc.certname
			if certname == "" {
				certname = name
			}
			err := c.SubmitCSR(t.Context(), certname, tc.csr(t))
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("SubmitCSR: err = %v, want ErrInvalid", err)
			}
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("SubmitCSR: err = %v, want a *RequestError inside", err)
			}
			if !strings.Contains(re.Message, tc.want) {
				t.Fatalf("message = %q, want it to contain %q", re.Message, tc.want)
			}
			list, err := c.List(t.Context())
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if len(list) != 0 {
				t.Fatalf("a refused request changed the CA: %+v", list)
			}
		})
	}
}

func TestAcceptedRequests(t *testing.T) {
	const name = "agent.example.test"
	tests := []struct {
		name     string
		opts     Options
		csr      func(t *testing.T) []byte
		wantDNS  []string
		wantIPs  []string
		wantExts map[string]string // OID → UTF8 value copied into the certificate
	}{
		{name: "RSA 2048",
			csr:     func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, key: rsaKey(t)}) },
			wantDNS: []string{name}},
		{name: "ECDSA P-384 (Puppet's key_type=ec default curve)",
			csr:     func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, key: ecKey(t, elliptic.P384())}) },
			wantDNS: []string{name}},
		{name: "old NEW CERTIFICATE REQUEST header, after other PEM",
			csr: func(t *testing.T) []byte {
				der := mustPEMBytes(t, makeCSR(t, csrSpec{cn: name}))
				return append(mustReadFile(t, "testdata/puppet-ca-cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "NEW CERTIFICATE REQUEST", Bytes: der})...)
			},
			wantDNS: []string{name}},
		{name: "SAN that is the certname (SERVER-2338)",
			csr:     func(t *testing.T) []byte { return makeCSR(t, csrSpec{cn: name, dns: []string{name}}) },
			wantDNS: []string{name}},
		{name: "SANs when allowed", opts: Options{AllowSubjectAltNames: true},
			csr: func(t *testing.T) []byte {
				return makeCSR(t, csrSpec{cn: name, dns: []string{"alias.example.test"}, ips: []net.IP{net.ParseIP("192.0.2.7")}})
			},
			wantDNS: []string{"alias.example.test", name}, wantIPs: []string{"192.0.2.7"}},
		{name: "Puppet extension requests are copied",
			csr: func(t *testing.T) []byte {
				return makeCSR(t, csrSpec{cn: name, exts: []pkix.Extension{
					utf8Ext(t, oidPPRole, "webserver", false),
					utf8Ext(t, oidPPUUID, "ED803750-E3C7-44F5-BB08-41A04433FE2E", false),
					utf8Ext(t, oidPPPrivate, "private", false),
				}})
			},
			wantDNS: []string{name},
			wantExts: map[string]string{oidPPRole.String(): "webserver", oidPPUUID.String(): "ED803750-E3C7-44F5-BB08-41A04433FE2E",
				oidPPPrivate.String(): "private"}},
		{name: "authorization extensions when allowed", opts: Options{AllowAuthorizationExtensions: true},
			csr: func(t *testing.T) []byte {
				return makeCSR(t, csrSpec{cn: name, exts: []pkix.Extension{utf8Ext(t, oidPPAuthRole, "compile", false)}})
			},
			wantDNS: []string{name}, wantExts: map[string]string{oidPPAuthRole.String(): "compile"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := openCA(t, tc.opts)
			csrPEM := tc.csr(t)
			if err := c.SubmitCSR(t.Context(), name, csrPEM); err != nil {
				t.Fatalf("SubmitCSR: %v", err)
			}
			if err := c.Sign(t.Context(), name); err != nil {
				t.Fatalf("Sign: %v", err)
			}
			cert := mustParseCert(t, c.signedPEM(t, name))
			if !slices.Equal(cert.DNSNames, tc.wantDNS) {
				t.Errorf("DNS SANs = %v, want %v", cert.DNSNames, tc.wantDNS)
			}
			var ips []string
			for _, ip := range cert.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tc.wantIPs) {
				t.Errorf("IP SANs = %v, want %v", ips, tc.wantIPs)
			}
			got := map[string]string{}
			for _, ext := range cert.Extensions {
				if under(ext.Id, asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380}) {
					var s string
					if _, err := asn1.UnmarshalWithParams(ext.Value, &s, "utf8"); err != nil {
						t.Fatalf("extension %s: %v", ext.Id, err)
					}
					if ext.Critical {
						t.Errorf("extension %s copied as critical", ext.Id)
					}
					got[ext.Id.String()] = s
				}
			}
			if len(got) != len(tc.wantExts) {
				t.Errorf("Puppet extensions in certificate = %v, want %v", got, tc.wantExts)
			}
			for k, v := range tc.wantExts {
				if got[k] != v {
					t.Errorf("extension %s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestPolicyCheckedAtSigning: a request stored under a permissive policy is
// checked again when signed under a stricter one.
func TestPolicyCheckedAtSigning(t *testing.T) {
	c := openCA(t, Options{AllowSubjectAltNames: true})
	const name = "sans.example.test"
	if err := c.SubmitCSR(t.Context(), name, makeCSR(t, csrSpec{cn: name, dns: []string{"alias.example.test"}})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	strict := reopen(t, c, Options{})
	if err := strict.Sign(t.Context(), name); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("Sign under a policy refusing SANs: err = %v, want ErrInvalid", err)
	}
}

func TestCertnameRules(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"agent1.example.test", true},
		{"web_01", true},
		{"a-b.c_d.e", true},
		{"_under.example", true},
		{"localhost", true},
		{"", false},
		{".hidden", false},
		{"trailing.", false},
		{"a..b", false},
		{"dash-", false},
		{"dash-.example", false},
		{"UPPER", false},
		{"sp ace", false},
		{"slash/name", false},
		{`back\slash`, false},
		{"star*", false},
		{"ca", false},
		{strings.Repeat("a", 256), false},
	}
	for _, tc := range tests {
		err := checkCertname(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("checkCertname(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("checkCertname(%q) = %v, not ErrInvalid", tc.name, err)
		}
	}
}

// TestGoldenAgentCSR: the CSR a real puppet agent 7.23 sent is accepted.
func TestGoldenAgentCSR(t *testing.T) {
	c := openCA(t, Options{})
	csrPEM := mustReadFile(t, "testdata/puppet-agent1-csr.pem")
	if err := c.SubmitCSR(t.Context(), "agent1.example.test", csrPEM); err != nil {
		t.Fatalf("SubmitCSR of the recorded agent CSR: %v", err)
	}
	got, err := c.CertificateRequest(t.Context(), "agent1.example.test")
	if err != nil {
		t.Fatalf("CertificateRequest: %v", err)
	}
	if string(mustPEMBytes(t, got)) != string(mustPEMBytes(t, csrPEM)) {
		t.Fatalf("stored request differs from the submitted one")
	}
	if err := c.Sign(t.Context(), "agent1.example.test"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	// Submitted for another name it is refused with Puppet's words.
	err = c.SubmitCSR(t.Context(), "agent2.example.test", csrPEM)
	var re *RequestError
	if !errors.As(err, &re) || re.Message != `Instance name "agent1.example.test" does not match requested key "agent2.example.test"` {
		t.Fatalf("SubmitCSR for another name: err = %v", err)
	}
}

// TestAuthorizationExtensions: a request for authorization extensions is
// stored but never autosigned unless the CA allows them, pp_cli_auth
// never; only the operator's SignWith(AllowAuthorizationExtensions) signs
// what the CA's options do not.
func TestAuthorizationExtensions(t *testing.T) {
	const name = "agent.example.test"
	tests := []struct {
		name          string
		opts          Options
		ext           pkix.Extension
		wantAutosign  bool
		wantSignError string // Sign without options
	}{
		{name: "pp_cli_auth", ext: utf8Ext(t, oidPuppetCliAuth, "true", false),
			wantSignError: "requests pp_cli_auth (1.3.6.1.4.1.34380.1.3.39)"},
		{name: "pp_cli_auth when the CA allows authorization extensions", opts: Options{AllowAuthorizationExtensions: true},
			ext: utf8Ext(t, oidPuppetCliAuth, "true", false), wantSignError: "broker ca sign agent.example.test --allow-authorization-extensions"},
		{name: "pp_authorization", ext: utf8Ext(t, oidPPAuthRole, "admin", false),
			wantSignError: "CSR 'agent.example.test' contains an authorization extension, which is disallowed (1.3.6.1.4.1.34380.1.3.13)"},
		{name: "pp_authorization when the CA allows it", opts: Options{AllowAuthorizationExtensions: true},
			ext: utf8Ext(t, oidPPAuthRole, "admin", false), wantAutosign: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Autosign = true
			c := openCA(t, tc.opts)
			if err := c.SubmitCSR(t.Context(), name, makeCSR(t, csrSpec{cn: name, exts: []pkix.Extension{tc.ext}})); err != nil {
				t.Fatalf("SubmitCSR: %v (want the request stored)", err)
			}
			_, err := c.Certificate(t.Context(), name)
			if signed := err == nil; signed != tc.wantAutosign {
				t.Fatalf("autosigned = %v, want %v", signed, tc.wantAutosign)
			}
			if tc.wantAutosign {
				return
			}
			err = c.Sign(t.Context(), name)
			if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tc.wantSignError) {
				t.Fatalf("Sign = %v, want ErrInvalid containing %q", err, tc.wantSignError)
			}
			if err := c.SignWith(t.Context(), name, farm.SignOptions{AllowAuthorizationExtensions: true}); err != nil {
				t.Fatalf("SignWith AllowAuthorizationExtensions: %v", err)
			}
			cert := mustParseCert(t, c.signedPEM(t, name))
			if !slices.ContainsFunc(cert.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(tc.ext.Id) && bytes.Equal(e.Value, tc.ext.Value) }) {
				t.Errorf("certificate lacks %s: %v", tc.ext.Id, cert.Extensions)
			}
		})
	}
}
