package farmtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// NewCSR returns a PEM certificate request with subject CN=certname and its
// ECDSA P-256 key, as a Puppet agent with key_type=ec would send.
func NewCSR(t testing.TB, certname string) ([]byte, crypto.Signer) {
	t.Helper()
	return NewCSRWith(t, certname)
}

// PPCliAuth is Puppet's pp_cli_auth extension with the value "true": the
// mark of an operator certificate.
var PPCliAuth = pkix.Extension{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 34380, 1, 3, 39}, Value: []byte{0x0c, 4, 't', 'r', 'u', 'e'}}

// NewCSRWith is NewCSR for a request carrying extensions.
func NewCSRWith(t testing.TB, certname string, exts ...pkix.Extension) ([]byte, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key for %s: %v", certname, err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: certname},
		ExtraExtensions: exts,
	}, key)
	if err != nil {
		t.Fatalf("create CSR for %s: %v", certname, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), key
}

// CAOption states a promise of farm.CA that a driver does not keep, and
// what TestCA does instead.
type CAOption func(*caSuite)

// SignsNothing is the option of a CA that forwards to an upstream CA which
// signs (caproxy): its Sign, SignWith, Revoke and List return ErrInvalid,
// which the suite checks ("SignsNothingIsInvalid"), for a name with a
// pending request and one without, changing nothing upstream. Everything
// else runs on the CA under test: requests are submitted, and
// certificates, requests and the CRL fetched, through it; upstream(ca)
// returns the CA its operator signs and revokes on (the one open's CA
// forwards to), where the suite does that. The CA under test may serve a
// revocation late: the suite waits up to caCRLWait for its CRL to list
// it. Left out, each by a line in the test log: the states, serials and
// fingerprints the CA under test would List, and the ErrNotFound of Sign
// and Revoke for an unknown name.
func SignsNothing(upstream func(ca farm.CA) farm.CA) CAOption {
	return func(s *caSuite) { s.signsNothing, s.upstream = true, upstream }
}

// caCRLWait bounds how late a CA that signs nothing may serve a revocation
// made upstream.
const caCRLWait = 10 * time.Second

// caSuite is TestCA's options.
type caSuite struct {
	signsNothing bool
	upstream     func(farm.CA) farm.CA
}

// signer is the CA that signs and revokes for ca: ca itself, or its
// upstream when ca signs nothing.
func (s *caSuite) signer(ca farm.CA) farm.CA {
	if s.signsNothing {
		return s.upstream(ca)
	}
	return ca
}

// lists reports whether ca's List is part of the suite, logging what is
// left out when it is not.
func (s *caSuite) lists(t *testing.T, what string) bool {
	t.Helper()
	if s.signsNothing {
		t.Logf("left out (SignsNothing): %s, which List would show", what)
		return false
	}
	return true
}

