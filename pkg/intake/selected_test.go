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

// TestIntakeSelectedFirst: with Upload.Selected, a fresh upload to a node
// whose catalog has a read record is judged from the values it returns,
// and its Document is read only when something is written; when Selected
// does not handle the upload, or fails, the upload is decoded as without
// it.
func TestIntakeSelectedFirst(t *testing.T) {
	base := map[string]any{"cf_role": "web", "os": map[string]any{"family": "Debian"}, "kernel": "6.1", "uptime_seconds": 10}
	with := func(k string, v any) map[string]any { return flowtest.WithFact(base, k, v) }
	doc := func(values map[string]any) []byte { return flowtest.FactsDoc("n1", values) }
	malformed := []byte(`{"name":"n1","values":{"cf_role":"web","os":{"family":"Debian"},"kernel":tru,"uptime_seconds":11}}`)
	errForm := errors.New("the form is bad")
	decodeOnly := func(d []byte) func(*facts.Selection) (map[string]any, bool, error) {
		return func(sel *facts.Selection) (map[string]any, bool, error) {
			got, err := facts.DecodeOnly("n1", d, sel)
			return got.Values, true, err
		}
	}
	refuse := func(*facts.Selection) (map[string]any, bool, error) { return nil, false, nil }
	fail := func(*facts.Selection) (map[string]any, bool, error) {
		return map[string]any{"cf_role": "db"}, true, errors.New("bad")
	}
	tests := []struct {
		name       string
		doc        []byte
		docErr     error // Document's error
		selected   func(d []byte) func(*facts.Selection) (map[string]any, bool, error)
		later      bool // uploaded FactsRefresh after the last write
		wantQueued bool
		wantErr    error
		wantRead   bool // Document called
		wantFacts  bool // the node holds these facts after
	}{
		{"volatile fact changed", doc(with("uptime_seconds", 99)), nil, decodeOnly, false, false, nil, false, false},
		{"unread fact changed", doc(with("kernel", "6.2")), nil, decodeOnly, false, false, nil, false, false},
		{"read fact changed", doc(with("cf_role", "db")), nil, decodeOnly, false, true, nil, true, true},
		{"nested read fact changed", doc(with("os", map[string]any{"family": "RedHat"})), nil, decodeOnly, false, true, nil, true, true},
		{"unread fact changed, facts due a refresh", doc(with("kernel", "6.2")), nil, decodeOnly, true, false, nil, true, true},
		{"unread fact malformed, nothing to write", malformed, nil, decodeOnly, false, false, nil, false, false},
		{"unread fact malformed, facts due a refresh", malformed, nil, decodeOnly, true, false, farm.ErrInvalid, true, false},
		{"document fails when written", doc(with("cf_role", "db")), errForm, decodeOnly, false, false, errForm, true, false},
		{"not handled", doc(with("uptime_seconds", 99)), nil, func([]byte) func(*facts.Selection) (map[string]any, bool, error) { return refuse }, false, false, nil, true, false},
		{"not handled, document fails", doc(with("uptime_seconds", 99)), errForm, func([]byte) func(*facts.Selection) (map[string]any, bool, error) { return refuse }, false, false, errForm, true, false},
		{"failed: its values are not used", doc(with("uptime_seconds", 99)), nil, func([]byte) func(*facts.Selection) (map[string]any, bool, error) { return fail }, false, false, nil, true, false},
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
			reads := 0
			out, err := r.Intake.Submit(context.Background(), intake.Upload{Certname: "n1", Environment: "production",
				Document: func() ([]byte, error) { reads++; return tt.doc, tt.docErr },
				Selected: tt.selected(tt.doc)})
			if !errors.Is(err, tt.wantErr) || err == nil && out.Queued != tt.wantQueued {
				t.Fatalf("Submit = %+v, %v; want queued %v, error %v", out, err, tt.wantQueued, tt.wantErr)
			}
			if want := map[bool]int{false: 0, true: 1}[tt.wantRead]; reads != want {
				t.Errorf("Document called %d times, want %d", reads, want)
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
			filter, _ := facts.NewFilter(facts.DefaultVolatile)
			if want, _ := filter.RelevantDigest(d.Values); n.RelevantDigest != want {
				t.Errorf("relevant digest %s, want that of all the facts, %s", n.RelevantDigest, want)
			}
			if stored, err := r.Store.Get(context.Background(), farm.SpaceFacts, n.FactsDigest); err != nil || string(stored) != string(tt.doc) {
				t.Errorf("stored facts %.60s, %v; want the upload", stored, err)
			}
		})
	}
}
