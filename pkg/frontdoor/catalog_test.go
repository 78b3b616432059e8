package frontdoor

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/intake"
)

// countingIntake counts the fact documents an intake decodes.
type countingIntake struct {
	Intake
	decoded atomic.Int64
}

func (c *countingIntake) Submit(ctx context.Context, up intake.Upload) (intake.Outcome, error) {
	doc := up.Document
	up.Document = func() ([]byte, error) {
		c.decoded.Add(1)
		return doc()
	}
	return c.Intake.Submit(ctx, up)
}

// TestCatalogRawKey: a catalog request whose facts repeat the node's last
// upload byte for byte is known unchanged without decoding them (rawKey);
// any other is decoded.
func TestCatalogRawKey(t *testing.T) {
	r := newRig(t)
	counting := &countingIntake{Intake: r.fd.Intake}
	r.fd.Intake = counting
	const name = "agent1.example.test"
	a1 := r.client(name)
	web, db := catalogForm(name, "web"), catalogForm(name, "db")
	steps := []struct {
		name    string
		form    []byte
		decoded int64 // documents decoded after the step
	}{
		{"first upload", web, 1},
		{"the same bytes", web, 1},
		{"the same again", web, 1},
		{"other facts", db, 2},
		{"back to the first", web, 3},
	}
	for i, s := range steps {
		r.do(a1, "POST", "/puppet/v3/catalog/"+name+"?environment=production", s.form, agentHeaders)
		if i == 0 {
			r.compile(name, "")
		}
		if got := counting.decoded.Load(); got != s.decoded {
			t.Fatalf("%s: %d documents decoded, want %d", s.name, got, s.decoded)
		}
	}
}
