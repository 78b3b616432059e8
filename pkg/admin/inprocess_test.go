package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestInProcess(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "[1,")
		io.WriteString(w, "2]")
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	mux.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nothing here", http.StatusNotFound)
	})
	mux.HandleFunc("GET /silent", func(w http.ResponseWriter, r *http.Request) {})
	c := &http.Client{Transport: InProcess(mux)}
	tests := []struct {
		method, path, body string
		wantStatus         int
		wantBody           string
	}{
		{"GET", "/stream", "", 200, "[1,2]"},
		{"POST", "/echo", "csr", 200, "csr"},
		{"GET", "/missing", "", 404, "nothing here\n"},
		{"GET", "/silent", "", 200, ""},
		{"GET", "/unrouted", "", 404, "404 page not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, "http://in-process"+tt.path, strings.NewReader(tt.body))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus || string(b) != tt.wantBody {
				t.Fatalf("%s %s = %d %q, want %d %q", tt.method, tt.path, resp.StatusCode, b, tt.wantStatus, tt.wantBody)
			}
		})
	}
}
