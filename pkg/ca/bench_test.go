package ca

import (
	"crypto/elliptic"
	"crypto/x509"
	"fmt"
	"math/big"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkIssue measures the signature of an agent certificate alone,
// with a 2048- and a 4096-bit CA key in memory. (The whole SubmitCSR path
// on the CA directory, fsync included, is cadir's BenchmarkSign.)
func BenchmarkIssue(b *testing.B) {
	for _, bits := range []int{2048, 4096} {
		c := freshCA(b, Options{KeyBits: bits, Autosign: true})
		var seq atomic.Int64
		b.Run(fmt.Sprintf("rsa%d", bits), func(b *testing.B) {
			key := ecKey(b, elliptic.P256())
			now := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := c.issueLeaf(leafSpec{
					certname: "bench.example.test", pub: key.Public(), serial: big.NewInt(seq.Add(1) + 1000),
					dnsNames: []string{"bench.example.test"}, keyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
					notBefore: now.Add(-backdate), notAfter: now.Add(defaultValidity),
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
