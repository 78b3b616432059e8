package trusted

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func utf8Value(s string) []byte {
	b, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: []byte(s)})
	return b
}

func oid(s ...int) asn1.ObjectIdentifier { return asn1.ObjectIdentifier(s) }

// testExtensions covers registered, private and authorization arcs,
// unregistered OIDs under them, the string types agents' CSRs use, a value
// that is not DER, and extensions outside Puppet's arcs (ignored).
var testExtensions = []pkix.Extension{
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 1, 13), Value: utf8Value("web")},                  // pp_role
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 1, 12), Value: utf8Value("production")},           // pp_environment
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 1, 99), Value: utf8Value("unregistered")},         // not registered: dotted
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 2, 1), Value: utf8Value("private value")},         // ppPrivCertExt: dotted
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 3, 13), Value: utf8Value("admin")},                // pp_auth_role
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 3, 39), Value: utf8Value("true")},                 // pp_cli_auth: not registered in 7.23
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 1, 3), Value: []byte("not der")},                  // raw bytes (PUP-3560)
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 1, 1), Value: mustIA5("ED803750-E3C7-44F5-BB08")}, // IA5String
	{Id: oid(1, 3, 6, 1, 4, 1, 99999, 1), Value: utf8Value("elsewhere")},                   // not Puppet's
	{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 1), Value: utf8Value("the arc itself")},           // not below an arc
}

func mustIA5(s string) []byte {
	b, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagIA5String, Bytes: []byte(s)})
	return b
}

var wantExtensions = map[string]string{
	"pp_role":                  "web",
	"pp_environment":           "production",
	"1.3.6.1.4.1.34380.1.1.99": "unregistered",
	"1.3.6.1.4.1.34380.1.2.1":  "private value",
	"pp_auth_role":             "admin",
	"1.3.6.1.4.1.34380.1.3.39": "true",
	"pp_image_name":            "not der",
	"pp_uuid":                  "ED803750-E3C7-44F5-BB08",
	"ppRegCertExt":             "the arc itself",
}

func testCert(t *testing.T, exts []pkix.Extension) (*x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "node1.example.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtraExtensions: exts,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestExtensions(t *testing.T) {
	tests := []struct {
		name string
		exts []pkix.Extension
		want map[string]string
	}{
		{"none", nil, nil},
		{"only others", []pkix.Extension{{Id: oid(1, 2, 3, 4), Value: utf8Value("x")}}, nil},
		{"puppet's", testExtensions, wantExtensions},
		{"bmp string", []pkix.Extension{{Id: oid(1, 3, 6, 1, 4, 1, 34380, 1, 1, 13),
			Value: []byte{0x1e, 0x06, 0x00, 'd', 0x00, 'b', 0x00, 0xe9}}}, map[string]string{"pp_role": "dbé"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, _ := testCert(t, tt.exts)
			if got := Extensions(cert); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Extensions = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestExtensionsAsRubyPuppet checks Extensions against Puppet 7's own
// Puppet::SSL::Certificate#custom_extensions, which Puppet Server uses to
// build $trusted['extensions'].
func TestExtensionsAsRubyPuppet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	_, certPEM := testCert(t, testExtensions)
	p := filepath.Join(t.TempDir(), "cert.pem")
	if err := os.WriteFile(p, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `require 'puppet'; require 'json'
Puppet::SSL::Oids.register_puppet_oids
c = Puppet::SSL::Certificate.from_s(File.read(ARGV[0]))
puts JSON.generate(c.custom_extensions.to_h { |e| [e['oid'], e['value']] })`
	out, err := exec.Command("ruby", "-e", script, p).Output()
	if err != nil {
		t.Fatalf("ruby puppet: %v", err)
	}
	var ruby map[string]string
	if err := json.Unmarshal(out, &ruby); err != nil {
		t.Fatalf("ruby's answer %q: %v", out, err)
	}
	parsed, err := x509.ParseCertificate(mustDER(t, certPEM))
	if err != nil {
		t.Fatal(err)
	}
	if got := Extensions(parsed); !reflect.DeepEqual(got, ruby) {
		t.Errorf("Extensions = %v\nPuppet says  %v", got, ruby)
	}
}

func mustDER(t *testing.T, p []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("no PEM block")
	}
	return b.Bytes
}
