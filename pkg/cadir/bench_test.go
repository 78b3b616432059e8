package cadir

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
)

// BenchmarkSign measures autosigning agent certificates on a CA directory
// with a 2048- and a 4096-bit CA key: the whole SubmitCSR path
// (validation, serial counter, atomic writes with fsync, inventory).
// Requests carry ECDSA P-256 keys; their making is not timed.
func BenchmarkSign(b *testing.B) {
	for _, bits := range []int{2048, 4096} {
		c, _ := freshCA(b, ca.Options{KeyBits: bits, Autosign: true})
		var seq atomic.Int64
		b.Run(fmt.Sprintf("rsa%d/submit+autosign", bits), func(b *testing.B) {
			names := make([]string, b.N)
			csrs := make([][]byte, b.N)
			for i := range b.N {
				names[i] = fmt.Sprintf("bench%07d.example.test", seq.Add(1))
				csrs[i] = csr(b, names[i])
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
