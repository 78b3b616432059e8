package frontdoor

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// signCRL makes a CRL dated thisUpdate with one revocation per date in
// revoked, signed by a throwaway CA.
func signCRL(t *testing.T, thisUpdate time.Time, revoked ...time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Puppet CA: crl test"},
		NotBefore: thisUpdate.Add(-time.Hour), NotAfter: thisUpdate.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId: []byte{1, 2, 3, 4},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	issuer, _ := x509.ParseCertificate(der)
	var entries []x509.RevocationListEntry
	for i, at := range revoked {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: big.NewInt(int64(i + 2)), RevocationTime: at})
	}
	der, err = x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(int64(len(revoked))), ThisUpdate: thisUpdate, NextUpdate: thisUpdate.Add(time.Hour),
		RevokedCertificateEntries: entries,
	}, issuer, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

func TestCRLDate(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		crl  []byte
		want time.Time
	}{
		{"empty CRL: its thisUpdate", signCRL(t, t0), t0},
		{"backdated thisUpdate: the newest revocation", signCRL(t, t0.Add(-24*time.Hour), t0.Add(-time.Hour), t0, t0.Add(-time.Minute)), t0},
		{"Puppet's: thisUpdate a second before the revocation", signCRL(t, t0.Add(-time.Second), t0), t0},
		{"older compilefarm: thisUpdate pushed into the future", signCRL(t, t0.Add(3*time.Second), t0), t0.Add(3 * time.Second)},
		{"not PEM", []byte("garbage"), time.Time{}},
		{"PEM, not a CRL", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: []byte{0x30, 0x00}}), time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := crlDate(tt.crl); !got.Equal(tt.want) {
				t.Errorf("crlDate = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestNewCRLVersion(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	crl := signCRL(t, t0.Add(-24*time.Hour), t0)
	tests := []struct {
		name  string
		crl   []byte
		since time.Time
		want  time.Time
	}{
		{"the CRL's date", crl, time.Time{}, t0.Add(crlSettle)},
		{"served since before its date", crl, t0.Add(-time.Minute), t0.Add(crlSettle)},
		{"served since after its date (a proxy)", crl, t0.Add(90*time.Second + 300*time.Millisecond), t0.Add(90*time.Second + 300*time.Millisecond + crlSettle)},
		{"not a CRL", []byte("garbage"), time.Time{}, time.Time{}},
		{"not a CRL, served since", []byte("garbage"), t0, t0.Add(crlSettle)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newCRLVersion(tt.crl, tt.since)
			if !v.lastModified.Equal(tt.want) {
				t.Errorf("lastModified = %s, want %s", v.lastModified, tt.want)
			}
			if len(v.etag) != 34 || v.etag[0] != '"' || v.etag[33] != '"' {
				t.Errorf("etag %q is not a quoted strong tag", v.etag)
			}
		})
	}
	if a, b := newCRLVersion(crl, time.Time{}), newCRLVersion(signCRL(t, t0.Add(-24*time.Hour), t0), time.Time{}); a.etag == b.etag {
		t.Errorf("two CRLs of the same second share the ETag %s", a.etag)
	}
}

