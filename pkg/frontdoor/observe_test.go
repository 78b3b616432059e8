package frontdoor

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/compilefarm/compilefarm/pkg/metrics"
)

func TestEndpointOf(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/puppet/v3/catalog/{name}", metrics.EndpointCatalog},
		{"/puppet/v3/node/{name}", metrics.EndpointNode},
		{"/puppet/v3/facts/{name}", metrics.EndpointFacts},
		{"/puppet/v3/report/{name}", metrics.EndpointReport},
		{"/puppet/v3/file_metadata/{path...}", metrics.EndpointFileMetadata},
		{"/puppet/v3/file_metadatas/{path...}", metrics.EndpointFileMetadatas},
		{"/puppet/v3/file_content/{path...}", metrics.EndpointFileContent},
		{"/puppet/v3/static_file_content/{path...}", metrics.EndpointFileContent},
		{"/puppet/v3/file_bucket_file/{key...}", metrics.EndpointFileBucket},
		{"/puppet/v3/environments", metrics.EndpointEnvironments},
		{"/puppet-ca/v1/certificate/{name}", metrics.EndpointCA},
		{"/puppet-ca/v1/certificate_revocation_list/ca", metrics.EndpointCA},
		{"/status/v1/simple", metrics.EndpointStatus},
		{"/status/v1/services", metrics.EndpointStatus},
		{OperatorPrefix + "/admin/v1/{path...}", metrics.EndpointOperator},
		{"/puppet/v3/nosuch", metrics.EndpointOther},
		{"/", metrics.EndpointOther},
		{OperatorPrefix, metrics.EndpointOther},
	}
	known := map[string]bool{}
	for _, e := range metrics.Endpoints {
		known[e] = true
	}
	for _, tt := range tests {
		got := endpointOf(tt.path)
		if got != tt.want {
			t.Errorf("endpointOf(%q) = %q, want %q", tt.path, got, tt.want)
		}
		if !known[got] {
			t.Errorf("endpointOf(%q) = %q, not in metrics.Endpoints", tt.path, got)
		}
	}
}

// TestStatusWriter: the status recorded is the one written, and the
// writer keeps what the handlers use of the one it wraps.
func TestStatusWriter(t *testing.T) {
	tests := []struct {
		name     string
		handler  func(w http.ResponseWriter)
		want     int
		wantBody string
	}{
		{"nothing written", func(w http.ResponseWriter) {}, 200, ""},
		{"body only", func(w http.ResponseWriter) { w.Write([]byte("x")) }, 200, "x"},
		{"WriteHeader", func(w http.ResponseWriter) { w.WriteHeader(404) }, 404, ""},
		{"the first WriteHeader counts", func(w http.ResponseWriter) { w.WriteHeader(503); w.WriteHeader(200) }, 503, ""},
		{"WriteHeader after a body", func(w http.ResponseWriter) { w.Write([]byte("x")); w.WriteHeader(500) }, 200, "x"},
		{"an informational status, then the final one", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(403) }, 403, ""},
		{"Flush", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, 200, ""},
		{"ResponseController", func(w http.ResponseWriter) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("ResponseController Flush: %v", err)
			}
		}, 200, ""},
		{"ReadFrom", func(w http.ResponseWriter) { io.Copy(w, strings.NewReader("copied")) }, 200, "copied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			sw := newStatusWriter(rec)
			tt.handler(sw)
			if got := sw.status(); got != tt.want {
				t.Errorf("status %d, want %d", got, tt.want)
			}
			if rec.Body.String() != tt.wantBody {
				t.Errorf("body %q, want %q", rec.Body.String(), tt.wantBody)
			}
			sw.release()
		})
	}
	if _, ok := any(&statusWriter{}).(io.ReaderFrom); !ok {
		t.Error("statusWriter is not an io.ReaderFrom")
	}
}

// TestRequestMetrics: every request is counted under its route's endpoint
// and the class of the status it was answered with; requests with no
// route under "other".
func TestRequestMetrics(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	tests := []struct {
		client       *http.Client
		method, path string
		endpoint     string
		class        string
	}{
		{r.anon, "GET", "/status/v1/simple", metrics.EndpointStatus, "2xx"},
		{r.anon, "GET", "/puppet-ca/v1/certificate/ca", metrics.EndpointCA, "2xx"},
		{r.anon, "GET", "/puppet-ca/v1/certificate/nosuch.example.test", metrics.EndpointCA, "4xx"},
		{a1, "GET", "/puppet/v3/environments", metrics.EndpointEnvironments, "2xx"},
		{r.anon, "GET", "/puppet/v3/environments", metrics.EndpointEnvironments, "4xx"},
		{a1, "GET", "/puppet/v3/node/agent2.example.test?environment=production", metrics.EndpointNode, "4xx"},
		{a1, "GET", "/puppet/v3/nosuch", metrics.EndpointOther, "4xx"},
		{a1, "DELETE", "/puppet/v3/catalog/agent1.example.test", metrics.EndpointOther, "4xx"},
		{a1, "GET", "/puppet/v3/./environments", metrics.EndpointOther, "4xx"},
		{a1, "GET", "/puppet/v3/file_content/modules/nosuch/x?environment=production", metrics.EndpointFileContent, "4xx"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			before := requestCount(t, r.fd.Metrics, tt.endpoint, tt.class)
			got := r.do(tt.client, tt.method, tt.path, nil, nil)
			if metrics.StatusClass(got.status) != tt.class {
				t.Fatalf("answered %d %s, want a %s", got.status, got.body, tt.class)
			}
			if after := requestCount(t, r.fd.Metrics, tt.endpoint, tt.class); after != before+1 {
				t.Errorf("requests{endpoint=%s,code=%s} went from %v to %v, want +1", tt.endpoint, tt.class, before, after)
			}
		})
	}
}

func requestCount(t *testing.T, m *metrics.Farm, endpoint, class string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Requests.WithLabelValues(endpoint, class).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.Counter.GetValue()
}

// BenchmarkObserve: what the request metrics add to a request: the front
// door's health check (its cheapest request) with and without them.
func BenchmarkObserve(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		name := "without-metrics"
		fd := &Server{}
		if withMetrics {
			name, fd.Metrics = "with-metrics", metrics.New(nil)
		}
		h := fd.Handler()
		req := httptest.NewRequest("GET", "/status/v1/simple", nil)
		w := &discardWriter{h: http.Header{}}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// measures the handler.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
