package dynamostate

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// BenchmarkSignDynamoDB measures autosigned certificate requests on a CA
// (4096-bit key, Puppet's default) whose records are in DynamoDB, here
// dynalite on loopback: per certificate a serial ADD, a conditional
// certificate put, an inventory put and a request delete, plus the reads
// of the checks. "one-CA" submits one request at a time; "two-CAs"
// submits in parallel (GOMAXPROCS goroutines) through two CAs on one
// table, as two front doors do. Making the requests is not timed.
func BenchmarkSignDynamoDB(b *testing.B) {
	if testing.Short() {
		b.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	table := newCATable(b)
	key := memstore.NewCAKey()
	open := func() *ca.CA {
		c, err := ca.Init(b.Context(), NewCAStore(newClient(emu.URL), table), key,
			ca.Options{Autosign: true, ServerDir: b.TempDir(), Logger: discardLogger})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	cas := []*ca.CA{open(), open()}
	var seq atomic.Int64
	requests := func(n int) ([]string, [][]byte) {
		names, csrs := make([]string, n), make([][]byte, n)
		for i := range n {
			names[i] = fmt.Sprintf("bench%07d.example.test", seq.Add(1))
			csrs[i], _ = farmtest.NewCSR(b, names[i])
		}
		return names, csrs
	}
	b.Run("one-CA", func(b *testing.B) {
		names, csrs := requests(b.N)
		b.ResetTimer()
		for i := range b.N {
			if err := cas[0].SubmitCSR(b.Context(), names[i], csrs[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-CAs", func(b *testing.B) {
		names, csrs := requests(b.N)
		var next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1) - 1
				if err := cas[i%2].SubmitCSR(b.Context(), names[i], csrs[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
