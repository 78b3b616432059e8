package emf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// line is an EMF line as CloudWatch reads it.
type line struct {
	AWS struct {
		Timestamp         int64
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
	root map[string]json.RawMessage
}

func parse(t *testing.T, b []byte) line {
	t.Helper()
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("the line is not JSON: %v\n%s", err, b)
	}
	if err := json.Unmarshal(b, &l.root); err != nil {
		t.Fatal(err)
	}
	return l
}

// check verifies the line against the spec: one directive, its
// dimensions and metrics all members of the root.
func (l line) check(t *testing.T) {
	t.Helper()
	if len(l.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("%d metric directives, want 1", len(l.AWS.CloudWatchMetrics))
	}
	d := l.AWS.CloudWatchMetrics[0]
	if d.Namespace != Namespace || !reflect.DeepEqual(d.Dimensions, [][]string{{"Stage"}}) {
		t.Errorf("namespace %q dimensions %v", d.Namespace, d.Dimensions)
	}
	if string(l.root["Stage"]) != `"test"` {
		t.Errorf("Stage = %s", l.root["Stage"])
	}
	if len(d.Metrics) > 100 {
		t.Errorf("%d metrics in a directive (at most 100)", len(d.Metrics))
	}
	for _, m := range d.Metrics {
		if _, ok := l.root[m.Name]; !ok {
			t.Errorf("metric %s is not a member of the root", m.Name)
		}
		want := "Count"
		if m.Name == Latency || m.Name == CatalogLatency {
			want = "Milliseconds"
		}
		if m.Unit != want {
			t.Errorf("metric %s unit %q, want %q", m.Name, m.Unit, want)
		}
	}
	if l.AWS.Timestamp != time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC).UnixMilli() {
		t.Errorf("Timestamp %d", l.AWS.Timestamp)
	}
}

func (l line) count(t *testing.T, name string) float64 {
	t.Helper()
	var v float64
	if err := json.Unmarshal(l.root[name], &v); err != nil {
		t.Fatalf("%s = %s: %v", name, l.root[name], err)
	}
	return v
}

func (l line) distribution(t *testing.T, name string) *distribution {
	t.Helper()
	raw, ok := l.root[name]
	if !ok {
		return nil
	}
	var d distribution
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s = %s: %v", name, raw, err)
	}
	if len(d.Values) != len(d.Counts) || len(d.Values) == 0 || len(d.Values) > 100 {
		t.Errorf("%s: %d values, %d counts", name, len(d.Values), len(d.Counts))
	}
	var n uint64
	for _, c := range d.Counts {
		n += c
	}
	if n != d.Count {
		t.Errorf("%s: counts sum to %d, Count %d", name, n, d.Count)
	}
	return &d
}

