package facts

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestParseCatalogFormGolden(t *testing.T) {
	body, err := os.ReadFile("../../testdata/puppet-protocol/catalog-request-agent1.form-urlencoded.txt")
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.TrimSpace(string(body)))
	req, err := ParseCatalogForm(body)
	if err != nil {
		t.Fatalf("parse recorded catalog request: %v", err)
	}
	if req.Environment != "production" || !req.StaticCatalog || req.TransactionUUID == "" {
		t.Errorf("form fields = %+v", req)
	}
	doc, err := Decode("agent1.example.test", req.Facts)
	if err != nil {
		t.Fatalf("decode facts: %v", err)
	}
	var want struct {
		Facts struct {
			Values map[string]any `json:"values"`
		} `json:"facts"`
	}
	raw, _ := os.ReadFile("../../testdata/puppet-protocol/catalog-request-agent1.decoded.json")
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(doc.Values)
	wantJSON, _ := json.Marshal(want.Facts.Values)
	var g, w any
	json.Unmarshal(got, &g)
	json.Unmarshal(wantJSON, &w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("decoded facts differ from the recorded decoded.json")
	}
	rawParam, ok := rawFormParam(body, "facts")
	if !ok || len(rawParam) == 0 {
		t.Fatalf("rawFormParam(facts) found nothing")
	}
	if env, ok := rawFormParam(body, "environment"); !ok || string(env) != "production" {
		t.Errorf("rawFormParam(environment) = %q, %v", env, ok)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, doc string
	}{
		{"not json", `{"name":`},
		{"no values", `{"name":"n1"}`},
		{"values not object", `{"name":"n1","values":[1]}`},
		{"wrong name", `{"name":"other","values":{}}`},
		{"trailing", `{"name":"n1","values":{}} {}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("n1", []byte(tt.doc))
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("Decode(%s) = %v, want ErrInvalid", tt.doc, err)
			}
		})
	}
}

func TestFormErrors(t *testing.T) {
	tests := []struct{ name, body string }{
		{"bad escape", "facts=%zz"},
		{"yaml facts", "facts_format=yaml&facts=x"},
		{"bad inner escape", "facts=%25zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseCatalogForm([]byte(tt.body)); !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}

func TestRelevantDigest(t *testing.T) {
	f, err := NewFilter(DefaultVolatile)
	if err != nil {
		t.Fatal(err)
	}
	base := func() map[string]any {
		return map[string]any{
			"os":             map[string]any{"family": "Debian"},
			"uptime_seconds": json.Number("100"),
			"memory": map[string]any{"system": map[string]any{
				"total": "1 GiB", "available": "500 MiB"}},
			"cf_role": "web",
		}
	}
	d0, _ := f.RelevantDigest(base())
	tests := []struct {
		name    string
		mutate  func(map[string]any)
		changed bool
	}{
		{"nothing", func(map[string]any) {}, false},
		{"uptime", func(m map[string]any) { m["uptime_seconds"] = json.Number("200") }, false},
		{"nested volatile", func(m map[string]any) {
			m["memory"].(map[string]any)["system"].(map[string]any)["available"] = "1 MiB"
		}, false},
		{"nested stable", func(m map[string]any) {
			m["memory"].(map[string]any)["system"].(map[string]any)["total"] = "2 GiB"
		}, true},
		{"used fact", func(m map[string]any) { m["cf_role"] = "db" }, true},
		{"new fact", func(m map[string]any) { m["extra"] = true }, true},
		{"int vs float", func(m map[string]any) { m["cf_role"] = json.Number("1.0") }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.mutate(m)
			d, err := f.RelevantDigest(m)
			if err != nil {
				t.Fatal(err)
			}
			if (d != d0) != tt.changed {
				t.Errorf("changed = %v, want %v", d != d0, tt.changed)
			}
		})
	}
	// Relevant must not modify its input.
	m := base()
	f.Relevant(m)
	if _, ok := m["uptime_seconds"]; !ok {
		t.Error("Relevant modified its input")
	}
	if _, err := NewFilter([]string{"a..b"}); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("empty segment accepted: %v", err)
	}
}

func BenchmarkRawDigest(b *testing.B) {
	body, _ := os.ReadFile("../../testdata/puppet-protocol/catalog-request-agent1.form-urlencoded.txt")
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		raw, _ := rawFormParam(body, "facts")
		farm.DigestOf(raw)
	}
}

func BenchmarkFullDecode(b *testing.B) {
	body, _ := os.ReadFile("../../testdata/puppet-protocol/catalog-request-agent1.form-urlencoded.txt")
	f, _ := NewFilter(DefaultVolatile)
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		req, _ := ParseCatalogForm(body)
		doc, _ := Decode("agent1.example.test", req.Facts)
		f.RelevantDigest(doc.Values)
	}
}

func TestFormValue(t *testing.T) {
	for _, c := range []struct {
		body, key, want string
	}{
		{"environment=production&facts=x", "environment", "production"},
		{"facts=x&environment=dev%2Dtest", "environment", "dev-test"},
		{"facts=x", "environment", ""},
		{"environments=a&environment=b", "environment", "b"},
		{"environment=%zz", "environment", ""},
		{"", "environment", ""},
	} {
		if got := FormValue([]byte(c.body), c.key); got != c.want {
			t.Errorf("FormValue(%q, %q) = %q, want %q", c.body, c.key, got, c.want)
		}
	}
}
