package localstore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/localstore"
)

func BenchmarkGetNode(b *testing.B) {
	ctx := context.Background()
	s := open(b, b.TempDir())
	now := time.Now().UTC()
	for i := range 1000 {
		c := fmt.Sprintf("node%04d.example.com", i)
		_, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
			n.Environment = "production"
			n.FactsDigest = farm.DigestOf([]byte(c))
			n.RequestSeq = 5
			n.Catalog = &farm.CatalogRef{Digest: farm.DigestOf([]byte("cat" + c)), GzipDigest: farm.DigestOf([]byte("gz" + c)), Seq: 5, CompiledAt: now}
			n.Compile = &farm.CompileStatus{Result: farm.ResultOK, Seq: 5, At: now}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := s.GetNode(ctx, fmt.Sprintf("node%04d.example.com", i%1000)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkContentGet(b *testing.B) {
	ctx := context.Background()
	s := open(b, b.TempDir())
	data := make([]byte, 300<<10)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Get(ctx, farm.SpaceCatalogs, d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnqueueReceiveAck(b *testing.B) {
	ctx := context.Background()
	q := open(b, b.TempDir()).Queue(localstore.QueueOptions{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j := farm.Job{Certname: fmt.Sprintf("node%d.example.com", i%100), Lane: farm.LaneUrgent, Seq: uint64(i), Environment: "production"}
		if err := q.Enqueue(ctx, j); err != nil {
			b.Fatal(err)
		}
		d, err := q.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Ack(ctx, d); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
