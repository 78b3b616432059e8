package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// agentFacts is the facts document the recorded agent sent, with values
// changed: extra set (nil deletes) and the name replaced.
func agentFacts(t *testing.T, name string, extra map[string]any) []byte {
	t.Helper()
	var doc map[string]any
	if err := decode(readFile(t, filepath.Join(recorded, "facts-agent1.json")), &doc); err != nil {
		t.Fatal(err)
	}
	values := doc["values"].(map[string]any)
	for k, v := range extra {
		if v == nil {
			delete(values, k)
		} else {
			values[k] = v
		}
	}
	doc["name"] = name
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// factsCase is one replace facts input.
type factsCase struct {
	name       string
	certname   string
	extra      map[string]any // fact values changed
	extensions map[string]string
	edit       func([]byte) []byte // applied to the document last
}

var factsCases = []factsCase{
	{name: "the recorded agent", certname: "agent1.example.test",
		extensions: map[string]string{"pp_role": "web", "1.3.6.1.4.1.34380.1.2.1": "private"}},
	{name: "no extensions, no domain", certname: "nodot"},
	{name: "empty domain", certname: "trailing.", extensions: map[string]string{}},
	{name: "package inventory", certname: "inv.example.test",
		extra: map[string]any{"_puppet_inventory_1": map[string]any{
			"packages": []any{[]any{"openssl", "3.0.11-1", "apt"}, []any{"vim", "9.0", "apt"}}}}},
	{name: "inventory without packages", certname: "inv.example.test",
		extra: map[string]any{"_puppet_inventory_1": map[string]any{"other": 1}}},
	{name: "inventory that is not a hash", certname: "inv.example.test",
		extra: map[string]any{"_puppet_inventory_1": "junk"}},
	{name: "inventory false", certname: "inv.example.test",
		extra: map[string]any{"_puppet_inventory_1": false}},
	{name: "a fact named trusted, and _timestamp", certname: "spoof.example.test",
		extra: map[string]any{"trusted": "spoofed", "_timestamp": "2026-01-01 00:00:00 +0000"}},
	{name: "numbers, nulls and text", certname: "num.example.test",
		extra: map[string]any{
			"big":     json.Number("123456789012345678901234567890"),
			"float":   json.Number("1.0e+20"),
			"small":   json.Number("1.5e-07"),
			"null":    nil,
			"nested":  map[string]any{"n": nil, "list": []any{json.Number("1"), "é", "\u0000", "😀"}},
			"escapes": "<tag> & \"quotes\" \\ \u2028",
		}},
	{name: "bytes that are not UTF-8", certname: "latin1.example.test",
		extensions: map[string]string{"pp_role": "rôle"},
		extra:      map[string]any{"custom": "MARK é"},
		edit: func(b []byte) []byte {
			return bytes.Replace(b, []byte("MARK"), []byte("caf\xe9 \xff\xfe"), 1)
		}},
}

func (c factsCase) document(t *testing.T) []byte {
	doc := agentFacts(t, c.certname, c.extra)
	if c.edit != nil {
		doc = c.edit(doc)
	}
	return doc
}

func (c factsCase) input(t *testing.T) FactsInput {
	return FactsInput{
		Certname: c.certname, Facts: c.document(t), TrustedExtensions: c.extensions,
		Environment: "production", Producer: "farm.example.test", ProducerTimestamp: now,
	}
}

// TestFactsReference compares Facts with what Puppet Server's facts
// terminus sends for the same facts and node.
func TestFactsReference(t *testing.T) {
	ref := newReference(t)
	for _, c := range factsCases {
		t.Run(c.name, func(t *testing.T) {
			in := c.input(t)
			got, err := Facts(in)
			if err != nil {
				t.Fatalf("Facts: %v", err)
			}
			want := ref.payload(t, map[string]any{
				"facts": in.Facts, "certname": in.Certname, "extensions": in.TrustedExtensions,
				"environment": in.Environment,
			})
			sameAsReference(t, comparable(t, got), comparable(t, want))
		})
	}
}

func TestFacts(t *testing.T) {
	in := factsCases[0].input(t)
	b, err := Facts(in)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := decode(b, &p); err != nil {
		t.Fatal(err)
	}
	if p["certname"] != "agent1.example.test" || p["environment"] != "production" ||
		p["producer"] != "farm.example.test" || p["producer_timestamp"] != "2026-11-21T22:30:00.123Z" {
		t.Errorf("payload header = %v", p)
	}
	values := p["values"].(map[string]any)
	want := map[string]any{
		"authenticated": "remote", "certname": "agent1.example.test", "hostname": "agent1", "domain": "example.test",
		"extensions": map[string]any{"pp_role": "web", "1.3.6.1.4.1.34380.1.2.1": "private"}, "external": map[string]any{},
	}
	if got := values["trusted"]; !equalJSON(got, want) {
		t.Errorf("trusted = %v, want %v", got, want)
	}
	if values["os"].(map[string]any)["family"] != "Debian" {
		t.Errorf("os.family = %v", values["os"])
	}
	if _, ok := p["package_inventory"]; ok {
		t.Error("package_inventory sent without the inventory fact")
	}
}

func TestFactsInventory(t *testing.T) {
	tests := []struct {
		name     string
		fact     any
		want     string // package_inventory's JSON, "" for none
		wantGone bool
	}{
		{"packages", map[string]any{"packages": []any{[]any{"a", "1", "apt"}}}, `[["a","1","apt"]]`, true},
		{"no packages", map[string]any{}, `null`, true},
		{"not a hash", "x", `null`, true},
		{"false", false, "", true},
		{"null", nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := []byte(`{"name":"n.test","values":{"a":1}}`)
			if tt.name != "null" {
				v, _ := json.Marshal(tt.fact)
				doc = []byte(`{"name":"n.test","values":{"a":1,"_puppet_inventory_1":` + string(v) + `}}`)
			} else {
				doc = []byte(`{"name":"n.test","values":{"a":1,"_puppet_inventory_1":null}}`)
			}
			b, err := Facts(FactsInput{Certname: "n.test", Facts: doc, Environment: "e", ProducerTimestamp: now})
			if err != nil {
				t.Fatal(err)
			}
			var p map[string]json.RawMessage
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			got, ok := p["package_inventory"]
			if string(got) != tt.want || ok != (tt.want != "") {
				t.Errorf("package_inventory = %s (present %v), want %q", got, ok, tt.want)
			}
			if strings.Contains(string(p["values"]), "_puppet_inventory_1") {
				t.Errorf("values still hold the inventory: %s", p["values"])
			}
		})
	}
}

