package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestObject: members in order, keys unescaped, values as their bytes.
func TestObject(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // key=raw value
	}{
		{"empty", `{}`, nil},
		{"spaces", " {\n\t\"a\" :\r 1 , \"b\":[ ] } ", []string{"a=1", "b=[ ]"}},
		{"kinds", `{"s":"x","n":-1.5e3,"t":true,"f":false,"z":null,"o":{"k":[1,{"x":"}"}]},"a":["]",[]]}`,
			[]string{`s="x"`, "n=-1.5e3", "t=true", "f=false", "z=null", `o={"k":[1,{"x":"}"}]}`, `a=["]",[]]`}},
		{"escaped key", `{"a\"b\u00e9\n":1}`, []string{"a\"bé\n=1"}},
		{"escaped quotes in values", `{"a":"x\\","b":"y\\\"z","c":["\\\\\""]}`,
			[]string{`a="x\\"`, `b="y\\\"z"`, `c=["\\\\\""]`}},
		{"repeated key", `{"a":1,"a":2}`, []string{"a=1", "a=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New([]byte(tt.doc))
			var got []string
			s.Object(func(k []byte) { got = append(got, string(k)+"="+string(s.Raw())) })
			s.End()
			if err := s.Err(); err != nil {
				t.Fatalf("Err = %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("members %q, want %q", got, tt.want)
			}
		})
	}
}

// TestArray: elements in order; nested arrays walked or skipped.
func TestArray(t *testing.T) {
	tests := []struct {
		doc     string
		want    []string
		wantErr bool
	}{
		{`{"a":[]}`, nil, false},
		{`{"a":[ 1 , "x" ,[2,[3]], {"k":"]"} ]}`, []string{"1", `"x"`, "[2,[3]]", `{"k":"]"}`}, false},
		{`{"a":[1,]}`, []string{"1", ""}, true},
		{`{"a":[1 2]}`, []string{"1"}, true},
		{`{"a":{}}`, nil, true},
	}
	for _, tt := range tests {
		s := New([]byte(tt.doc))
		var got []string
		s.Object(func([]byte) { s.Array(func() { got = append(got, string(s.Raw())) }) })
		s.End()
		if (s.Err() != nil) != tt.wantErr || fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: elements %q, Err %v; want %q, error %v", tt.doc, got, s.Err(), tt.want, tt.wantErr)
		}
	}
}

// TestMalformed: what the scanner walks or skips must be well formed.
func TestMalformed(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"empty", ``},
		{"not an object", `[1]`},
		{"unterminated object", `{"a":1`},
		{"unterminated nested", `{"a":{"b":[1,2}`},
		{"mismatched bracket", `{"a":[1,2}}`},
		{"mismatched brace", `{"a":{"b":1]}`},
		{"unterminated string", `{"a":"xyz}`},
		{"escaped end quote", `{"a":"xyz\"}`},
		{"no colon", `{"a" 1}`},
		{"no comma", `{"a":1 "b":2}`},
		{"trailing comma", `{"a":1,}`},
		{"missing value", `{"a":}`},
		{"non-string key", `{1:2}`},
		{"data after", `{"a":1} x`},
		{"two documents", `{}{}`},
		{"bad escape in key", `{"a\x":1}`},
		{"close without open", `{"a":]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New([]byte(tt.doc))
			s.Object(func([]byte) { s.Skip() })
			s.End()
			if !errors.Is(s.Err(), ErrSyntax) {
				t.Errorf("Err = %v, want ErrSyntax", s.Err())
			}
		})
	}
}

// TestDeepNesting: levels past the 64 kept in a word.
func TestDeepNesting(t *testing.T) {
	for _, depth := range []int{63, 64, 65, 200} {
		open := strings.Repeat(`{"a":[`, depth)
		ok := `{"x":` + open + `1` + strings.Repeat(`]}`, depth) + `}`
		bad := `{"x":` + open + `1` + strings.Repeat(`]}`, depth-1) + `}]}`
		for doc, wantErr := range map[string]bool{ok: false, bad: true} {
			s := New([]byte(doc))
			s.Object(func([]byte) { s.Skip() })
			s.End()
			if (s.Err() != nil) != wantErr {
				t.Errorf("depth %d, error wanted %v: Err = %v", depth, wantErr, s.Err())
			}
		}
	}
}

// TestSkipValidJSON: every valid document of the recordings is skipped
// whole, as encoding/json reads it.
func TestSkipValidJSON(t *testing.T) {
	for _, f := range []string{"report-request-agent1.json", "facts-agent1.json", "catalog-agent2-ntp-apache.body"} {
		b, err := os.ReadFile("../../testdata/puppet-protocol/" + f)
		if err != nil {
			t.Fatal(err)
		}
		s := New(b)
		n := 0
		s.Object(func([]byte) { s.Skip(); n++ })
		s.End()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if s.Err() != nil || n < len(m) {
			t.Errorf("%s: %d members, Err %v; encoding/json reads %d", f, n, s.Err(), len(m))
		}
	}
}

// FuzzSkip: a document encoding/json accepts is never refused, and Raw
// returns each member's value as encoding/json does (keys are compared in
// valid UTF-8 only: encoding/json replaces invalid bytes, Object passes
// them as sent).
func FuzzSkip(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":[1,"]",{"b":null}]}`, `{"a":"\\\""}`, `{"a":{"b":{"c":[[[]]]}}}`, `{"x":1e5}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(doc), &want) != nil || want == nil || !utf8.ValidString(doc) {
			return
		}
		s := New([]byte(doc))
		got := map[string]json.RawMessage{}
		s.Object(func(k []byte) { got[string(k)] = s.Raw() })
		s.End()
		if s.Err() != nil {
			t.Fatalf("valid %q: %v", doc, s.Err())
		}
		for k, v := range want {
			if !bytes.Equal(bytes.TrimSpace(got[k]), bytes.TrimSpace(v)) {
				t.Fatalf("%q: member %q = %s, want %s", doc, k, got[k], v)
			}
		}
	})
}

// bigReport is the recorded agent report with its resource statuses and
// logs repeated until it is about as large as a real run's (~330 KB).
func bigReport(tb testing.TB) []byte {
	b, err := os.ReadFile("../../testdata/puppet-protocol/report-request-agent1.json")
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		tb.Fatal(err)
	}
	var rs map[string]json.RawMessage
	json.Unmarshal(m["resource_statuses"], &rs)
	big := map[string]json.RawMessage{}
	for i := 0; len(big)*600 < 300_000; i++ {
		for k, v := range rs {
			big[fmt.Sprintf("%s-%d", k, i)] = v
		}
	}
	m["resource_statuses"], _ = json.Marshal(big)
	out, _ := json.Marshal(m)
	return out
}

func BenchmarkSkip(b *testing.B) {
	doc := bigReport(b)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		s := New(doc)
		s.Object(func([]byte) { s.Skip() })
		if s.Err() != nil {
			b.Fatal(s.Err())
		}
	}
}

// BenchmarkValid is encoding/json's validation of the same document: the
// least any encoding/json decode of it costs.
func BenchmarkValid(b *testing.B) {
	doc := bigReport(b)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if !json.Valid(doc) {
			b.Fatal("invalid")
		}
	}
}
