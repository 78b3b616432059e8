package admin

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

func TestReport(t *testing.T) {
	st := memstore.New()
	report := []byte(`{"host":"a.test","status":"changed","transaction_uuid":"uuid-1"}`)
	d, err := st.Put(t.Context(), farm.SpaceReports, report)
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes in another space are not a report.
	catalog := []byte(`{"name":"a.test","version":1}`)
	other, err := st.Put(t.Context(), farm.SpaceCatalogs, catalog)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		reports    bool // the server has the content store
		path       string
		wantStatus int
		wantBody   []byte // the exact answer of a 200
		wantErr    string // in the answer of any other status
	}{
		{"stored", true, ReportsPath + string(d), http.StatusOK, report, ""},
		{"not stored", true, ReportsPath + string(farm.DigestOf([]byte("x"))), http.StatusNotFound, nil,
			"no report " + string(farm.DigestOf([]byte("x"))) + " is stored (the farm keeps only a summary of unchanged runs: see --full-report-every)"},
		{"another space's blob", true, ReportsPath + string(other), http.StatusNotFound, nil, "no report " + string(other)},
		{"malformed digest", true, ReportsPath + "abc", http.StatusBadRequest, nil, "is not a lowercase hex sha256"},
		{"uppercase digest", true, ReportsPath + strings.ToUpper(string(d)), http.StatusBadRequest, nil, "not a lowercase hex sha256"},
		{"no content store", false, ReportsPath + string(d), http.StatusServiceUnavailable, nil, "keeps no agent reports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{}
			if tt.reports {
				s.Reports = st
			}
			mux := http.NewServeMux()
			s.Register(mux)
			srv := httptest.NewServer(mux)
			defer srv.Close()

			resp, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("GET %s = %d %s (%s), want %d application/json", tt.path, resp.StatusCode, body,
					resp.Header.Get("Content-Type"), tt.wantStatus)
			}
			if tt.wantStatus == http.StatusOK && !bytes.Equal(body, tt.wantBody) {
				t.Errorf("GET %s = %s, want %s", tt.path, body, tt.wantBody)
			}
			if tt.wantErr != "" && !strings.Contains(string(body), tt.wantErr) {
				t.Errorf("GET %s = %s, want an error with %q", tt.path, body, tt.wantErr)
			}

			// The client returns the same report, or the server's error.
			c := &Client{Base: srv.URL}
			got, err := c.Report(t.Context(), farm.Digest(strings.TrimPrefix(tt.path, ReportsPath)))
			switch {
			case tt.wantStatus == http.StatusOK && (err != nil || !bytes.Equal(got, tt.wantBody)):
				t.Errorf("Client.Report = %s, %v; want %s", got, err, tt.wantBody)
			case tt.wantStatus != http.StatusOK && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Client.Report = %s, %v; want an error with %q", got, err, tt.wantErr)
			}
		})
	}
}
