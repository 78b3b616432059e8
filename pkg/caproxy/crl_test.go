package caproxy

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
)

const crlPath = "/puppet-ca/v1/certificate_revocation_list/ca"

// TestCRLTwoInOneSecond: the upstream signs two CRLs within one second
// (its clock stands still) and the proxy refreshes between them: it
// revalidates by ETag, so the second CRL is not taken for the first.
func TestCRLTwoInOneSecond(t *testing.T) {
	ctx := context.Background()
	at := time.Now().Add(-time.Minute).Truncate(time.Second).Add(300 * time.Millisecond)
	up := startUpstream(t, ca.Options{Autosign: true, Now: func() time.Time { return at }})
	a1 := agentCert(t, up, "agent1.test")
	a2 := agentCert(t, up, "agent2.test")
	p, _ := openProxy(t, up, Options{CRLRefresh: time.Hour})

	if err := up.ca.Revoke(ctx, "agent1.test"); err != nil {
		t.Fatal(err)
	}
	if err := p.RefreshCRL(ctx); err != nil {
		t.Fatal(err)
	}
	if err := up.ca.Revoke(ctx, "agent2.test"); err != nil {
		t.Fatal(err)
	}
	if err := p.RefreshCRL(ctx); err != nil {
		t.Fatal(err)
	}
	if got := up.answers(crlPath); len(got) != 3 || got[1] != http.StatusOK || got[2] != http.StatusOK {
		t.Fatalf("upstream answered the proxy's CRL requests with %v, want [200 200 200]", got)
	}
	if !p.IsRevoked(a1.Leaf.SerialNumber) || !p.IsRevoked(a2.Leaf.SerialNumber) {
		t.Fatalf("the proxy missed the second CRL of the second")
	}
	if err := p.RefreshCRL(ctx); err != nil {
		t.Fatal(err)
	}
	if got := up.answers(crlPath); got[len(got)-1] != http.StatusNotModified {
		t.Errorf("refresh of an unchanged CRL: upstream answered %d, want 304", got[len(got)-1])
	}
}

// TestCRLServedSince: an agent of the proxy that downloads the old CRL
// after the upstream signed a new one, before the proxy fetched it, gets
// the new one at its next refresh: the proxy's front door dates the new
// CRL from when the proxy began to serve it, not from the upstream's date
// (an hour ago here).
func TestCRLServedSince(t *testing.T) {
	ctx := context.Background()
	signed := time.Now().Add(-time.Hour)
	up := startUpstream(t, ca.Options{Autosign: true, Now: func() time.Time { return signed }})
	a := agentCert(t, up, "agent1.test")
	dir := t.TempDir()
	p, _ := openProxy(t, up, Options{Dir: dir, CRLRefresh: time.Hour})
	fd := (&frontdoor.Server{CA: p, Revocations: p, Peers: p}).Handler()
	get := func(ims time.Time) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", crlPath, nil)
		if !ims.IsZero() {
			req.Header.Set("If-Modified-Since", ims.UTC().Format(http.TimeFormat))
		}
		rec := httptest.NewRecorder()
		fd.ServeHTTP(rec, req)
		return rec
	}

	if err := up.ca.Revoke(ctx, "agent1.test"); err != nil {
		t.Fatal(err)
	}
	old := get(time.Time{}) // the agent downloads the old CRL from the proxy
	downloaded := time.Now()
	if err := p.RefreshCRL(ctx); err != nil {
		t.Fatal(err)
	}
	if !p.IsRevoked(a.Leaf.SerialNumber) {
		t.Fatal("the proxy did not pick up the revocation")
	}
	refresh := get(downloaded)
	if refresh.Code != http.StatusOK || refresh.Body.String() == old.Body.String() {
		t.Fatalf("agent that downloaded the old CRL after the upstream signed the new one: %d, changed %v; want 200 and the new CRL",
			refresh.Code, refresh.Body.String() != old.Body.String())
	}
	_, since, err := p.CRLSince(ctx)
	if err != nil || since.Before(downloaded) {
		t.Fatalf("CRLSince: since %s, err %v; want no earlier than the agent's download, %s", since, err, downloaded)
	}
	if rec := get(since.Add(time.Minute)); rec.Code != http.StatusNotModified {
		t.Errorf("agent that checked a minute after the proxy began to serve the CRL: %d, want 304", rec.Code)
	}

	// A restarted proxy serves the CRL it kept from when it kept it.
	p.Close()
	p2, _ := openProxy(t, up, Options{Dir: dir, CRLRefresh: time.Hour})
	fi, err := os.Stat(filepath.Join(dir, fileCRL))
	if err != nil {
		t.Fatal(err)
	}
	crl, since2, err := p2.CRLSince(ctx)
	if err != nil || !since2.Equal(fi.ModTime()) || !bytes.Equal(crl, []byte(refresh.Body.String())) {
		t.Errorf("after a restart: since %s (kept file written %s), same CRL %v, err %v", since2, fi.ModTime(), bytes.Equal(crl, []byte(refresh.Body.String())), err)
	}
}
