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

// BenchmarkSign measures signing agent certificates with a 2048- and a
// 4096-bit CA: "issue" is the signature alone, "submit+autosign" the whole
// SubmitCSR path (validation, serial counter, atomic writes with fsync,
// inventory). Requests carry ECDSA P-256 keys; their making is not timed.
func BenchmarkSign(b *testing.B) {
	for _, bits := range []int{2048, 4096} {
		c := freshCA(b, Options{KeyBits: bits, Autosign: true})
		var seq atomic.Int64
		b.Run(fmt.Sprintf("rsa%d/issue", bits), func(b *testing.B) {
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
		b.Run(fmt.Sprintf("rsa%d/submit+autosign", bits), func(b *testing.B) {
			names := make([]string, b.N)
			csrs := make([][]byte, b.N)
			for i := range b.N {
				names[i] = fmt.Sprintf("bench%07d.example.test", seq.Add(1))
				csrs[i] = makeCSR(b, csrSpec{cn: names[i]})
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.SubmitCSR(b.Context(), names[i], csrs[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