// TestLines: each line holds the interval's changes; counters are written
// as zeros in an interval without requests, distributions left out.
func TestLines(t *testing.T) {
	m := metrics.New(nil)
	catalog, facts, other, status := m.Endpoint(metrics.EndpointCatalog), m.Endpoint(metrics.EndpointFacts), m.Endpoint(metrics.EndpointOther),
		m.Endpoint(metrics.EndpointStatus)
	w := &Writer{Namespace: Namespace, Dimensions: map[string]string{"Stage": "test"}, Metrics: FrontDoor(m),
		Now: func() time.Time { return time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC) }}
	if _, err := w.Line(); err != nil { // the start of the first interval
		t.Fatal(err)
	}
	type want struct {
		counts         map[string]float64 // every other count must be 0
		latency        []float64          // the distribution's Values (ms); nil: no Latency
		catalogLatency []float64
	}
	tests := []struct {
		name     string
		interval func()
		want     want
	}{
		{"requests of every kind", func() {
			catalog.Observe(200, 3*time.Millisecond) // (2.5, 5] ms
			m.ObserveCatalogRequest(metrics.CatalogFresh)
			catalog.Observe(503, 59*time.Second) // (30, 60] s
			m.ObserveCatalogRequest(metrics.CatalogPending)
			catalog.Observe(503, 100*time.Microsecond) // first bucket
			m.ObserveRefused(metrics.LaneHeavy, metrics.RefusedQueueFull)
			facts.Observe(413, 3*time.Millisecond)
			other.Observe(404, 2*time.Minute)     // +Inf
			status.Observe(200, time.Millisecond) // a health check: left out
			status.Observe(503, time.Millisecond)
		}, want{
			counts:         map[string]float64{Requests: 5, Requests4xx: 2, Requests5xx: 2, Refused: 1, "CatalogFresh": 1, "CatalogPending": 1},
			latency:        []float64{0.25, 3.75, 45000, 60000},
			catalogLatency: []float64{0.25, 3.75, 45000},
		}},
		{"deltas, not totals", func() {
			facts.Observe(200, 3*time.Millisecond)
			m.ObserveRefused(metrics.LaneLight, metrics.RefusedQueueWait)
		}, want{counts: map[string]float64{Requests: 1, Refused: 1}, latency: []float64{3.75}}},
		{"an interval with health checks only", func() { status.Observe(200, time.Millisecond) }, want{}},
	}
	all := []string{Requests, Requests4xx, Requests5xx, Refused, "CatalogFresh", "CatalogStale", "CatalogWaited", "CatalogFailed", "CatalogPending"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.interval()
			b, err := w.Line()
			if err != nil {
				t.Fatal(err)
			}
			l := parse(t, b)
			l.check(t)
			for _, name := range all {
				if got := l.count(t, name); got != tt.want.counts[name] {
					t.Errorf("%s = %v, want %v", name, got, tt.want.counts[name])
				}
			}
			for name, want := range map[string][]float64{Latency: tt.want.latency, CatalogLatency: tt.want.catalogLatency} {
				d := l.distribution(t, name)
				switch {
				case want == nil && d != nil:
					t.Errorf("%s %+v in an interval without any", name, d)
				case want != nil && (d == nil || !reflect.DeepEqual(d.Values, want)):
					t.Errorf("%s = %+v, want values %v", name, d, want)
				}
			}
			if tt.want.latency == nil && len(l.AWS.CloudWatchMetrics[0].Metrics) != len(all) {
				t.Errorf("metrics %v, want the %d counters only", l.AWS.CloudWatchMetrics[0].Metrics, len(all))
			}
		})
	}
}

func TestDistribution(t *testing.T) {
	bounds := []float64{.001, .002, .01} // s
	tests := []struct {
		name       string
		cumulative []uint64 // by bucket, +Inf last
		want       distribution
	}{
		{"first bucket", []uint64{2, 2, 2, 2}, distribution{Values: []float64{0.5}, Counts: []uint64{2}, Count: 2, Sum: 1, Min: 0.5, Max: 0.5}},
		{"middle buckets", []uint64{0, 1, 4, 4}, distribution{Values: []float64{1.5, 6}, Counts: []uint64{1, 3}, Count: 4, Sum: 19.5, Min: 1.5, Max: 6}},
		{"+Inf", []uint64{0, 0, 0, 1}, distribution{Values: []float64{10}, Counts: []uint64{1}, Count: 1, Sum: 10, Min: 10, Max: 10}},
		{"empty", []uint64{0, 0, 0, 0}, distribution{Values: []float64{}, Counts: []uint64{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := (&histogramDelta{bounds: bounds, counts: tt.cumulative}).distribution()
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

// syncBuffer is an Out the test reads while Run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestRun: a line per interval, each one whole JSON line, and a last one
// when the context ends.
func TestRun(t *testing.T) {
	m := metrics.New(nil)
	var out syncBuffer
	w := &Writer{Out: &out, Namespace: Namespace, Dimensions: map[string]string{"Stage": "test"}, Metrics: FrontDoor(m),
		Now: func() time.Time { return time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx, 20*time.Millisecond) }()
	time.Sleep(70 * time.Millisecond)
	m.Endpoint(metrics.EndpointCA).Observe(200, time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	sc := bufio.NewScanner(&out.b)
	var n int
	var total float64
	for sc.Scan() {
		l := parse(t, sc.Bytes())
		l.check(t)
		total += l.count(t, Requests)
		n++
	}
	if n < 3 || total != 1 {
		t.Errorf("%d lines counting %v requests, want at least 3 (2 intervals and the last) counting 1", n, total)
	}
}
