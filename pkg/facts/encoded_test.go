package facts

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// rubyEscape is Ruby's CGI.escape (what the agent's form encoding does):
// '*', '-', '.', '_' and alphanumerics plain, a space '+', the rest %XX.
func rubyEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ':
			b.WriteByte('+')
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("*-._", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// escapeAll escapes every byte, in lowercase hex: the inner escapes of
// letters and digits too.
func escapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02x", s[i])
	}
	return b.String()
}

// encodings are ways the facts of a catalog request are encoded twice.
// The last escapes the inner escapes' digits, which DecodeOnlyEncoded
// refuses to read.
var encodings = []struct {
	name string
	enc  func(doc string) string
	read bool // DecodeOnlyEncoded reads the valid documents so encoded
}{
	{"QueryEscape twice", func(doc string) string { return url.QueryEscape(url.QueryEscape(doc)) }, true},
	{"Ruby", func(doc string) string { return rubyEscape(rubyEscape(doc)) }, true},
	{"inner escapes of everything", func(doc string) string { return url.QueryEscape(escapeAll(doc)) }, true},
	{"outer escapes of everything", func(doc string) string { return escapeAll(url.QueryEscape(doc)) }, false},
}

// checkEncoded checks DecodeOnlyEncoded's promise on raw: when it handles
// raw, its answer is DecodeOnly's on raw unescaped twice. It returns
// whether raw was handled.
func checkEncoded(t *testing.T, raw []byte, sel *Selection) bool {
	t.Helper()
	got, handled, err := DecodeOnlyEncoded("n", raw, sel)
	if !handled {
		if !reflect.DeepEqual(got, Document{}) || err != nil {
			t.Fatalf("DecodeOnlyEncoded(%.80q) not handled, but = %+v, %v", raw, got, err)
		}
		return false
	}
	doc, ok := unescapeTwice(raw)
	once, err1 := url.QueryUnescape(string(raw))
	twice, err2 := url.QueryUnescape(once)
	if !ok || err1 != nil || err2 != nil || twice != string(doc) {
		t.Fatalf("DecodeOnlyEncoded handled %.80q, which does not unescape twice (%v, %v, %v)", raw, ok, err1, err2)
	}
	want, wantErr := DecodeOnly("n", doc, sel)
	if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeOnlyEncoded(%.200q) = %+v, %v\nDecodeOnly(%.200q) = %+v, %v", raw, got, err, doc, want, wantErr)
	}
	if err != nil && !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("DecodeOnlyEncoded(%.80q): %v, want an error wrapping farm.ErrInvalid", raw, err)
	}
	return true
}

