package ca

import (
	"bytes"
	"crypto/rsa"
	"errors"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

func TestContract(t *testing.T) {
	farmtest.TestCA(t, func(t *testing.T) farm.CA { return openCA(t, Options{}) })
}

// TestDefaults is the one test paying for a 4096-bit key: the zero Options
// give Puppet's CA.
func TestDefaults(t *testing.T) {
	c, err := Init(t.Context(), memstore.NewCAStore(), memstore.NewCAKey(), Options{ServerDir: t.TempDir(), Logger: discard})
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	defer c.Close()
	ca := c.CACert()
	if got := ca.PublicKey.(*rsa.PublicKey).N.BitLen(); got != 4096 {
		t.Errorf("CA key is %d bits, want 4096", got)
	}
	if got, want := ca.Subject.CommonName, "Puppet CA: compilefarm"; got != want {
		t.Errorf("CA subject CN = %q, want %q", got, want)
	}
	if c.opts.Autosign || c.opts.AllowSubjectAltNames || c.opts.AllowAuthorizationExtensions {
		t.Errorf("zero Options enable a permissive policy: %+v", c.opts)
	}
	csr := makeCSR(t, csrSpec{cn: "agent.example.test"})
	if err := c.SubmitCSR(t.Context(), "agent.example.test", csr); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(t.Context(), "agent.example.test"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	cert := mustParseCert(t, c.signedPEM(t, "agent.example.test"))
	if got, want := cert.NotAfter.Sub(cert.NotBefore), 5*365*24*time.Hour+24*time.Hour; got != want {
		t.Errorf("agent certificate lifetime %s, want %s (five 365-day years plus the day of backdating)", got, want)
	}
}

func TestOpenOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"key too small", Options{KeyBits: 1024}},
		{"negative validity", Options{Validity: -time.Hour}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ServerDir = t.TempDir()
			_, err := Init(t.Context(), memstore.NewCAStore(), memstore.NewCAKey(), tc.opts)
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("Init: err = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := Init(t.Context(), memstore.NewCAStore(), memstore.NewCAKey(), Options{}); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("Init without a ServerDir: err = %v, want ErrInvalid", err)
	}
}

func TestSubmitAfterRevoke(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{})
	const name = "again.example.test"
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(ctx, name); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	old := mustParseCert(t, c.signedPEM(t, name))
	if err := c.Revoke(ctx, name); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
		t.Fatalf("SubmitCSR after revocation: %v", err)
	}
	// The revoked certificate is retired so the agent fetching its new
	// certificate does not get the old one.
	if _, err := c.Certificate(ctx, name); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("Certificate while the new request is pending: err = %v, want ErrNotFound", err)
	}
	list, _ := c.List(ctx)
	if len(list) != 1 || list[0].State != farm.CertRequested {
		t.Fatalf("List = %+v, want one requested entry", list)
	}
	if err := c.Sign(ctx, name); err != nil {
		t.Fatalf("Sign the new request: %v", err)
	}
	cur := mustParseCert(t, c.signedPEM(t, name))
	if cur.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatalf("new certificate reuses serial %x", old.SerialNumber)
	}
	if !c.IsRevoked(old.SerialNumber) || c.IsRevoked(cur.SerialNumber) {
		t.Fatalf("IsRevoked(old)=%v IsRevoked(new)=%v, want true, false", c.IsRevoked(old.SerialNumber), c.IsRevoked(cur.SerialNumber))
	}
}

