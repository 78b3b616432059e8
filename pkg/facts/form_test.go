package facts

import (
	"fmt"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// recordedForm is the recorded agent's catalog request body.
func recordedForm(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile("../../testdata/puppet-protocol/catalog-request-agent1.form-urlencoded.txt")
	if err != nil {
		tb.Fatal(err)
	}
	return []byte(strings.TrimSpace(string(b)))
}

// TestParseCatalogFormAsParseQuery: ParseCatalogForm reads every form as
// url.ParseQuery and FromForm read it, errors included.
func TestParseCatalogFormAsParseQuery(t *testing.T) {
	facts := func(doc string) string { return url.QueryEscape(url.QueryEscape(doc)) }
	doc := `{"name":"n","values":{"a":"x + y = 100%","b":[1,2]}}`
	tests := []struct{ name, body string }{
		{"recorded", string(recordedForm(t))},
		{"facts first", "facts=" + facts(doc) + "&environment=production&static_catalog=true"},
		{"facts last", "environment=production&transaction_uuid=t-1&facts=" + facts(doc)},
		{"facts alone", "facts=" + facts(doc)},
		{"plus signs at both levels", "facts=" + url.QueryEscape(strings.ReplaceAll(url.QueryEscape(doc), "%20", "+")) + "&environment=a+b"},
		{"literal plus", "facts=%257B%2522a%2522%3A+%2522b%2522%257D"},
		{"empty facts", "facts=&environment=production"},
		{"no facts", "environment=production&static_catalog=true"},
		{"facts without =", "facts&environment=production"},
		{"two facts", "facts=" + facts(`{"first":1}`) + "&facts=" + facts(`{"second":2}`)},
		{"escaped facts name first", "fac%74s=" + facts(`{"first":1}`) + "&facts=" + facts(`{"second":2}`)},
		{"facts format pson", "facts_format=pson&facts=" + facts(doc)},
		{"facts format yaml", "facts_format=yaml&facts=" + facts(doc)},
		{"bad outer escape", "facts=%25zz" + facts(doc)},
		{"truncated outer escape", "facts=" + facts(doc) + "%2"},
		{"bad inner escape", "facts=%25zz"},
		{"truncated inner escape", "facts=%257"},
		{"inner escape at the end", "facts=abc%25"},
		{"bad escape elsewhere", "facts=" + facts(doc) + "&transaction_uuid=%zz"},
		{"semicolon", "facts=" + facts(doc) + "&a;b=c"},
		{"semicolon in the facts", "facts=;"},
		{"empty fields", "&&facts=" + facts(doc) + "&&"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAsParseQuery(t, []byte(tt.body))
		})
	}
}

func checkAsParseQuery(t *testing.T, body []byte) {
	t.Helper()
	got, err := ParseCatalogForm(body)
	want, wantErr := parseForm(body)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseCatalogForm(%.80q) = %+.80v, %v\nurl.ParseQuery and FromForm: %+.80v, %v", body, got, err, want, wantErr)
	}
}

func FuzzParseCatalogForm(f *testing.F) {
	f.Add([]byte("facts=%257B%2522a%2522%253A1%257D&environment=production"))
	f.Add([]byte("environment=x&facts=a+b%2B%252B%25zz"))
	f.Add([]byte("facts=&facts=%41"))
	f.Fuzz(func(t *testing.T, body []byte) { checkAsParseQuery(t, body) })
}

// selection selects the dotted paths ("" for all the facts).
func selection(paths ...string) *Selection {
	sel := &Selection{}
	for _, p := range paths {
		if p == "" {
			sel.Add(nil)
			continue
		}
		sel.Add(strings.Split(p, "."))
	}
	return sel
}