func TestDecodeOnlyEncoded(t *testing.T) {
	req, err := ParseCatalogForm(recordedForm(t))
	if err != nil {
		t.Fatal(err)
	}
	recorded := string(req.Facts)
	tests := []struct {
		name  string
		doc   string
		paths []string
	}{
		{"recorded", recorded, []string{"networking.fqdn", "processors.count", "os", "memory.system.total", "absent.x"}},
		{"recorded, a path and its prefix", recorded, []string{"os.family", "os", "os.release.major"}},
		{"recorded, everything", recorded, []string{"", "os.family"}},
		{"recorded, nothing", recorded, nil},
		{"top level", `{"name":"n","values":{"a":"x","b":2,"c":true}}`, []string{"a", "c"}},
		{"nested", `{"values":{"a":{"b":{"c":[1,{"d":2}],"e":3}},"f":4}}`, []string{"a.b.c", "f.g"}},
		{"objects and arrays whole", `{"values":{"a":{"b":[1,[2,{}]],"c":{}},"d":[]}}`, []string{"a", "d"}},
		{"escaped quotes and backslashes", `{"values":{"a":"\"]}\\","b":"\\\"{","c":"\\\\"}}`, []string{"a", "c"}},
		{"escapes in keys", `{"values":{"a\u0062":1,"\"q\"":2,"\\":3,"x\ny":4}}`, []string{"ab", `"q"`, `\`, "x\ny"}},
		{"unicode", `{"values":{"é":"日本語 ✓","emoji":"\ud83d\ude00","k":"\u00e9"}}`, []string{"é", "emoji", "k"}},
		{"numbers kept exact", `{"values":{"a":1.0,"b":{"c":[1e3,-2,0.50]},"d":1E+2}}`, []string{"a", "b.c", "d"}},
		{"keys that are prefixes of others", `{"values":{"os":1,"os_family":2,"o":3,"osx":{"os":4}}}`, []string{"os", "osx.o"}},
		{"selected key nested elsewhere and in strings", `{"values":{"x":{"a":1},"s":"\"a\":2","a":3}}`, []string{"a"}},
		{"missing paths", `{"values":{"a":{"b":1}}}`, []string{"a.c", "z", "a.b.c"}},
		{"null values", `{"values":{"a":null,"b":{"c":null}}}`, []string{"a", "b.c", "b.c.d"}},
		{"duplicate keys", `{"values":{"a":{"x":1},"a":{"y":2},"b":1,"b":[2]}}`, []string{"a.x", "a.y", "b"}},
		{"duplicate values", `{"values":{"a":1},"values":{"b":2}}`, []string{"a", "b"}},
		{"members in other cases", `{"Name":"n","VALUES":{"a":1},"values":{"b":2},"TimeStamp":"t","EXPIRATION":"e"}`, []string{"a", "b"}},
		{"white space", " {\n\t\"values\" : { \"a\" : [ 1 , 2 ] , \"b\":\"x y\" } , \"name\" : \"n\" }\r\n", []string{"a", "b"}},
		{"percent and plus in strings", `{"values":{"a":"100% + 50%25","b":"a+b"}}`, []string{"a", "b"}},
		{"values null", `{"values":null}`, []string{"a"}},
		{"values not an object", `{"values":[1]}`, []string{"a"}},
		{"values missing", `{"name":"n"}`, []string{"a"}},
		{"other name", `{"name":"other","values":{}}`, []string{"a"}},
		{"name not a string", `{"name":3,"values":{}}`, []string{"a"}},
		{"timestamp not a string", `{"timestamp":5,"values":{}}`, []string{"a"}},
		{"selected value malformed", `{"values":{"a":tru}}`, []string{"a"}},
		{"selected number malformed", `{"values":{"a":1.2.3}}`, []string{"a"}},
		{"unselected value malformed", `{"values":{"a":1,"b":tru,"c":1.2.3}}`, []string{"a"}},
		{"unselected bad escape", `{"values":{"a":1,"b":"\x"}}`, []string{"a"}},
		{"selected bad escape", `{"values":{"a":"\x"}}`, []string{"a"}},
		{"key with a bad escape", `{"values":{"\x":1}}`, []string{"a"}},
		{"unbalanced", `{"values":{"b":{"c":[1}}}`, []string{"a"}},
		{"unterminated", `{"values":{"a":1}`, []string{"a"}},
		{"unterminated string", `{"values":{"a":"x}}`, []string{"b"}},
		{"trailing data", `{"values":{"a":1}} x`, []string{"a"}},
		{"no object", `[]`, []string{"a"}},
		{"empty", ``, []string{"a"}},
	}
	for _, tt := range tests {
		for _, e := range encodings {
			t.Run(tt.name+"/"+e.name, func(t *testing.T) {
				raw := e.enc(tt.doc)
				handled := checkEncoded(t, []byte(raw), selection(tt.paths...))
				if d, err := DecodeOnly("n", []byte(tt.doc), selection(tt.paths...)); err == nil && !handled && e.read {
					// Valid documents are read.
					t.Errorf("DecodeOnlyEncoded(%.80q) not handled; DecodeOnly = %+.80v", raw, d)
				}
			})
		}
	}
}

// TestDecodeOnlyEncodedRefuses: what the fast path does not read, it
// leaves to unescapeTwice and DecodeOnly.
func TestDecodeOnlyEncodedRefuses(t *testing.T) {
	const open = "%257B%2522values%2522%253A%257B%2522a%2522%253A" // {"values":{"a":
	for _, tt := range []struct{ name, raw string }{
		{"a plain '+'", open + "1%257D%257D+"},
		{"a ';'", open + "1%257D%257D;"},
		{"a plain quote", `{"values":{}}`},
		{"a plain backslash", open + "%2522\\%2522%257D%257D"},
		{"a bad escape", open + "1%257D%257D%zz"},
		{"a truncated escape", open + "1%257D%257"},
		{"an inner escape at the end", open + "1%257D%257D%25"},
		{"an inner escape's digits escaped", open + "1%257D%25%37D"},
		{"a bad escape in a skipped string", "%257B%2522values%2522%253A%257B%2522b%2522%253A%2522%25zz%2522%257D%257D"},
		{"malformed JSON", open + "1%257D"},
	} {
		if d, handled, err := DecodeOnlyEncoded("n", []byte(tt.raw), selection("a")); handled {
			t.Errorf("%s: DecodeOnlyEncoded(%q) = %+v, %v; want it refused", tt.name, tt.raw, d, err)
		}
	}
	// An escaped backslash is read.
	if !checkEncoded(t, []byte(open+"%2522%5C%5C%2522%257D%257D"), selection("a")) {
		t.Errorf("an escaped backslash is refused")
	}
}

// TestCatalogFormOnly: a catalog request form is handled only when
// ParseCatalogForm accepts it, and then as DecodeOnly reads its facts.
func TestCatalogFormOnly(t *testing.T) {
	facts := url.QueryEscape(url.QueryEscape(`{"name":"n","values":{"a":"x + y","b":[1,2]}}`))
	sel := selection("a")
	for _, tt := range []struct {
		body    string
		handled bool
	}{
		{"facts=" + facts + "&environment=production", true},
		{"facts_format=application%2Fjson&facts=" + facts, true},
		{"facts_format=pson&facts=" + facts, true},
		{"facts_format=yaml&facts=" + facts, false},
		{"facts=" + facts + "&facts=" + facts, false},
		{"fac%74s=" + facts + "&facts=" + facts, false},
		{"facts=" + facts + "&environment=%zz", false},
		{"facts=" + facts + "&a;b=c", false},
		{"environment=production", false},
	} {
		got, handled, err := catalogFormOnly("n", []byte(tt.body), sel)
		if handled != tt.handled {
			t.Errorf("catalogFormOnly(%.60q) handled %v, want %v", tt.body, handled, tt.handled)
		}
		if !handled {
			continue
		}
		req, perr := ParseCatalogForm([]byte(tt.body))
		if perr != nil {
			t.Fatalf("catalogFormOnly handled %.60q, which ParseCatalogForm refuses: %v", tt.body, perr)
		}
		want, werr := DecodeOnly("n", req.Facts, sel)
		if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("catalogFormOnly(%.60q) = %+v, %v; DecodeOnly: %+v, %v", tt.body, got, err, want, werr)
		}
	}
}

// TestDecodeOnlyEncodedFresh: nothing decoded refers to the encoded bytes,
// which the front door recycles.
func TestDecodeOnlyEncodedFresh(t *testing.T) {
	raw := []byte(url.QueryEscape(url.QueryEscape(`{"name":"n","timestamp":"t","values":{"key":"value","o":{"k":["v",1]}}}`)))
	d, handled, err := DecodeOnlyEncoded("n", raw, selection("key", "o"))
	if !handled || err != nil {
		t.Fatalf("DecodeOnlyEncoded = %v, %v", handled, err)
	}
	before := fmt.Sprint(d)
	for i := range raw {
		raw[i] = 'x'
	}
	if after := fmt.Sprint(d); after != before {
		t.Errorf("the document changed with the bytes it was decoded from: %s, was %s", after, before)
	}
}

// FuzzDecodeOnlyEncoded: for any document, encoded twice in any of the
// ways agents (or tests) encode it, and for the document taken as the
// encoded bytes themselves, DecodeOnlyEncoded is DecodeOnly when it
// answers. paths are comma-separated dotted paths ("" selects all).
func FuzzDecodeOnlyEncoded(f *testing.F) {
	form, err := ParseCatalogForm(recordedForm(f))
	if err != nil {
		f.Fatal(err)
	}
	recorded, err := Decode("agent1.example.test", form.Facts)
	if err != nil {
		f.Fatal(err)
	}
	// Parts of the recorded facts, a KB or two each: the fuzzer minimizes
	// every new input, and at 13 KB (the whole) that takes it most of a
	// minute each time.
	for _, part := range [][]string{{"os", "processors", "memory", "identity", "disks", "ruby"}, {"networking", "fqdn"}} {
		d := Document{Name: recorded.Name, Timestamp: recorded.Timestamp, Values: map[string]any{}}
		for _, k := range part {
			d.Values[k] = recorded.Values[k]
		}
		b, err := json.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), strings.Join(part[:2], ",")+",os.family,absent,networking.interfaces.eth0.ip")
	}
	f.Add(`{"name":"n","values":{"a":1.0,"b":[{"c":"]"}]}}`, "a")
	f.Add(`{"values":{"a":{"x":null},"b":"\"\\"}}`, "a.x")
	f.Add(`{"values":{"a\u0062":"\"]}","c":"\\"},"Name":"n"}`, "ab,c")
	f.Add("%257B%2522values%2522%253A%257B%2522a%2522%253A1%257D%257D", "a")
	f.Fuzz(func(t *testing.T, doc, paths string) {
		sel := selection(strings.Split(paths, ",")...)
		for _, e := range encodings {
			checkEncoded(t, []byte(e.enc(doc)), sel)
		}
		checkEncoded(t, []byte(doc), sel)
	})
}

// BenchmarkDecodeOnlyEncoded: the recorded facts, from their encoded form
// to the facts the benchmark environment's catalog reads.
func BenchmarkDecodeOnlyEncoded(b *testing.B) {
	raw, ok := rawFormParam(recordedForm(b), "facts")
	if !ok {
		b.Fatal("no facts in the recorded form")
	}
	sel := selection("networking.fqdn", "processors.count", "os", "memory.system.total")
	b.Run("unescape-decode-only", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			doc, ok := unescapeTwice(raw)
			if !ok {
				b.Fatal("bad escape")
			}
			if _, err := DecodeOnly("agent1.example.test", doc, sel); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoded", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, handled, err := DecodeOnlyEncoded("agent1.example.test", raw, sel); !handled || err != nil {
				b.Fatal(handled, err)
			}
		}
	})
}