func TestCRLNotModified(t *testing.T) {
	lm := time.Date(2025, 3, 1, 12, 0, 10, 0, time.UTC)
	v := crlVersion{lastModified: lm, etag: `"0123abcd"`}
	date := func(t time.Time) string { return t.Format(http.TimeFormat) }
	tests := []struct {
		name   string
		v      crlVersion
		header http.Header
		want   bool
	}{
		{"no conditions", v, nil, false},
		{"If-Modified-Since at Last-Modified", v, http.Header{"If-Modified-Since": {date(lm)}}, true},
		{"If-Modified-Since after", v, http.Header{"If-Modified-Since": {date(lm.Add(time.Hour))}}, true},
		{"If-Modified-Since a second before", v, http.Header{"If-Modified-Since": {date(lm.Add(-time.Second))}}, false},
		{"If-Modified-Since within Last-Modified's second", crlVersion{lastModified: lm.Add(700 * time.Millisecond), etag: v.etag},
			http.Header{"If-Modified-Since": {date(lm)}}, true},
		{"If-Modified-Since unparsable", v, http.Header{"If-Modified-Since": {"yesterday"}}, false},
		{"If-Modified-Since, Last-Modified unknown", crlVersion{etag: v.etag}, http.Header{"If-Modified-Since": {date(lm.Add(time.Hour))}}, false},
		{"If-None-Match the ETag", v, http.Header{"If-None-Match": {`"0123abcd"`}}, true},
		{"If-None-Match weak", v, http.Header{"If-None-Match": {`W/"0123abcd"`}}, true},
		{"If-None-Match in a list", v, http.Header{"If-None-Match": {`"ffff", "0123abcd"`}}, true},
		{"If-None-Match on a second line", v, http.Header{"If-None-Match": {`"ffff"`, `"0123abcd"`}}, true},
		{"If-None-Match any", v, http.Header{"If-None-Match": {"*"}}, true},
		{"If-None-Match another CRL", v, http.Header{"If-None-Match": {`"ffff"`}}, false},
		{"If-None-Match another CRL wins over If-Modified-Since", v,
			http.Header{"If-None-Match": {`"ffff"`}, "If-Modified-Since": {date(lm.Add(time.Hour))}}, false},
		{"If-None-Match the ETag wins over an old If-Modified-Since", v,
			http.Header{"If-None-Match": {`"0123abcd"`}, "If-Modified-Since": {date(lm.Add(-time.Hour))}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.notModified(tt.header); got != tt.want {
				t.Errorf("notModified = %v, want %v", got, tt.want)
			}
		})
	}
}

var quietLog = slog.New(slog.DiscardHandler)

// fakeClock is a CA's clock that tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// TestCRLRefreshAfterRevocations answers agents refreshing their CRL (as
// Puppet's agent does: If-Modified-Since is when, by its clock, it last
// downloaded or checked the CRL) from the built-in CA, whose clock the
// test sets: revocations at the given offsets from 12:00:00, then one
// refresh.
func TestCRLRefreshAfterRevocations(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name        string
		revocations []time.Duration
		checked     time.Duration // the agent's If-Modified-Since, as an offset from t0
		want        int
	}{
		{"unchanged since the CA was made", nil, ms(1500), http.StatusNotModified},
		{"downloaded the CRL before, in the same second", []time.Duration{ms(900)}, ms(500), http.StatusOK},
		{"downloaded CRL 1 between two revocations of one second", []time.Duration{ms(200), ms(900)}, ms(500), http.StatusOK},
		{"a burst of five in one second, downloaded in the middle", []time.Duration{ms(100), ms(300), ms(500), ms(700), ms(900)}, ms(400), http.StatusOK},
		{"a burst across a second boundary", []time.Duration{ms(800), ms(1100), ms(1200)}, ms(1150), http.StatusOK},
		{"downloaded before the revocation, clock 5 s ahead", []time.Duration{ms(900)}, ms(500) + 5*time.Second, http.StatusOK},
		{"downloaded long before", []time.Duration{ms(900)}, -time.Hour, http.StatusOK},
		{"downloaded after, within the settle time: once more", []time.Duration{ms(200)}, ms(1200), http.StatusOK},
		{"downloaded after the settle time", []time.Duration{ms(200), ms(900)}, crlSettle, http.StatusNotModified},
		{"downloaded a second short of the settle time", []time.Duration{ms(200), ms(900)}, crlSettle - time.Second, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{t: t0.Add(-time.Hour)}
			authority, err := cadir.OpenCA(t.Context(), t.TempDir(), ca.Options{Name: "test", KeyBits: 2048, Autosign: true, Now: clk.now, Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { authority.Close() })
			for i, at := range tt.revocations {
				name := fmt.Sprintf("agent%d.example.test", i)
				csr, _ := farmtest.NewCSR(t, name)
				if err := authority.SubmitCSR(t.Context(), name, csr); err != nil {
					t.Fatal(err)
				}
				clk.set(t0.Add(at))
				if err := authority.Revoke(t.Context(), name); err != nil {
					t.Fatal(err)
				}
			}
			h := (&Server{CA: authority}).Handler()
			req := httptest.NewRequest("GET", "/puppet-ca/v1/certificate_revocation_list/ca", nil)
			req.Header.Set("If-Modified-Since", t0.Add(tt.checked).Format(http.TimeFormat))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d (Last-Modified %q)", rec.Code, tt.want, rec.Header().Get("Last-Modified"))
			}
			if rec.Header().Get("ETag") == "" {
				t.Errorf("no ETag")
			}
			if tt.want == http.StatusOK {
				if !strings.HasPrefix(rec.Body.String(), "-----BEGIN X509 CRL-----") || rec.Header().Get("Last-Modified") == "" {
					t.Errorf("200 without the CRL and its Last-Modified: %q, %.30q", rec.Header().Get("Last-Modified"), rec.Body.String())
				}
			} else if rec.Body.Len() != 0 {
				t.Errorf("304 with a body")
			}
		})
	}
}