// TestFactsLossy: a document that is not UTF-8 makes every byte of the
// payload that is not ASCII one U+FFFD, as coerce_to_utf8 does.
func TestFactsLossy(t *testing.T) {
	doc := []byte("{\"name\":\"n.test\",\"values\":{\"bad\":\"caf\xe9\",\"good\":\"é\"}}")
	b, err := Facts(FactsInput{Certname: "n.test", Facts: doc, Environment: "e", ProducerTimestamp: now,
		TrustedExtensions: map[string]string{"pp_role": "ü"}})
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Values struct {
			Bad, Good string
			Trusted   struct {
				Extensions map[string]string
			}
		}
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Values.Bad != "caf\uFFFD" || p.Values.Good != "\uFFFD\uFFFD" || p.Values.Trusted.Extensions["pp_role"] != "\uFFFD\uFFFD" {
		t.Errorf("payload = %s", b)
	}
}

func TestFactsInvalid(t *testing.T) {
	good := FactsInput{Certname: "n.test", Facts: []byte(`{"name":"n.test","values":{}}`), Environment: "e", ProducerTimestamp: now}
	tests := []struct {
		name string
		edit func(*FactsInput)
		want string
	}{
		{"no certname", func(in *FactsInput) { in.Certname = "" }, "no certname"},
		{"no environment", func(in *FactsInput) { in.Environment = "" }, "no environment"},
		{"no time", func(in *FactsInput) { in.ProducerTimestamp = time.Time{} }, "no producer timestamp"},
		{"not JSON", func(in *FactsInput) { in.Facts = []byte(`{`) }, "not a JSON facts object"},
		{"no values", func(in *FactsInput) { in.Facts = []byte(`{"name":"n.test"}`) }, "no \"values\""},
		{"another node's", func(in *FactsInput) { in.Facts = []byte(`{"name":"m.test","values":{}}`) }, "does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := good
			tt.edit(&in)
			_, err := Facts(in)
			if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Facts = %v, want ErrInvalid saying %q", err, tt.want)
			}
		})
	}
	if _, err := Facts(good); err != nil {
		t.Errorf("Facts(good) = %v", err)
	}
}

// equalJSON is whether a and b are the same JSON.
func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
