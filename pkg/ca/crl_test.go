package ca

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"testing"
	"time"
)

func TestCRLDates(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name           string
		now            time.Time
		wantThisUpdate time.Time
	}{
		{"on a whole second", base, base.Add(-24 * time.Hour)},
		{"early in a second", base.Add(time.Millisecond), base.Add(-24 * time.Hour)},
		{"late in a second", base.Add(999 * time.Millisecond), base.Add(-24 * time.Hour)},
		{"next second", base.Add(time.Second), base.Add(time.Second - 24*time.Hour)},
		{"local time zone", base.In(time.FixedZone("UTC-7", -7*3600)).Add(500 * time.Millisecond), base.Add(-24 * time.Hour)},
		{"with a monotonic reading", time.Now(), time.Time{}}, // checked by the bounds below
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			thisUpdate, nextUpdate := crlDates(tt.now)
			if thisUpdate.After(tt.now) {
				t.Errorf("thisUpdate %s is after the signer's clock %s", thisUpdate, tt.now)
			}
			if !tt.wantThisUpdate.IsZero() && !thisUpdate.Equal(tt.wantThisUpdate) {
				t.Errorf("thisUpdate = %s, want %s", thisUpdate, tt.wantThisUpdate)
			}
			if d := tt.now.Sub(thisUpdate); d < backdate || d >= backdate+time.Second {
				t.Errorf("thisUpdate is %s before now, want a day (to the second)", d)
			}
			if got, want := nextUpdate.Sub(thisUpdate), crlValidity+backdate; got != want {
				t.Errorf("nextUpdate - thisUpdate = %s, want %s", got, want)
			}
		})
	}
}

// TestRevocationBurstDating revokes several certificates within one second
// of a fake clock: every CRL is valid at the signer's clock, and its newest
// revocation tells the second it was signed, so a later CRL never looks
// older than an earlier one.
func TestRevocationBurstDating(t *testing.T) {
	ctx := t.Context()
	start := time.Date(2025, 3, 1, 12, 0, 0, 200_000_000, time.UTC)
	clk := &clock{t: start}
	c := openCA(t, Options{Autosign: true, Now: clk.Now})
	steps := []struct {
		advance time.Duration
	}{
		{0},                      // 12:00:00.2
		{300 * time.Millisecond}, // 12:00:00.5, the same second
		{400 * time.Millisecond}, // 12:00:00.9, the same second
		{200 * time.Millisecond}, // 12:00:01.1, the next one
		{0},                      // 12:00:01.1 again
	}
	var prevNewest time.Time
	for i, s := range steps {
		name := fmt.Sprintf("burst%d.example.test", i)
		if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
			t.Fatalf("SubmitCSR %s: %v", name, err)
		}
		clk.Add(s.advance)
		now := clk.Now()
		if err := c.Revoke(ctx, name); err != nil {
			t.Fatalf("Revoke %s: %v", name, err)
		}
		data, err := c.CRL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rl, err := x509.ParseRevocationList(mustPEMBytes(t, data))
		if err != nil {
			t.Fatal(err)
		}
		if rl.Number.Int64() != int64(i+1) || len(rl.RevokedCertificateEntries) != i+1 {
			t.Fatalf("CRL after revocation %d: number %d, %d entries", i+1, rl.Number, len(rl.RevokedCertificateEntries))
		}
		if rl.ThisUpdate.After(now) {
			t.Errorf("CRL %d: thisUpdate %s is after the signer's clock %s", i+1, rl.ThisUpdate, now)
		}
		if want := now.Truncate(time.Second).Add(-backdate); !rl.ThisUpdate.Equal(want) {
			t.Errorf("CRL %d: thisUpdate %s, want %s", i+1, rl.ThisUpdate, want)
		}
		newest := rl.RevokedCertificateEntries[len(rl.RevokedCertificateEntries)-1].RevocationTime
		if !newest.Equal(now.Truncate(time.Second)) {
			t.Errorf("CRL %d: newest revocation dated %s, want the second it was signed, %s", i+1, newest, now.Truncate(time.Second))
		}
		if newest.Before(prevNewest) {
			t.Errorf("CRL %d: newest revocation %s is older than the previous CRL's, %s", i+1, newest, prevNewest)
		}
		prevNewest = newest
	}
}

// TestRevokeOverFutureCRL: a CRL written by an older version, dated in the
// future, is built on; the new CRL is dated by the signer's clock.
func TestRevokeOverFutureCRL(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	c := openCA(t, Options{Autosign: true, Now: func() time.Time { return now }})
	for _, name := range []string{"old.example.test", "new.example.test"} {
		if err := c.SubmitCSR(ctx, name, makeCSR(t, csrSpec{cn: name})); err != nil {
			t.Fatal(err)
		}
	}
	old := mustParseCert(t, c.signedPEM(t, "old.example.test"))
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:     big.NewInt(1),
		ThisUpdate: now.Add(3 * time.Second), // how the old code dated a burst
		NextUpdate: now.Add(3*time.Second + crlValidity),
		RevokedCertificateEntries: []x509.RevocationListEntry{
			{SerialNumber: old.SerialNumber, RevocationTime: now},
		},
	}, c.cert, c.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.store.PutCRL(ctx, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), big.NewInt(1), big.NewInt(0)); err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(ctx, "new.example.test"); err != nil {
		t.Fatal(err)
	}
	data, _ := c.CRL(ctx)
	rl, err := x509.ParseRevocationList(mustPEMBytes(t, data))
	if err != nil {
		t.Fatal(err)
	}
	if rl.Number.Int64() != 2 || len(rl.RevokedCertificateEntries) != 2 {
		t.Fatalf("CRL number %d with %d entries, want 2 with 2", rl.Number, len(rl.RevokedCertificateEntries))
	}
	if rl.ThisUpdate.After(now) {
		t.Errorf("thisUpdate %s is after the signer's clock %s", rl.ThisUpdate, now)
	}
}
