package clientcert

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestVerifiedCacheWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{Raw: []byte("leaf"), NotBefore: t0, NotAfter: t0.Add(10 * time.Hour)}
	ca := &x509.Certificate{Raw: []byte("ca"), NotBefore: t0.Add(time.Hour), NotAfter: t0.Add(5 * time.Hour)}
	vc := NewVerifiedCache(0)
	vc.remember(leaf, []*x509.Certificate{leaf, ca})
	tests := []struct {
		name string
		cert *x509.Certificate
		at   time.Time
		want bool
	}{
		{"inside every certificate's validity", leaf, t0.Add(2 * time.Hour), true},
		{"at the CA's first second", leaf, t0.Add(time.Hour), true},
		{"at the CA's last second", leaf, t0.Add(5 * time.Hour), true},
		{"before the CA is valid, though the leaf is", leaf, t0.Add(30 * time.Minute), false},
		{"after the CA expired, though the leaf has not", leaf, t0.Add(6 * time.Hour), false},
		{"another certificate", &x509.Certificate{Raw: []byte("other")}, t0.Add(2 * time.Hour), false},
		{"another certificate with the leaf's fields but other bytes", &x509.Certificate{Raw: []byte("leaf!"), NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter}, t0.Add(2 * time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := vc.verifiedAt(tt.cert, tt.at); got != tt.want {
				t.Fatalf("verifiedAt = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestVerifiedCacheBound(t *testing.T) {
	vc := NewVerifiedCache(3)
	now := time.Now()
	certs := make([]*x509.Certificate, 10)
	for i := range certs {
		certs[i] = &x509.Certificate{Raw: []byte{byte(i)}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
		vc.remember(certs[i], certs[i:i+1])
		if n := vc.Len(); n > 3 {
			t.Fatalf("after %d certificates the cache holds %d, over its bound of 3", i+1, n)
		}
	}
	vc.remember(certs[9], certs[9:10]) // again: replaces, evicts nothing
	if n := vc.Len(); n != 3 || !vc.verifiedAt(certs[9], now) {
		t.Fatalf("holds %d (want 3), the last one remembered: %v", vc.Len(), vc.verifiedAt(certs[9], now))
	}
}
