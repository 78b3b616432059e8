package metrics

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func TestStatusClass(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{100, "1xx"}, {200, "2xx"}, {204, "2xx"}, {304, "3xx"}, {403, "4xx"}, {404, "4xx"},
		{500, "5xx"}, {503, "5xx"}, {599, "5xx"}, {0, "other"}, {99, "other"}, {600, "other"}, {999, "other"},
	}
	for _, tt := range tests {
		if got := StatusClass(tt.status); got != tt.want {
			t.Errorf("StatusClass(%d) = %q, want %q", tt.status, got, tt.want)
		}
	}
}

// TestEndpointObserve: a request is counted under its endpoint and the
// class of its status, and its duration lands in the endpoint's histogram.
func TestEndpointObserve(t *testing.T) {
	tests := []struct {
		endpoint string
		status   int
		d        time.Duration
		class    string
	}{
		{EndpointCatalog, 200, 3 * time.Millisecond, "2xx"},
		{EndpointCatalog, 503, 60 * time.Second, "5xx"},
		{EndpointFacts, 413, time.Millisecond, "4xx"},
		{EndpointOther, 404, 100 * time.Microsecond, "4xx"},
		{EndpointStatus, 304, time.Millisecond, "3xx"},
		{EndpointNode, 700, time.Millisecond, "other"},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint+" "+tt.class, func(t *testing.T) {
			m := New(nil)
			m.Endpoint(tt.endpoint).Observe(tt.status, tt.d)
			var c dto.Metric
			if err := m.Requests.WithLabelValues(tt.endpoint, tt.class).Write(&c); err != nil || c.Counter.GetValue() != 1 {
				t.Errorf("requests{%s,%s} = %v (%v), want 1", tt.endpoint, tt.class, c.Counter.GetValue(), err)
			}
			var count uint64
			var sum float64
			mfs, err := m.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			series := 0
			for _, mf := range mfs {
				if mf.GetName() != "compilefarm_frontdoor_request_duration_seconds" {
					continue
				}
				series = len(mf.Metric)
				for _, mm := range mf.Metric {
					if mm.Label[0].GetValue() == tt.endpoint {
						count, sum = mm.Histogram.GetSampleCount(), mm.Histogram.GetSampleSum()
					}
				}
			}
			if series != len(Endpoints) {
				t.Errorf("%d duration series, want one per endpoint (%d)", series, len(Endpoints))
			}
			if count != 1 || sum != tt.d.Seconds() {
				t.Errorf("duration count %d sum %v, want 1 and %v", count, sum, tt.d.Seconds())
			}
		})
	}
	// A nil *Farm and its nil endpoints observe nothing and do not panic.
	var m *Farm
	m.Endpoint(EndpointCatalog).Observe(200, time.Second)
}
