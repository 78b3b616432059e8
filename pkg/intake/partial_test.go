package intake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// TestIntakeDecodesReadFactsFirst: a fresh upload to a node whose catalog
// has a read record is judged from the facts the catalog read alone
// (facts.DecodeOnly); whatever is written is decoded whole: the node's
// relevant digest is that of all its facts, and facts Decode refuses are
// refused as soon as they would be written.
func TestIntakeDecodesReadFactsFirst(t *testing.T) {
	base := map[string]any{"cf_role": "web", "os": map[string]any{"family": "Debian"}, "kernel": "6.1", "uptime_seconds": 10}
	with := func(k string, v any) map[string]any { return flowtest.WithFact(base, k, v) }
	doc := func(values map[string]any) []byte { return flowtest.FactsDoc("n1", values) }
	malformed := []byte(`{"name":"n1","values":{"cf_role":"web","os":{"family":"Debian"},"kernel":tru,"uptime_seconds":11}}`)
	filter, _ := facts.NewFilter(facts.DefaultVolatile)
	tests := []struct {
		name       string
		doc        []byte
		later      bool // uploaded FactsRefresh after the last write
		wantQueued bool
		wantErr    error
		wantFacts  bool // the node holds these facts after
	}{
		{"volatile fact changed", doc(with("uptime_seconds", 99)), false, false, nil, false},
		{"unread fact changed", doc(with("kernel", "6.2")), false, false, nil, false},
		{"read fact changed", doc(with("cf_role", "db")), false, true, nil, true},
		{"nested read fact changed", doc(with("os", map[string]any{"family": "RedHat"})), false, true, nil, true},
		{"sibling of a read fact changed", doc(with("os", map[string]any{"family": "Debian", "release": "13"})), false, false, nil, false},
		{"unread fact changed, facts due a refresh", doc(with("kernel", "6.2")), true, false, nil, true},
		// Judged from the facts read alone: a malformed value among the
		// others is not seen until the facts are written.
		{"unread fact malformed, nothing to write", malformed, false, false, nil, false},
		{"unread fact malformed, facts due a refresh", malformed, true, false, farm.ErrInvalid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			r.Engine.Reads = []string{"cf_role", "os.family"}
			r.Submit(t, "n1", base)
			r.Drain(t)
			if tt.later {
				now := time.Now().Add(time.Hour)
				r.Intake.Now = func() time.Time { return now }
			}
			out, err := r.Intake.Submit(context.Background(), intake.Upload{Certname: "n1", Environment: "production",
				Facts: facts.JSONDocument(tt.doc)})
			if !errors.Is(err, tt.wantErr) || err == nil && out.Queued != tt.wantQueued {
				t.Fatalf("Submit = %+v, %v; want queued %v, error %v", out, err, tt.wantQueued, tt.wantErr)
			}
			n := r.Node(t, "n1")
			if got := n.FactsDigest == farm.DigestOf(tt.doc); got != tt.wantFacts {
				t.Fatalf("node holds the upload's facts: %v, want %v", got, tt.wantFacts)
			}
			if !tt.wantFacts {
				return
			}
			d, err := facts.Decode("n1", tt.doc)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := filter.RelevantDigest(d.Values); n.RelevantDigest != want {
				t.Errorf("relevant digest %s, want that of all the facts, %s", n.RelevantDigest, want)
			}
			if stored, err := r.Store.Get(context.Background(), farm.SpaceFacts, n.FactsDigest); err != nil || string(stored) != string(tt.doc) {
				t.Errorf("stored facts %.60s, %v; want the upload", stored, err)
			}
		})
	}
}