// TestDecodeOnly: every selected path is found as in what Decode decodes,
// nothing else is decoded; documents are checked as Decode checks them.
func TestDecodeOnly(t *testing.T) {
	req, err := ParseCatalogForm(recordedForm(t))
	if err != nil {
		t.Fatal(err)
	}
	const node = "agent1.example.test"
	tests := []struct {
		name  string
		doc   string
		paths []string
		top   []string // the top-level facts decoded
	}{
		{"recorded", string(req.Facts), []string{"networking.fqdn", "processors.count", "os", "memory.system.total", "absent.x"},
			[]string{"networking", "processors", "os", "memory"}},
		{"recorded, a path and its prefix", string(req.Facts), []string{"os.family", "os", "os.release.major"}, []string{"os"}},
		{"recorded, everything", string(req.Facts), []string{"", "os.family"}, nil},
		{"recorded, nothing", string(req.Facts), nil, []string{}},
		{"numbers kept exact", `{"name":"agent1.example.test","values":{"a":1.0,"b":{"c":[1e3,2]},"d":"x"}}`, []string{"a", "b.c"}, []string{"a", "b"}},
		{"not a hash on the way", `{"values":{"a":"x","b":[{"c":1}],"c":{"d":null}}}`, []string{"a.b", "b.c", "c.d.e"}, []string{"a", "b", "c"}},
		{"no name", `{"values":{"a":{"x":null}}}`, []string{"a"}, []string{"a"}},
		{"repeated fact", `{"values":{"a":{"x":1},"a":{"y":2}}}`, []string{"a.x", "a.y"}, []string{"a"}},
		{"repeated values", `{"values":{"a":1},"values":{"b":2}}`, []string{"a", "b"}, []string{"a", "b"}},
		{"escapes", `{"values":{"a\u0062":"\"]}","c":"\\"}}`, []string{"ab", "c"}, []string{"ab", "c"}},
		{"members in other cases", `{"Name":"agent1.example.test","VALUES":{"a":1},"values":{"b":2},"TimeStamp":"t"}`, []string{"a", "b"}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := Decode(node, []byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeOnly(node, []byte(tt.doc), selection(tt.paths...))
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != want.Name || got.Timestamp != want.Timestamp || got.Expiration != want.Expiration {
				t.Errorf("DecodeOnly = %+v, want %+v", got, want)
			}
			for _, p := range tt.paths {
				path := strings.Split(p, ".")
				if p == "" {
					path = nil
				}
				g, gok := Lookup(got.Values, path)
				w, wok := Lookup(want.Values, path)
				if gok != wok || !reflect.DeepEqual(g, w) {
					t.Errorf("at %q: %v, %v; Decode: %v, %v", p, g, gok, w, wok)
				}
			}
			if tt.top != nil {
				var keys []string
				for k := range got.Values {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				slices.Sort(tt.top)
				if !slices.Equal(keys, tt.top) {
					t.Errorf("decoded facts %v, want %v", keys, tt.top)
				}
			}
		})
	}
}

func TestDecodeOnlyErrors(t *testing.T) {
	sel := selection("a", "b.c")
	for _, doc := range []string{
		``, `[]`, `{"name":"agent1.example.test"}`, `{"values":null}`, `{"values":[]}`, `{"values":"x"}`,
		`{"name":"other","values":{}}`, `{"name":3,"values":{}}`, `{"values":{"a":1.2.3}}`, `{"values":{"a":tru}}`,
		`{"values":{"b":{"c":[1}}}`, `{"values":{"b":{"c":nul}}}`, `{"values":{"a":1}} x`, `{"values":{"x":[1}}`, `{"values":{"a":1}`,
		`{"timestamp":5,"values":{}}`,
	} {
		if d, err := DecodeOnly("agent1.example.test", []byte(doc), sel); err == nil {
			t.Errorf("DecodeOnly(%s) = %+v, nil; want an error", doc, d)
		}
	}
}

// FuzzDecodeOnly: a document Decode accepts, DecodeOnly accepts, and finds
// at a selected path what Decode does.
func FuzzDecodeOnly(f *testing.F) {
	f.Add(`{"name":"n","values":{"a":1.0,"b":[{"c":"]"}]}}`, "a")
	f.Add(`{"values":{"a":{"x":null},"b":"\"\\"}}`, "a.x")
	f.Fuzz(func(t *testing.T, doc, path string) {
		want, err := Decode("n", []byte(doc))
		if err != nil || !utf8.ValidString(doc) {
			return
		}
		got, err := DecodeOnly("n", []byte(doc), selection(path))
		if err != nil {
			t.Fatalf("DecodeOnly(%q): %v; Decode accepts it", doc, err)
		}
		p := strings.Split(path, ".")
		if path == "" {
			p = nil
		}
		g, gok := Lookup(got.Values, p)
		w, wok := Lookup(want.Values, p)
		if gok != wok || !reflect.DeepEqual(g, w) || got.Timestamp != want.Timestamp {
			t.Fatalf("DecodeOnly(%q) at %q: %v, %v; Decode: %v, %v", doc, path, g, gok, w, wok)
		}
	})
}

// BenchmarkCatalogFacts: a steady-state run's catalog request, from its
// body to the facts a decision reads, as the front door and intake read
// it at first (url.ParseQuery, Decode, the relevant digest), then
// (ParseCatalogForm, DecodeOnly of the facts the benchmark environment's
// catalog reads), and now (an Upload's RawKey and Selected: the facts
// read from the form as it came).
func BenchmarkCatalogFacts(b *testing.B) {
	body := recordedForm(b)
	f, _ := NewFilter(DefaultVolatile)
	sel := selection("networking.fqdn", "processors.count", "os", "memory.system.total")
	b.Run("parse-query-decode-digest", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			req, err := parseForm(body)
			if err != nil {
				b.Fatal(err)
			}
			d, err := Decode("agent1.example.test", req.Facts)
			if err != nil {
				b.Fatal(err)
			}
			f.RelevantDigest(d.Values)
		}
	})
	b.Run("parse-decode-only", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			req, err := ParseCatalogForm(body)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeOnly("agent1.example.test", req.Facts, sel); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("upload-key-selected", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			up, ok := CatalogForm(body)
			if !ok {
				b.Fatal("no facts")
			}
			up.RawKey()
			if _, handled, err := up.Selected("agent1.example.test", sel); !handled || err != nil {
				b.Fatal(handled, err)
			}
		}
	})
}
