package intake_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// catalogForm is the body of a catalog request (as the recorded agent
// sends it) whose facts are doc, encoded twice by enc, with transaction
// id tx.
func catalogForm(t *testing.T, doc []byte, enc func(string) string, tx string) facts.Upload {
	t.Helper()
	body := "facts_format=application%2Fjson&facts=" + enc(string(doc)) +
		"&environment=production&transaction_uuid=" + tx + "&static_catalog=true"
	up, ok := facts.CatalogForm([]byte(body))
	if !ok {
		t.Fatalf("no facts in %.60q", body)
	}
	return up
}

// queryEscapeTwice encodes facts as agents do.
func queryEscapeTwice(doc string) string { return url.QueryEscape(url.QueryEscape(doc)) }

// escapeOuterAll encodes facts with every byte of the outer level
// escaped: a valid form that facts.Upload.Selected does not read.
func escapeOuterAll(doc string) string {
	var b strings.Builder
	for _, c := range []byte(url.QueryEscape(doc)) {
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// TestIntakeSelectedFirst: a fresh upload to a node whose catalog has a
// read record is judged from the facts the catalog read as the upload's
// Selected reads them (from a catalog request's form without unescaping
// it, or from a document), and its document is read only when something
// is written; an upload that Selected does not handle is read first, and
// then judged from the facts the catalog read (facts.DecodeOnly).
func TestIntakeSelectedFirst(t *testing.T) {
	base := map[string]any{"cf_role": "web", "os": map[string]any{"family": "Debian"}, "kernel": "6.1", "uptime_seconds": 10}
	with := func(k string, v any) map[string]any { return flowtest.WithFact(base, k, v) }
	doc := func(values map[string]any) []byte { return flowtest.FactsDoc("n1", values) }
	malformed := []byte(`{"name":"n1","values":{"cf_role":"web","os":{"family":"Debian"},"kernel":tru,"uptime_seconds":11}}`)
	uploads := []struct {
		name     string
		of       func(t *testing.T, doc []byte) facts.Upload
		selected bool // Selected handles the valid uploads
	}{
		{"form", func(t *testing.T, doc []byte) facts.Upload { return catalogForm(t, doc, queryEscapeTwice, "t-2") }, true},
		{"form Selected does not read", func(t *testing.T, doc []byte) facts.Upload { return catalogForm(t, doc, escapeOuterAll, "t-2") }, false},
		{"document", func(_ *testing.T, doc []byte) facts.Upload { return facts.JSONDocument(doc) }, true},
	}
	tests := []struct {
		name       string
		doc        []byte
		later      bool // uploaded FactsRefresh after the last write
		wantQueued bool
		wantErr    error
		wantRead   bool // the document read, when Selected handles the upload
		wantFacts  bool // the node holds these facts after
	}{
		{"volatile fact changed", doc(with("uptime_seconds", 99)), false, false, nil, false, false},
		{"unread fact changed", doc(with("kernel", "6.2")), false, false, nil, false, false},
		{"read fact changed", doc(with("cf_role", "db")), false, true, nil, true, true},
		{"nested read fact changed", doc(with("os", map[string]any{"family": "RedHat"})), false, true, nil, true, true},
		{"unread fact changed, facts due a refresh", doc(with("kernel", "6.2")), true, false, nil, true, true},
		// Judged from the facts read alone: a malformed value among the
		// others is not seen until the facts are written.
		{"unread fact malformed, nothing to write", malformed, false, false, nil, false, false},
		{"unread fact malformed, facts due a refresh", malformed, true, false, farm.ErrInvalid, true, false},
		// Selected's error is said by Decode, after the document is read.
		{"another node's facts", flowtest.FactsDoc("n2", base), false, false, farm.ErrInvalid, true, false},
	}
	for _, u := range uploads {
		for _, tt := range tests {
			t.Run(u.name+"/"+tt.name, func(t *testing.T) {
				r := flowtest.New(t)
				r.Engine.Reads = []string{"cf_role", "os.family"}
				r.Submit(t, "n1", base)
				r.Drain(t)
				if tt.later {
					now := time.Now().Add(time.Hour)
					r.Intake.Now = func() time.Time { return now }
				}
				reads := intake.CountDocumentReads(t)
				out, err := r.Intake.Submit(context.Background(), intake.Upload{Certname: "n1", Environment: "production",
					Facts: u.of(t, tt.doc)})
				if !errors.Is(err, tt.wantErr) || err == nil && out.Queued != tt.wantQueued {
					t.Fatalf("Submit = %+v, %v; want queued %v, error %v", out, err, tt.wantQueued, tt.wantErr)
				}
				if want := map[bool]int{false: 0, true: 1}[tt.wantRead || !u.selected]; *reads != want {
					t.Errorf("document read %d times, want %d", *reads, want)
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
}

// TestIntakeBadForm: a catalog request form the facts cannot be read
// from is refused as invalid, and changes nothing.
func TestIntakeBadForm(t *testing.T) {
	doc := string(flowtest.FactsDoc("n1", map[string]any{"cf_role": "db"}))
	for _, tt := range []struct{ name, body string }{
		{"facts not JSON", "facts_format=yaml&facts=" + queryEscapeTwice(doc)},
		{"bad escape", "facts=%zz" + queryEscapeTwice(doc)},
		{"bad inner escape", "facts=%25zz" + queryEscapeTwice(doc)},
		{"semicolon", "facts=" + queryEscapeTwice(doc) + "&a;b=c"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := flowtest.New(t)
			r.Engine.Reads = []string{"cf_role"}
			r.Submit(t, "n1", map[string]any{"cf_role": "web"})
			r.Drain(t)
			before := r.Node(t, "n1")
			up, ok := facts.CatalogForm([]byte(tt.body))
			if !ok {
				t.Fatalf("no facts in %.60q", tt.body)
			}
			if _, err := r.Intake.Submit(context.Background(), intake.Upload{Certname: "n1", Environment: "production", Facts: up}); !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("Submit = %v, want ErrInvalid", err)
			}
			if after := r.Node(t, "n1"); after.FactsDigest != before.FactsDigest || after.RequestSeq != before.RequestSeq {
				t.Errorf("the node changed: facts %s, request %d; was %s, %d", after.FactsDigest, after.RequestSeq, before.FactsDigest, before.RequestSeq)
			}
		})
	}
}
