package puppetdb

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

func drainAll(t *testing.T, o farm.Outbox) []Message {
	t.Helper()
	var out []Message
	for {
		ds, err := o.Receive(context.Background(), 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return out
		}
		for _, d := range ds {
			m, err := Decode(d.Body)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
			o.Ack(context.Background(), d.ID)
		}
	}
}

// TestSinkFacts: changed facts are always sent; unchanged ones once a
// period, in the node's slot; never with FactsEvery negative.
func TestSinkFacts(t *testing.T) {
	ctx := context.Background()
	d := farm.DigestOf([]byte("facts"))
	start := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		every    time.Duration
		wantDays int // unchanged uploads sent in a day of 30-minute runs
	}{
		// The default slot is an hour wide: two 30-minute runs fall in it,
		// so a node that misses one run is still sent its facts that day.
		{"default: at least once a day", 0, 2},
		{"never", -1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := memstore.NewOutbox(memstore.OutboxOptions{})
			now := start
			s := &Sink{Outbox: o, Spill: memstore.New(), FactsEvery: tt.every, Now: func() time.Time { return now }}
			s.Facts(ctx, "a.test", "production", d, "", true)
			if got := drainAll(t, o); len(got) != 1 || got[0].Kind != KindFacts || got[0].Facts != d || got[0].Environment != "production" {
				t.Fatalf("changed facts: sent %+v", got)
			}
			n := 0
			for ; now.Before(start.Add(24 * time.Hour)); now = now.Add(30 * time.Minute) {
				s.Facts(ctx, "a.test", "production", d, "", false)
				n += len(drainAll(t, o))
			}
			if n != tt.wantDays {
				t.Errorf("unchanged facts sent %d times in a day, want %d", n, tt.wantDays)
			}
		})
	}
}

// TestSinkReport: every report is sent, after the catalog it names when
// that is new; a report too large for a message is kept in the content
// store and the message points at it.
func TestSinkReport(t *testing.T) {
	ctx := context.Background()
	o := memstore.NewOutbox(memstore.OutboxOptions{})
	content := memstore.New()
	s := &Sink{Outbox: o, Spill: content}
	sum := farm.ReportSummary{CatalogUUID: "cat-1", TransactionUUID: "tx-1", At: time.Now()}
	body := []byte(`{"host":"a.test","status":"changed"}`)
	s.Report(ctx, "a.test", body, sum, true)
	s.Report(ctx, "a.test", body, sum, false)
	got := drainAll(t, o)
	if len(got) != 3 || got[0].Kind != KindCatalog || got[0].CatalogUUID != "cat-1" || got[0].TransactionUUID != "tx-1" ||
		got[1].Kind != KindReport || got[2].Kind != KindReport {
		t.Fatalf("sent %+v, want catalog, report, report", got)
	}
	if back, err := gunzipBytes(got[1].ReportGzip); err != nil || !bytes.Equal(back, body) {
		t.Errorf("report carried %q (%v)", back, err)
	}

	// Random bytes do not compress: over the outbox's limit once gzipped.
	big := make([]byte, farm.MaxOutboxBody)
	rand.Read(big)
	large := []byte(`{"host":"a.test","junk":"` + hex.EncodeToString(big) + `"}`)
	s.Report(ctx, "a.test", large, sum, false)
	got = drainAll(t, o)
	if len(got) != 1 || got[0].Report == "" || got[0].ReportGzip != nil {
		t.Fatalf("large report: sent %+v, want a pointer into the content store", got)
	}
	if back, err := content.Get(ctx, farm.SpaceReports, got[0].Report); err != nil || !bytes.Equal(back, large) {
		t.Errorf("large report in the content store: %d bytes (%v)", len(back), err)
	}
}