// TestCA runs the contract suite for farm.CA. open returns a new, empty CA
// with autosign off; each subtest opens its own. opts state the promises
// the driver does not keep (SignsNothing).
func TestCA(t *testing.T, open func(t *testing.T) farm.CA, opts ...CAOption) {
	s := &caSuite{}
	for _, o := range opts {
		o(s)
	}
	if s.signsNothing {
		t.Run("SignsNothingIsInvalid", func(t *testing.T) {
			ca := open(t)
			ctx := t.Context()
			const pending, unknown = "pending.example.test", "unknown.example.test"
			csrPEM, _ := NewCSR(t, pending)
			if err := ca.SubmitCSR(ctx, pending, csrPEM); err != nil {
				t.Fatalf("SubmitCSR: %v", err)
			}
			for _, name := range []string{pending, unknown} {
				for what, err := range map[string]error{
					"Sign":                                  ca.Sign(ctx, name),
					"SignWith":                              ca.SignWith(ctx, name, farm.SignOptions{}),
					"SignWith AllowAuthorizationExtensions": ca.SignWith(ctx, name, farm.SignOptions{AllowAuthorizationExtensions: true}),
					"Revoke":                                ca.Revoke(ctx, name),
				} {
					if !errors.Is(err, farm.ErrInvalid) {
						t.Errorf("%s %s: err = %v, want ErrInvalid", what, name, err)
					}
				}
			}
			if _, err := ca.List(ctx); !errors.Is(err, farm.ErrInvalid) {
				t.Errorf("List: err = %v, want ErrInvalid", err)
			}
			if _, err := ca.CertificateRequest(ctx, pending); err != nil {
				t.Errorf("the request is no longer pending after the refused calls: %v", err)
			}
			if _, err := ca.Certificate(ctx, pending); !errors.Is(err, farm.ErrNotFound) {
				t.Errorf("Certificate after the refused calls: err = %v, want ErrNotFound (nothing signed)", err)
			}
		})
	}

	t.Run("CACertificate", func(t *testing.T) {
		ca := open(t)
		cert := caCACert(t, ca)
		if !cert.IsCA || !cert.BasicConstraintsValid {
			t.Fatalf("CA certificate is not a CA: IsCA=%v BasicConstraintsValid=%v", cert.IsCA, cert.BasicConstraintsValid)
		}
		if err := cert.CheckSignatureFrom(cert); err != nil {
			t.Fatalf("CA certificate is not self-signed: %v", err)
		}
		if cert.KeyUsage&x509.KeyUsageCertSign == 0 || cert.KeyUsage&x509.KeyUsageCRLSign == 0 {
			t.Fatalf("CA key usage %v lacks certSign or cRLSign", cert.KeyUsage)
		}
	})

	t.Run("EmptyCRL", func(t *testing.T) {
		ca := open(t)
		crl := caCRL(t, ca)
		if len(crl.RevokedCertificateEntries) != 0 {
			t.Fatalf("new CA's CRL lists %d revocations", len(crl.RevokedCertificateEntries))
		}
		if crl.Number == nil {
			t.Fatalf("CRL has no CRL number")
		}
	})

	t.Run("SubmitListSign", func(t *testing.T) {
		ca := open(t)
		ctx := t.Context()
		const name = "agent1.example.test"
		csrPEM, key := NewCSR(t, name)
		if err := ca.SubmitCSR(ctx, name, csrPEM); err != nil {
			t.Fatalf("SubmitCSR: %v", err)
		}
		got, err := ca.CertificateRequest(ctx, name)
		if err != nil {
			t.Fatalf("CertificateRequest after submit: %v", err)
		}
		if !caSameDER(t, got, csrPEM) {
			t.Fatalf("CertificateRequest returned another request than submitted")
		}
		if _, err := ca.Certificate(ctx, name); !errors.Is(err, farm.ErrNotFound) {
			t.Fatalf("Certificate before signing: err = %v, want ErrNotFound", err)
		}
		lists := s.lists(t, "the states, serial and fingerprint of a request and a certificate")
		if lists {
			st := caStatus(t, ca, name)
			if st.State != farm.CertRequested {
				t.Fatalf("state after submit = %q, want %q", st.State, farm.CertRequested)
			}
			caCheckFingerprint(t, st.Fingerprint)
		}

		if err := s.signer(ca).Sign(ctx, name); err != nil {
			t.Fatalf("Sign: %v", err)
		}
		cert := caAgentCert(t, ca, name, key)
		if lists {
			st := caStatus(t, ca, name)
			if st.State != farm.CertSigned {
				t.Fatalf("state after signing = %q, want %q", st.State, farm.CertSigned)
			}
			caCheckStatusMatches(t, st, cert)
		}
	})

	t.Run("ResubmitPendingReplaces", func(t *testing.T) {
		ca := open(t)
		ctx := t.Context()
		const name = "agent2.example.test"
		first, _ := NewCSR(t, name)
		second, key := NewCSR(t, name)
		if err := ca.SubmitCSR(ctx, name, first); err != nil {
			t.Fatalf("SubmitCSR first: %v", err)
		}
		if err := ca.SubmitCSR(ctx, name, second); err != nil {
			t.Fatalf("SubmitCSR second for a pending name: %v", err)
		}
		got, err := ca.CertificateRequest(ctx, name)
		if err != nil {
			t.Fatalf("CertificateRequest: %v", err)
		}
		if !caSameDER(t, got, second) {
			t.Fatalf("pending request was not replaced by the resubmitted one")
		}
		if err := s.signer(ca).Sign(ctx, name); err != nil {
			t.Fatalf("Sign: %v", err)
		}
		caAgentCert(t, ca, name, key)
	})

	t.Run("SubmitForSignedConflicts", func(t *testing.T) {
		ca := open(t)
		ctx := t.Context()
		const name = "agent3.example.test"
		s.submitSign(t, ca, name)
		before, err := ca.Certificate(ctx, name)
		if err != nil {
			t.Fatalf("Certificate: %v", err)
		}
		again, _ := NewCSR(t, name)
		if err := ca.SubmitCSR(ctx, name, again); !errors.Is(err, farm.ErrConflict) {
			t.Fatalf("SubmitCSR for a signed name: err = %v, want ErrConflict", err)
		}
		after, err := ca.Certificate(ctx, name)
		if err != nil {
			t.Fatalf("Certificate after refused submit: %v", err)
		}
		if string(before) != string(after) {
			t.Fatalf("refused submit changed the certificate")
		}
	})

	t.Run("OperatorRequest", func(t *testing.T) {
		// A request for pp_cli_auth waits for an operator's explicit
		// SignWith, which copies the extension.
		ca := open(t)
		const name = "operator.example.test"
		csrPEM, key := NewCSRWith(t, name, PPCliAuth)
		if err := ca.SubmitCSR(t.Context(), name, csrPEM); err != nil {
			t.Fatalf("SubmitCSR of a pp_cli_auth request: %v (want it stored, pending)", err)
		}
		if _, err := ca.CertificateRequest(t.Context(), name); err != nil {
			t.Fatalf("CertificateRequest after SubmitCSR: %v (want it pending)", err)
		}
		if s.lists(t, "the state of a pending operator request") {
			if st := caStatus(t, ca, name); st.State != farm.CertRequested {
				t.Fatalf("state after SubmitCSR = %q, want %q", st.State, farm.CertRequested)
			}
		}
		signer := s.signer(ca)
		if err := signer.Sign(t.Context(), name); !errors.Is(err, farm.ErrInvalid) {
			t.Fatalf("Sign of a pp_cli_auth request = %v, want ErrInvalid", err)
		}
		if err := signer.SignWith(t.Context(), name, farm.SignOptions{}); !errors.Is(err, farm.ErrInvalid) {
			t.Fatalf("SignWith (no options) of a pp_cli_auth request = %v, want ErrInvalid", err)
		}
		if err := signer.SignWith(t.Context(), name, farm.SignOptions{AllowAuthorizationExtensions: true}); err != nil {
			t.Fatalf("SignWith AllowAuthorizationExtensions: %v", err)
		}
		cert := caAgentCert(t, ca, name, key)
		found := false
		for _, e := range cert.Extensions {
			if e.Id.Equal(PPCliAuth.Id) {
				found = string(e.Value) == string(PPCliAuth.Value)
			}
		}
		if !found {
			t.Fatalf("the certificate does not carry pp_cli_auth=true: %v", cert.Extensions)
		}
	})

	t.Run("Revoke", func(t *testing.T) {
		ca := open(t)
		ctx := t.Context()
		const name = "agent4.example.test"
		cert := s.submitSign(t, ca, name)
		s.submitSign(t, ca, "bystander.example.test")
		if err := s.signer(ca).Revoke(ctx, name); err != nil {
			t.Fatalf("Revoke: %v", err)
		}
		if s.lists(t, "the states of a revoked certificate and a bystander") {
			if st := caStatus(t, ca, name); st.State != farm.CertRevoked {
				t.Fatalf("state after revoke = %q, want %q", st.State, farm.CertRevoked)
			}
			if st := caStatus(t, ca, "bystander.example.test"); st.State != farm.CertSigned {
				t.Fatalf("bystander's state after another revoke = %q, want %q", st.State, farm.CertSigned)
			}
		}
		crl := s.crlListing(t, ca, cert.SerialNumber)
		if len(crl.RevokedCertificateEntries) != 1 {
			t.Fatalf("CRL lists %d serials, want 1", len(crl.RevokedCertificateEntries))
		}
	})

	t.Run("Errors", func(t *testing.T) {
		ca := open(t)
		ctx := t.Context()
		good, _ := NewCSR(t, "good.example.test")
		tests := []struct {
			name     string
			certname string
			csr      []byte
		}{
			{"CN does not match certname", "other.example.test", good},
			{"garbage", "good.example.test", []byte("this is not a certificate request")},
			{"empty", "good.example.test", nil},
			{"PEM of another type", "good.example.test", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x00}})},
			{"truncated DER", "good.example.test", caTruncate(t, good)},
			{"invalid certname", "Bad/Name", good},
			{"path traversal", "../good.example.test", good},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				err := ca.SubmitCSR(ctx, tc.certname, tc.csr)
				if !errors.Is(err, farm.ErrInvalid) {
					t.Fatalf("SubmitCSR: err = %v, want ErrInvalid", err)
				}
				if err.Error() == "" {
					t.Fatalf("error has no message")
				}
			})
		}
		list, err := s.signer(ca).List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if s.signsNothing {
			// The upstream lists its own front door's certificate too.
			list = slices.DeleteFunc(list, func(st farm.CertStatus) bool { return st.State != farm.CertRequested })
		}
		if len(list) != 0 {
			t.Fatalf("refused requests left %d entries: %+v", len(list), list)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		ca := open(t)
		ctx := t.Context()
		const name = "nobody.example.test"
		if _, err := ca.Certificate(ctx, name); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("Certificate: err = %v, want ErrNotFound", err)
		}
		if _, err := ca.CertificateRequest(ctx, name); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("CertificateRequest: err = %v, want ErrNotFound", err)
		}
		if s.signsNothing {
			t.Log("left out (SignsNothing): the ErrNotFound of Sign and Revoke for an unknown name")
			return
		}
		if err := ca.Sign(ctx, name); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("Sign: err = %v, want ErrNotFound", err)
		}
		if err := ca.Revoke(ctx, name); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("Revoke: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("ConcurrentSubmitsAndSigns", func(t *testing.T) {
		ca := open(t)
		ctx := t.Context()
		const n = 16
		keys := make([]crypto.Signer, n)
		csrs := make([][]byte, n)
		for i := range n {
			csrs[i], keys[i] = NewCSR(t, fmt.Sprintf("node%02d.example.test", i))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("node%02d.example.test", i)
				if err := ca.SubmitCSR(ctx, name, csrs[i]); err != nil {
					errs <- fmt.Errorf("SubmitCSR %s: %w", name, err)
				}
			}()
		}
		wg.Wait()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("node%02d.example.test", i)
				if err := s.signer(ca).Sign(ctx, name); err != nil {
					errs <- fmt.Errorf("Sign %s: %w", name, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			return
		}
		serials := map[string]string{}
		for i := range n {
			name := fmt.Sprintf("node%02d.example.test", i)
			cert := caAgentCert(t, ca, name, keys[i])
			s := cert.SerialNumber.String()
			if other, dup := serials[s]; dup {
				t.Fatalf("%s and %s share serial %s", name, other, s)
			}
			serials[s] = name
		}
		list, err := s.signer(ca).List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		signed := 0
		for _, st := range list {
			if strings.HasPrefix(st.Certname, "node") && st.State == farm.CertSigned {
				signed++
			}
		}
		if signed != n {
			t.Fatalf("List shows %d signed nodes, want %d", signed, n)
		}
	})
}

