package main

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/compilefarm/compilefarm/internal/jsonscan"
)

// scanCatalog reads what encoding/json reads into servedCatalog, from
// catalogs a real Puppet Server served.
func TestScanCatalogMatchesEncodingJSON(t *testing.T) {
	for _, file := range []string{"catalog-agent1.body", "catalog-agent1-static-with-code_id.body", "catalog-agent2-ntp-apache.body"} {
		raw, err := os.ReadFile("../../testdata/puppet-protocol/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var want servedCatalog
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		got, err := scanCatalog(raw)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("%s: scanCatalog differs from encoding/json", file)
			for i := range min(len(got.Resources), len(want.Resources)) {
				if !reflect.DeepEqual(got.Resources[i], want.Resources[i]) {
					t.Errorf("resource %d: %+v, want %+v", i, got.Resources[i], want.Resources[i])
					break
				}
			}
		}
	}
}

func TestScanCatalogInput(t *testing.T) {
	for _, tc := range []struct {
		what, in string
		want     servedCatalog
		ok       bool
	}{
		{"escapes", `{"name":"a\"b\\c\u00e9\ud83d\ude00\n","version":12,"resources":[{"type":"File","title":"/x","tags":[],"line":null,"file":"f","exported":false,"parameters":{"content":"}\"]","source":["puppet:///a"]}}]}`,
			servedCatalog{Name: "a\"b\\cé😀\n", Version: json.RawMessage("12"), Resources: []catResource{{Type: "File", Title: "/x", Tags: json.RawMessage(`[]`), File: ptr("f"),
				Parameters: catParameters{Source: json.RawMessage(`["puppet:///a"]`)}}}}, true},
		{"skipped nesting", ` { "x" : [1, {"y": "]}"}, null, true, -1.5e3], "catalog_uuid" : "u" } `, servedCatalog{CatalogUUID: "u"}, true},
		{"empty", ``, servedCatalog{}, false},
		{"truncated", `{"name":"a`, servedCatalog{}, false},
		{"truncated object", `{"resources":[{"type":"File"`, servedCatalog{}, false},
		{"bad escape", `{"name":"\x"}`, servedCatalog{}, false},
		{"not an object", `[1]`, servedCatalog{}, false},
		{"trailing data", `{} {}`, servedCatalog{}, false},
		{"bad line", `{"resources":[{"line":"7"}]}`, servedCatalog{}, false},
	} {
		got, err := scanCatalog([]byte(tc.in))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.what, err, tc.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, jsonscan.ErrSyntax) {
				t.Errorf("%s: err = %v, want jsonscan.ErrSyntax", tc.what, err)
			}
			continue
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.what, *got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
