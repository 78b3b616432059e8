package main

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFloorAnswers(t *testing.T) {
	f, err := newFloor([]byte(`{"name":"a.example.test","resources":[{"title":"Class[a.example.test]"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	f.metadata = []byte(`[{"path":"/x"}]`)
	h := f.handler()
	tests := []struct {
		method, path, body string
		gzipped            bool
		want               string
	}{
		{"GET", "/puppet/v3/file_metadatas/plugins?recurse=true", "", false, `[{"path":"/x"}]`},
		{"POST", "/puppet/v3/catalog/b.example.test?environment=production", "facts=x", true,
			`{"name":"b.example.test","resources":[{"title":"Class[b.example.test]"}]}`},
		{"POST", "/puppet/v3/catalog/b.example.test", "", true, // again: from the cache
			`{"name":"b.example.test","resources":[{"title":"Class[b.example.test]"}]}`},
		{"PUT", "/puppet/v3/report/b.example.test", strings.Repeat("r", 100000), false, `["store"]`},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", tt.method, tt.path, rec.Code, rec.Body)
		}
		var body io.Reader = rec.Body
		if tt.gzipped {
			if rec.Header().Get("Content-Encoding") != "gzip" {
				t.Fatalf("%s %s: not gzipped", tt.method, tt.path)
			}
			if body, err = gzip.NewReader(rec.Body); err != nil {
				t.Fatal(err)
			}
		}
		got, _ := io.ReadAll(body)
		if string(got) != tt.want {
			t.Errorf("%s %s = %s, want %s", tt.method, tt.path, got, tt.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s %s: not JSON", tt.method, tt.path)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/puppet/v3/node/b.example.test", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("node request: %d, want 404 (the floor serves only what agentsim's herd asks)", rec.Code)
	}
}

func TestFloorRefusesCatalogWithoutName(t *testing.T) {
	if _, err := newFloor([]byte(`{"resources":[]}`)); err == nil {
		t.Error("a catalog without a name was accepted")
	}
}
