package facts

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestUpload: an Upload's document is the one ParseCatalogForm decodes
// from a form (with its errors) or the document itself; what Selected
// answers is DecodeOnly's on that document, and finds the selected facts
// as Decode does.
func TestUpload(t *testing.T) {
	const node = "agent1.example.test"
	recorded := recordedForm(t)
	req, err := ParseCatalogForm(recorded)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"name":"agent1.example.test","values":{"os":{"family":"Debian","release":{"major":"12"}},"a":"x + y = 100%","b":[1,2.0]}}`
	twice := func(doc string) string { return url.QueryEscape(url.QueryEscape(doc)) }
	paths := []string{"os.family", "a", "b", "networking.fqdn", "absent.x"}
	tests := []struct {
		name     string
		body     string
		document bool   // a facts document, not a catalog request's form
		noFacts  bool   // CatalogForm finds no facts
		handled  bool   // by Selected
		selErr   bool   // Selected handles it with an error
		docErr   string // Document's error, "" for none
	}{
		{"recorded form", string(recorded), false, false, true, false, ""},
		{"facts first", "facts=" + twice(doc) + "&environment=production&static_catalog=true", false, false, true, false, ""},
		{"facts last", "environment=production&transaction_uuid=t-1&facts=" + twice(doc), false, false, true, false, ""},
		{"Ruby's encoding", "facts_format=pson&facts=" + rubyEscape(rubyEscape(doc)), false, false, true, false, ""},
		{"inner escapes of everything", "facts=" + url.QueryEscape(escapeAll(doc)), false, false, true, false, ""},
		{"outer escapes of everything", "facts=" + escapeAll(url.QueryEscape(doc)), false, false, false, false, ""},
		{"plus signs at the outer level", "facts=" + strings.ReplaceAll(twice(doc), "%2B", "+"), false, false, false, false, ""},
		{"plus as white space", "facts=%257B+" + twice(doc)[len("%257B"):], false, false, false, false, ""},
		{"two facts parameters", "facts=" + twice(doc) + "&facts=" + twice(`{"values":{}}`), false, false, false, false, ""},
		{"empty facts", "facts=&environment=production", false, false, false, false, ""},
		{"another node's facts", "facts=" + twice(`{"name":"other","values":{"a":1}}`), false, false, true, true, ""},
		{"values not an object", "facts=" + twice(`{"values":[1]}`), false, false, true, true, ""},
		{"malformed facts", "facts=" + twice(`{"values":{"a":1}`), false, false, false, false, ""},
		{"facts in YAML", "facts_format=yaml&facts=" + twice(doc), false, false, false, false,
			`facts_format "yaml" is not supported (send application/json): invalid`},
		{"bad escape", "facts=%zz" + twice(doc), false, false, false, false,
			`catalog request body is not application/x-www-form-urlencoded: invalid URL escape "%zz": invalid`},
		{"bad inner escape", "facts=%25zz" + twice(doc), false, false, false, false,
			`facts parameter is not URL-encoded JSON: invalid URL escape "%zz": invalid`},
		{"semicolon in the form", "facts=" + twice(doc) + "&a;b=c", false, false, false, false,
			`catalog request body is not application/x-www-form-urlencoded: invalid semicolon separator in query: invalid`},
		{"no facts", "environment=production&static_catalog=true", false, true, false, false, ""},
		{"document", doc, true, false, true, false, ""},
		{"recorded document", string(req.Facts), true, false, true, false, ""},
		{"another node's document", `{"name":"other","values":{"a":1}}`, true, false, true, true, ""},
		{"malformed document", `{"values":{"a":1}`, true, false, true, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			var up Upload
			if tt.document {
				up = JSONDocument(body)
			} else {
				var ok bool
				if up, ok = CatalogForm(body); ok == tt.noFacts {
					t.Fatalf("CatalogForm found facts: %v, want %v", ok, !tt.noFacts)
				}
				if !ok {
					if !up.IsZero() {
						t.Errorf("CatalogForm found no facts, but gave %+v", up)
					}
					return
				}
			}
			got, err := up.Document()
			want, wantErr := []byte(tt.body), error(nil)
			if !tt.document {
				var req CatalogRequest
				req, wantErr = ParseCatalogForm(body)
				want = req.Facts
			}
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) {
				t.Fatalf("Document = %.60q, %v; want %.60q, %v", got, err, want, wantErr)
			}
			if tt.docErr != "" && (err == nil || err.Error() != tt.docErr || !errors.Is(err, farm.ErrInvalid)) {
				t.Fatalf("Document's error %v, want %s (farm.ErrInvalid)", err, tt.docErr)
			} else if tt.docErr == "" && err != nil {
				t.Fatalf("Document: %v", err)
			}
			sel := selection(paths...)
			values, handled, err := up.Selected(node, sel)
			if handled != tt.handled || handled && (err != nil) != tt.selErr {
				t.Fatalf("Selected = %v, %v; want handled %v, an error %v", handled, err, tt.handled, tt.selErr)
			}
			if !handled {
				if values != nil || err != nil {
					t.Errorf("Selected did not handle the upload, but gave %v, %v", values, err)
				}
				return
			}
			only, onlyErr := DecodeOnly(node, got, sel)
			if (err == nil) != (onlyErr == nil) || !reflect.DeepEqual(values, only.Values) {
				t.Fatalf("Selected = %v, %v; DecodeOnly: %v, %v", values, err, only.Values, onlyErr)
			}
			if err != nil {
				if !errors.Is(err, farm.ErrInvalid) {
					t.Errorf("Selected's error %v does not wrap farm.ErrInvalid", err)
				}
				return
			}
			whole, err := Decode(node, got)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				g, gok := Lookup(values, strings.Split(p, "."))
				w, wok := Lookup(whole.Values, strings.Split(p, "."))
				if gok != wok || !reflect.DeepEqual(g, w) {
					t.Errorf("at %q: %v, %v; Decode: %v, %v", p, g, gok, w, wok)
				}
			}
		})
	}
}

// TestUploadRawKey: equal keys for the same facts as sent, whatever else
// the form holds; other keys for other facts, for the same facts
// otherwise encoded, and for a document of the same bytes as a form's
// facts parameter.
func TestUploadRawKey(t *testing.T) {
	facts := url.QueryEscape(url.QueryEscape(`{"values":{"a":"x y"}}`))
	form := func(body string) Upload {
		up, ok := CatalogForm([]byte(body))
		if !ok {
			t.Fatalf("CatalogForm(%q) found no facts", body)
		}
		return up
	}
	base := form("facts=" + facts + "&transaction_uuid=t-1")
	tests := []struct {
		name string
		up   Upload
		same bool
	}{
		{"the same form", form("facts=" + facts + "&transaction_uuid=t-1"), true},
		{"another run's form", form("environment=production&facts=" + facts + "&transaction_uuid=t-2"), true},
		{"other facts", form("facts=" + url.QueryEscape(url.QueryEscape(`{"values":{"a":"x z"}}`)) + "&transaction_uuid=t-1"), false},
		{"the same facts otherwise encoded", form("facts=" + url.QueryEscape(escapeAll(`{"values":{"a":"x y"}}`)) + "&transaction_uuid=t-1"), false},
		{"a document of the facts parameter's bytes", JSONDocument([]byte(facts)), false},
		{"the zero Upload", Upload{}, false},
	}
	for _, tt := range tests {
		if same := tt.up.RawKey() == base.RawKey(); same != tt.same {
			t.Errorf("%s: key %s, the form's %s: same %v, want %v", tt.name, tt.up.RawKey(), base.RawKey(), same, tt.same)
		}
	}
	doc := []byte(`{"values":{}}`)
	if a, b := JSONDocument(doc).RawKey(), JSONDocument(bytes.Clone(doc)).RawKey(); a != b || a == "" {
		t.Errorf("the same document: keys %q and %q", a, b)
	}
	if k := (Upload{}).RawKey(); k != "" {
		t.Errorf("the zero Upload's key is %q, want none", k)
	}
}

// TestUploadHoldsNothingOfBody: what an Upload's methods return does not
// change when the body it was made from is reused (the front door
// recycles request bodies).
func TestUploadHoldsNothingOfBody(t *testing.T) {
	doc := `{"name":"n","timestamp":"t","values":{"key":"value","o":{"k":["v",1]},"n":1.50}}`
	sel := selection("key", "o", "n")
	for _, tt := range []struct {
		name string
		body []byte
		up   func([]byte) Upload
	}{
		{"form", []byte("facts=" + url.QueryEscape(url.QueryEscape(doc)) + "&environment=production"),
			func(b []byte) Upload { up, _ := CatalogForm(b); return up }},
		{"document", []byte(doc), JSONDocument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := tt.up(tt.body)
			got, err := up.Document()
			values, handled, serr := up.Selected("n", sel)
			if err != nil || !handled || serr != nil {
				t.Fatalf("Document: %v; Selected: %v, %v", err, handled, serr)
			}
			key := up.RawKey()
			before := fmt.Sprint(string(got), values, key)
			for i := range tt.body {
				tt.body[i] = 'x'
			}
			if after := fmt.Sprint(string(got), values, key); after != before {
				t.Errorf("what the upload gave changed with its body: %s, was %s", after, before)
			}
		})
	}
}

// TestUploadZero: the zero Upload has no facts.
func TestUploadZero(t *testing.T) {
	var up Upload
	doc, err := up.Document()
	values, handled, serr := up.Selected("n", selection("a"))
	if !up.IsZero() || up.RawKey() != "" || doc != nil || err != nil || values != nil || handled || serr != nil {
		t.Errorf("zero Upload: zero %v, key %q, Document %q, %v, Selected %v, %v, %v",
			up.IsZero(), up.RawKey(), doc, err, values, handled, serr)
	}
	if _, handled, _ := JSONDocument([]byte(`{"values":{}}`)).Selected("n", nil); handled {
		t.Errorf("Selected handled a nil selection")
	}
}
