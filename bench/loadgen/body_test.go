package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// serverFacts decodes a body the way the front door does.
func serverFacts(t *testing.T, body []byte) (url.Values, map[string]any) {
	t.Helper()
	form, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatalf("form: %v", err)
	}
	doc, err := url.QueryUnescape(form.Get("facts"))
	if err != nil {
		t.Fatalf("facts: %v", err)
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatalf("facts JSON: %v", err)
	}
	return form, d
}

func TestBodyTemplate(t *testing.T) {
	tpl, err := newBodyTemplate(agentwire.RecordedCatalogRequest, "lg-0007.bench.test", "bench")
	if err != nil {
		t.Fatal(err)
	}
	form, d := serverFacts(t, tpl.body)
	if d["name"] != "lg-0007.bench.test" {
		t.Errorf("name = %v", d["name"])
	}
	values := d["values"].(map[string]any)
	if values["clientcert"] != "lg-0007.bench.test" || values["hostname"] != "lg-0007" {
		t.Errorf("clientcert %v, hostname %v", values["clientcert"], values["hostname"])
	}
	if len(values) < 100 {
		t.Errorf("only %d facts", len(values))
	}
	if form.Get("environment") != "bench" || form.Get("configured_environment") != "bench" {
		t.Errorf("environment %q/%q", form.Get("environment"), form.Get("configured_environment"))
	}
	if strings.Contains(string(tpl.body), "agent1") {
		t.Errorf("the body still names agent1")
	}

	a := tpl.fill(nil, 1, false)
	b := tpl.fill(nil, 2, false)
	if string(a) == string(b) {
		t.Errorf("two requests share a transaction_uuid")
	}
	fa, da := serverFacts(t, a)
	fb, db := serverFacts(t, b)
	if fa.Get("facts") != fb.Get("facts") {
		t.Errorf("without fresh, the facts parameter changed between requests")
	}
	if da["timestamp"] != d["timestamp"] || len(fa.Get("transaction_uuid")) != 36 {
		t.Errorf("timestamp %v, uuid %q", da["timestamp"], fa.Get("transaction_uuid"))
	}
	_ = db

	c := tpl.fill(nil, 123456789, true)
	_, dc := serverFacts(t, c)
	if ts := dc["timestamp"].(string); !strings.Contains(ts, ".123456789+") {
		t.Errorf("fresh timestamp = %q", ts)
	}
	if len(c) != len(tpl.body) {
		t.Errorf("fill changed the body length")
	}
}