// submitSign submits a request for name through ca, signs it (on ca's
// upstream when ca signs nothing) and returns the certificate ca serves.
func (s *caSuite) submitSign(t testing.TB, ca farm.CA, name string) *x509.Certificate {
	t.Helper()
	csrPEM, key := NewCSR(t, name)
	if err := ca.SubmitCSR(t.Context(), name, csrPEM); err != nil {
		t.Fatalf("SubmitCSR %s: %v", name, err)
	}
	if err := s.signer(ca).Sign(t.Context(), name); err != nil {
		t.Fatalf("Sign %s: %v", name, err)
	}
	return caAgentCert(t, ca, name, key)
}

// crlListing returns ca's CRL once it lists serial: at once for a CA that
// signs, within caCRLWait for one that signs nothing.
func (s *caSuite) crlListing(t testing.TB, ca farm.CA, serial *big.Int) *x509.RevocationList {
	t.Helper()
	deadline := time.Now().Add(caCRLWait)
	for {
		crl := caCRL(t, ca)
		if caCRLHas(crl, serial) {
			return crl
		}
		if !s.signsNothing || time.Now().After(deadline) {
			t.Fatalf("CRL does not list revoked serial %x", serial)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func caPEMBlock(t testing.TB, data []byte, typ string) []byte {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("not PEM: %.60q", data)
	}
	if block.Type != typ {
		t.Fatalf("PEM type %q, want %q", block.Type, typ)
	}
	return block.Bytes
}

func caCACert(t testing.TB, ca farm.CA) *x509.Certificate {
	t.Helper()
	data, err := ca.CACertificate(t.Context())
	if err != nil {
		t.Fatalf("CACertificate: %v", err)
	}
	cert, err := x509.ParseCertificate(caPEMBlock(t, data, "CERTIFICATE"))
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	return cert
}

// caCRL fetches the CRL and checks the CA signed it.
func caCRL(t testing.TB, ca farm.CA) *x509.RevocationList {
	t.Helper()
	data, err := ca.CRL(t.Context())
	if err != nil {
		t.Fatalf("CRL: %v", err)
	}
	crl, err := x509.ParseRevocationList(caPEMBlock(t, data, "X509 CRL"))
	if err != nil {
		t.Fatalf("parse CRL: %v", err)
	}
	if err := crl.CheckSignatureFrom(caCACert(t, ca)); err != nil {
		t.Fatalf("CRL is not signed by the CA: %v", err)
	}
	return crl
}

func caCRLHas(crl *x509.RevocationList, serial *big.Int) bool {
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(serial) == 0 {
			return true
		}
	}
	return false
}

// caAgentCert fetches the certificate of name and checks it is what an
// agent needs: CN=name, the agent's key, chaining to the CA for client auth.
func caAgentCert(t testing.TB, ca farm.CA, name string, key crypto.Signer) *x509.Certificate {
	t.Helper()
	data, err := ca.Certificate(t.Context(), name)
	if err != nil {
		t.Fatalf("Certificate %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(caPEMBlock(t, data, "CERTIFICATE"))
	if err != nil {
		t.Fatalf("parse certificate of %s: %v", name, err)
	}
	if cert.Subject.CommonName != name {
		t.Fatalf("certificate CN = %q, want %q", cert.Subject.CommonName, name)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		t.Fatalf("certificate of %s does not carry the requested key", name)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCACert(t, ca))
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("certificate of %s does not verify for client auth: %v", name, err)
	}
	return cert
}

func caStatus(t testing.TB, ca farm.CA, name string) farm.CertStatus {
	t.Helper()
	list, err := ca.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var found []farm.CertStatus
	for _, st := range list {
		if st.Certname == name {
			found = append(found, st)
		}
	}
	if len(found) != 1 {
		t.Fatalf("List has %d entries for %s, want 1: %+v", len(found), name, list)
	}
	return found[0]
}

var caFingerprintRE = regexp.MustCompile(`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){31}$`)

func caCheckFingerprint(t testing.TB, fp string) {
	t.Helper()
	if !caFingerprintRE.MatchString(fp) {
		t.Fatalf("fingerprint %q is not a colon-separated SHA-256", fp)
	}
}

func caCheckStatusMatches(t testing.TB, st farm.CertStatus, cert *x509.Certificate) {
	t.Helper()
	caCheckFingerprint(t, st.Fingerprint)
	sum := sha256.Sum256(cert.Raw)
	if got := strings.ToLower(strings.ReplaceAll(st.Fingerprint, ":", "")); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("fingerprint %s is not the SHA-256 of the certificate", st.Fingerprint)
	}
	serial, ok := new(big.Int).SetString(st.Serial, 16)
	if !ok || serial.Cmp(cert.SerialNumber) != 0 {
		t.Fatalf("serial %q, certificate has %x", st.Serial, cert.SerialNumber)
	}
	if !st.NotAfter.Equal(cert.NotAfter) {
		t.Fatalf("NotAfter %v, certificate has %v", st.NotAfter, cert.NotAfter)
	}
}

func caSameDER(t testing.TB, a, b []byte) bool {
	t.Helper()
	return string(caPEMBlock(t, a, "CERTIFICATE REQUEST")) == string(caPEMBlock(t, b, "CERTIFICATE REQUEST"))
}

// caTruncate cuts a PEM request's DER in half and re-encodes it.
func caTruncate(t testing.TB, csrPEM []byte) []byte {
	t.Helper()
	der := caPEMBlock(t, csrPEM, "CERTIFICATE REQUEST")
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der[:len(der)/2]})
}