// TestOldFutureDatedCRL: a CRL an older version wrote, its thisUpdate
// pushed past the signer's clock, is served with Last-Modified at most
// now, answers 304 to its ETag and to an agent that checked after it, and
// a revocation on top of it reaches an agent that downloaded it.
func TestOldFutureDatedCRL(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	authority, err := cadir.OpenCA(ctx, dir, ca.Options{Name: "test", KeyBits: 2048, Autosign: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { authority.Close() })
	csr, _ := farmtest.NewCSR(t, "agent1.example.test")
	if err := authority.SubmitCSR(ctx, "agent1.example.test", csr); err != nil {
		t.Fatal(err)
	}
	// The old code's CRL after a burst: thisUpdate 5 s ahead.
	now := time.Now().Truncate(time.Second)
	caPEM, _ := authority.CACertificate(ctx)
	block, _ := pem.Decode(caPEM)
	caCert, _ := x509.ParseCertificate(block.Bytes)
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca_key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(1), ThisUpdate: now.Add(5 * time.Second), NextUpdate: now.Add(time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: big.NewInt(999), RevocationTime: now}},
	}, caCert, key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cadir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.PutCRL(ctx, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), big.NewInt(1), big.NewInt(0)); err != nil {
		t.Fatal(err)
	}

	h := (&Server{CA: authority}).Handler()
	get := func(header ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/puppet-ca/v1/certificate_revocation_list/ca", nil)
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first := get()
	lm, err := http.ParseTime(first.Header().Get("Last-Modified"))
	if first.Code != http.StatusOK || err != nil || !strings.Contains(first.Body.String(), "BEGIN X509 CRL") {
		t.Fatalf("GET the old CRL: status %d, Last-Modified %q (%v)", first.Code, first.Header().Get("Last-Modified"), err)
	}
	if lm.After(time.Now()) {
		t.Errorf("Last-Modified %s is in the future", lm)
	}
	if rec := get("If-None-Match", first.Header().Get("ETag")); rec.Code != http.StatusNotModified {
		t.Errorf("If-None-Match its ETag: %d, want 304", rec.Code)
	}
	later := now.Add(5*time.Second + crlSettle).Format(http.TimeFormat)
	if rec := get("If-Modified-Since", later); rec.Code != http.StatusNotModified {
		t.Errorf("If-Modified-Since after its date and the settle time: %d, want 304", rec.Code)
	}
	// An agent that downloaded the old CRL just now gets the next one.
	if err := authority.Revoke(ctx, "agent1.example.test"); err != nil {
		t.Fatal(err)
	}
	if rec := get("If-Modified-Since", time.Now().Format(http.TimeFormat)); rec.Code != http.StatusOK || rec.Body.String() == first.Body.String() {
		t.Errorf("after a revocation on top of the old CRL: %d, want 200 and the new CRL", rec.Code)
	}
}
