package clientcert

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"time"
)

// DefaultVerifiedCerts is how many verified client certificates a
// VerifiedCache keeps by default: a fleet of 100,000 agents at ~100 bytes
// each, 10 MB.
const DefaultVerifiedCerts = 100_000

// VerifiedCache remembers client certificates that verified against a
// Check's roots, so that an agent's next connection does not check
// its chain's signatures again (with Puppet's RSA-4096 CA, that check is
// about half of the server's share of a TLS handshake). It keys by the
// SHA-256 of the certificate's DER bytes and keeps the verified chain's
// validity window: a certificate is only remembered as verified, never as
// good. Dates are checked against the window, and revocation asked, on
// every use.
//
// The roots a cache's entries were verified against must not change while
// it is used: give each Check's roots their own cache. It holds at
// most its bound, evicting arbitrary entries when full. Safe for
// concurrent use; the zero value is not usable, see NewVerifiedCache.
type VerifiedCache struct {
	max int

	mu sync.Mutex
	m  map[[sha256.Size]byte]window
}

// window is when every certificate of a verified chain is valid.
type window struct{ notBefore, notAfter time.Time }

// NewVerifiedCache returns a cache holding at most max certificates
// (DefaultVerifiedCerts if max <= 0).
func NewVerifiedCache(max int) *VerifiedCache {
	if max <= 0 {
		max = DefaultVerifiedCerts
	}
	return &VerifiedCache{max: max, m: make(map[[sha256.Size]byte]window)}
}

// Len reports how many certificates the cache holds.
func (vc *VerifiedCache) Len() int {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	return len(vc.m)
}

// verifiedAt reports whether cert was remembered as verified and its chain
// is valid at now.
func (vc *VerifiedCache) verifiedAt(cert *x509.Certificate, now time.Time) bool {
	key := sha256.Sum256(cert.Raw)
	vc.mu.Lock()
	w, ok := vc.m[key]
	vc.mu.Unlock()
	return ok && !now.Before(w.notBefore) && !now.After(w.notAfter)
}

// remember records that cert verified through chain (leaf first).
func (vc *VerifiedCache) remember(cert *x509.Certificate, chain []*x509.Certificate) {
	if len(chain) == 0 {
		return
	}
	w := window{notBefore: chain[0].NotBefore, notAfter: chain[0].NotAfter}
	for _, c := range chain[1:] {
		if c.NotBefore.After(w.notBefore) {
			w.notBefore = c.NotBefore
		}
		if c.NotAfter.Before(w.notAfter) {
			w.notAfter = c.NotAfter
		}
	}
	key := sha256.Sum256(cert.Raw)
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if _, ok := vc.m[key]; !ok && len(vc.m) >= vc.max {
		for k := range vc.m { // an arbitrary entry: map order is random
			delete(vc.m, k)
			break
		}
	}
	vc.m[key] = w
}