func TestRevokeTwiceChangesNothing(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{Autosign: true})
	if err := c.SubmitCSR(ctx, "r.example.test", makeCSR(t, csrSpec{cn: "r.example.test"})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Revoke(ctx, "r.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	first, _ := c.CRL(ctx)
	if err := c.Revoke(ctx, "r.example.test"); err != nil {
		t.Fatalf("Revoke again: %v", err)
	}
	second, _ := c.CRL(ctx)
	if !bytes.Equal(first, second) {
		t.Fatalf("revoking a revoked certificate re-signed the CRL")
	}
	if n := c.crl.Load().number.Int64(); n != 1 {
		t.Fatalf("CRL number = %d, want 1", n)
	}
}

func TestSignStates(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{})
	if err := c.SubmitCSR(ctx, "s.example.test", makeCSR(t, csrSpec{cn: "s.example.test"})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if err := c.Sign(ctx, "s.example.test"); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if _, err := c.CertificateRequest(ctx, "s.example.test"); !errors.Is(err, farm.ErrNotFound) {
		t.Errorf("CertificateRequest after signing: err = %v, want ErrNotFound (Puppet deletes signed requests)", err)
	}
	if err := c.Sign(ctx, "s.example.test"); !errors.Is(err, farm.ErrConflict) {
		t.Errorf("Sign of a signed name: err = %v, want ErrConflict", err)
	}
	if err := c.Revoke(ctx, "s.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := c.Sign(ctx, "s.example.test"); !errors.Is(err, farm.ErrNotFound) {
		t.Errorf("Sign of a revoked name without a new request: err = %v, want ErrNotFound", err)
	}
	var re *RequestError
	err := c.Sign(ctx, "never.example.test")
	if !errors.As(err, &re) || re.Message != "Could not find certificate_request never.example.test" {
		t.Errorf("Sign of an unknown name: err = %v, want Puppet's 404 message", err)
	}
	_, err = c.Certificate(ctx, "never.example.test")
	if !errors.As(err, &re) || re.Message != "Could not find certificate never.example.test" {
		t.Errorf("Certificate of an unknown name: err = %v, want Puppet's 404 message", err)
	}
}

func TestAutosign(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{Autosign: true})
	const name = "auto.example.test"
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: "pending-first.example.test"})); err == nil {
		t.Fatalf("SubmitCSR with a mismatched CN succeeded under autosign")
	}
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	if _, err := c.Certificate(ctx, name); err != nil {
		t.Fatalf("Certificate right after an autosigned submit: %v", err)
	}
	if _, err := c.CertificateRequest(ctx, name); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("CertificateRequest after autosign: err = %v, want ErrNotFound", err)
	}
	if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("second SubmitCSR under autosign: err = %v, want ErrConflict", err)
	}
}

func TestFrontDoorNamesAreReserved(t *testing.T) {
	ctx := t.Context()
	c := openCA(t, Options{Autosign: true})
	if _, err := c.IssueServerCert(ctx, "puppet.test", []string{"puppet", "localhost", "10.1.2.3"}, ""); err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	for _, name := range []string{"puppet.test", "puppet", "localhost"} {
		err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name}))
		if !errors.Is(err, farm.ErrConflict) {
			t.Errorf("SubmitCSR %q, a front door name: err = %v, want ErrConflict", name, err)
		}
	}
	if err := c.SubmitCSR(ctx, "agent.puppet.test", makeCSR(t, csrSpec{cn: "agent.puppet.test"})); err != nil {
		t.Errorf("SubmitCSR of an unrelated name: %v", err)
	}
	// An agent already holding the name keeps it: the front door must pick another.
	if _, err := c.IssueServerCert(ctx, "agent.puppet.test", nil, ""); !errors.Is(err, farm.ErrConflict) {
		t.Errorf("IssueServerCert for an agent's certname: err = %v, want ErrConflict", err)
	}
}

func TestClampToCALifetime(t *testing.T) {
	c := openCA(t, Options{Autosign: true, Validity: 100 * 365 * 24 * time.Hour})
	if err := c.SubmitCSR(t.Context(), "long.example.test", makeCSR(t, csrSpec{cn: "long.example.test"})); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	cert := mustParseCert(t, c.signedPEM(t, "long.example.test"))
	if !cert.NotAfter.Equal(c.CACert().NotAfter) {
		t.Fatalf("NotAfter %v, want the CA's %v", cert.NotAfter, c.CACert().NotAfter)
	}
}
