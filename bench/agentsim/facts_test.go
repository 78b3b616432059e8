package main

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
	"github.com/compilefarm/compilefarm/internal/corpus"
)

// leaves flattens a decoded JSON value into path → encoded leaf.
func leaves(v any, path []string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			leaves(c, append(append([]string(nil), path...), k), out)
		}
	default:
		b, _ := json.Marshal(x)
		out[strings.Join(path, "\x00")] = string(b)
	}
}

// decodeDoc decodes a facts document as the server does (numbers as sent).
func decodeDoc(t *testing.T, doc string) (map[string]any, map[string]string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var d map[string]any
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("facts document is not JSON: %v", err)
	}
	values, ok := d["values"].(map[string]any)
	if !ok {
		t.Fatalf("facts document has no values")
	}
	l := map[string]string{}
	leaves(values, nil, l)
	return d, l
}

// Fact churn: every run's facts are the recorded agent's, renamed, except
// what facter measures at each run (corpus.Volatile), which differs from
// run to run, and the document's timestamp and expiration.
func TestFactChurnKeepsNonVolatileFacts(t *testing.T) {
	tpl, err := newFactTemplate(agentwire.RecordedCatalogRequest)
	if err != nil {
		t.Fatal(err)
	}
	recordedDoc, err := agentwire.DecodeFacts(agentwire.RecordedCatalogRequest)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 21, 22, 27, 59, 591127718, time.UTC)
	for _, tc := range []struct {
		node string
		runs []int
	}{
		{"agentsim-00000.agentsim.test", []int{0, 1}},
		{"agentsim-00001.agentsim.test", []int{0, 1, 2, 40, 41, 1000}},
		{"web7.example.org", []int{5, 6}},
	} {
		renamed, err := agentwire.RenameFacts(recordedDoc, tc.node)
		if err != nil {
			t.Fatal(err)
		}
		_, want := decodeDoc(t, renamed)
		rename := agentwire.Renamer(tc.node)
		seen := map[string]map[string]bool{} // volatile leaf → values seen
		for _, run := range tc.runs {
			now := t0.Add(time.Duration(run) * 30 * time.Minute)
			doc, err := tpl.document(rename, run, now, 30*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			d, got := decodeDoc(t, doc)
			if d["name"] != tc.node || d["timestamp"] != puppetTime(now) || d["expiration"] != puppetTime(now.Add(30*time.Minute)) {
				t.Errorf("%s run %d: name %v, timestamp %v, expiration %v", tc.node, run, d["name"], d["timestamp"], d["expiration"])
			}
			for p, v := range want {
				path := strings.Split(p, "\x00")
				if corpus.IsVolatile(path) {
					continue
				}
				if got[p] != v {
					t.Errorf("%s run %d: non-volatile fact %s = %s, recorded %s", tc.node, run, strings.Join(path, "."), got[p], v)
				}
			}
			for p, v := range got {
				path := strings.Split(p, "\x00")
				if _, recorded := want[p]; !recorded && !corpus.IsVolatile(path) {
					t.Errorf("%s run %d: fact %s = %s is neither recorded nor volatile", tc.node, run, strings.Join(path, "."), v)
				}
				if corpus.IsVolatile(path) {
					if seen[p] == nil {
						seen[p] = map[string]bool{}
					}
					seen[p][v] = true
				}
			}
		}
		// What changes at every run does change: each of these has a value
		// of its own in every run.
		for _, p := range [][]string{{"uptime_seconds"}, {"system_uptime", "seconds"}, {"memoryfree_mb"},
			{"memory", "system", "used_bytes"}, {"load_averages", "1m"}} {
			if n := len(seen[strings.Join(p, "\x00")]); n != len(tc.runs) {
				t.Errorf("%s: %s took %d values in %d runs", tc.node, strings.Join(p, "."), n, len(tc.runs))
			}
		}
	}
}

// The facts keep the agent's order and encoding; only volatile facts are
// encoded again.
func TestFactDocumentKeepsAgentBytes(t *testing.T) {
	tpl, err := newFactTemplate(agentwire.RecordedCatalogRequest)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := tpl.document(agentwire.Renamer(agentwire.RecordedName), 0, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	recorded, _ := agentwire.DecodeFacts(agentwire.RecordedCatalogRequest)
	if !strings.HasPrefix(doc, `{"name":"agent1.example.test","values":{"os":`) || !strings.HasPrefix(recorded, `{"name":"agent1.example.test","values":{"os":`) {
		t.Errorf("document starts %.60q, recording %.60q", doc, recorded)
	}
	for _, fact := range []string{"processors", "os", "disks", "ruby"} {
		raw := tpl.raw[fact]
		if len(raw) == 0 || !strings.Contains(recorded, string(raw)) || !strings.Contains(doc, string(raw)) {
			t.Errorf("fact %s is not sent as the agent encoded it", fact)
		}
	}
}

// The catalog request decodes, as the server decodes it, to this run's
// facts, environment and transaction, with the recorded fields around them.
func TestCatalogBody(t *testing.T) {
	tpl, err := newFactTemplate(agentwire.RecordedCatalogRequest)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"name":"n1","values":{"a":"b c/d%e"}}`
	body := tpl.catalogBody(doc, "bench env", "0e4c3d8a-5b1c-4e57-9a51-3cc1f3b1d7a2")
	form, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	facts, err := url.QueryUnescape(form.Get("facts"))
	if err != nil || facts != doc {
		t.Errorf("facts = %q, %v", facts, err)
	}
	for k, want := range map[string]string{"facts_format": "application/json", "environment": "bench env",
		"configured_environment": "bench env", "check_environment": "true", "transaction_uuid": "0e4c3d8a-5b1c-4e57-9a51-3cc1f3b1d7a2",
		"static_catalog": "true", "checksum_type": "sha256.sha384.sha512.sha224.md5", "job_uuid": ""} {
		if got := form.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if !bytes.HasPrefix(body, []byte("facts_format=application%2Fjson&facts=%257B")) {
		t.Errorf("body starts %.60q", body)
	}
}
