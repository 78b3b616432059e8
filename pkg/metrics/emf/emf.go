// Package emf writes a process's Prometheus metrics to CloudWatch as
// embedded-metric-format (EMF) log lines: every interval, one JSON line
// with what the metrics it is given counted in that interval, which
// CloudWatch Logs turns into custom metrics (no agent, no PutMetricData:
// the line only has to reach a log group, as the ECS awslogs driver ships
// a task's stderr).
//
// The values are read from the Prometheus collectors themselves (deltas of
// their counters and histogram buckets since the last line), so the
// Prometheus metrics stay the one record of what happened.
//
// Counters are written every interval, zeros included: graphs stay
// continuous and an alarm sees 0, not missing data, when nothing happened.
// A histogram with no observations in the interval is left out of that
// line (an EMF distribution needs at least one value).
//
// Spec: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
package emf

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is one CloudWatch metric of the line: the change, over the
// interval, of the series of From whose labels have the values in Where
// (every series when Where is empty) and none of the values in Except,
// summed.
//
// From's series must all be counters or all histograms. Counters become
// a Count; histograms a distribution in milliseconds (their observations
// taken as seconds): Values and Counts, one value per bucket that got
// observations (its midpoint; the first bucket's half its bound, the
// +Inf bucket's the largest bound), with Count, Sum, Min and Max of those
// values, so CloudWatch can compute percentiles.
type Metric struct {
	Name   string
	From   prometheus.Collector
	Where  map[string]string
	Except map[string]string
}

// Writer writes one line per interval. Set the fields, then Run.
type Writer struct {
	Out        io.Writer         // where lines go, one Write each (os.Stderr)
	Namespace  string            // the CloudWatch namespace
	Dimensions map[string]string // the dimensions of every metric (e.g. Stage)
	Metrics    []Metric
	Now        func() time.Time // nil: time.Now

	mu   sync.Mutex
	last []map[string]series // by Metrics index: each series' totals at the last line
}

// series is a counter's value or a histogram's cumulative bucket counts
// (with its sample count last).
type series struct {
	value   float64
	buckets []uint64
	bounds  []float64
}

// Run writes a line every interval until ctx ends, then one last line for
// the interval cut short. The first line counts from the moment Run starts.
func (w *Writer) Run(ctx context.Context, interval time.Duration) error {
	if _, err := w.collect(); err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return w.WriteLine()
		case <-t.C:
			if err := w.WriteLine(); err != nil {
				return err
			}
		}
	}
}

// WriteLine writes the line of the interval since the last line (or since
// the first collection).
func (w *Writer) WriteLine() error {
	line, err := w.Line()
	if err != nil {
		return err
	}
	_, err = w.Out.Write(append(line, '\n'))
	return err
}

// Line returns the interval's line (without its newline) and starts the
// next interval.
func (w *Writer) Line() ([]byte, error) {
	deltas, err := w.collect()
	if err != nil {
		return nil, err
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	root := map[string]any{}
	dims := make([]string, 0, len(w.Dimensions))
	for k, v := range w.Dimensions {
		dims = append(dims, k)
		root[k] = v
	}
	sort.Strings(dims)
	var defs []metricDefinition
	for i, m := range w.Metrics {
		switch d := deltas[i].(type) {
		case float64:
			root[m.Name] = d
			defs = append(defs, metricDefinition{Name: m.Name, Unit: "Count"})
		case *distribution:
			if d.Count == 0 {
				continue
			}
			root[m.Name] = d
			defs = append(defs, metricDefinition{Name: m.Name, Unit: "Milliseconds"})
		}
	}
	root["_aws"] = metadata{
		Timestamp: now().UnixMilli(),
		CloudWatchMetrics: []metricDirective{{
			Namespace: w.Namespace, Dimensions: [][]string{dims}, Metrics: defs,
		}},
	}
	return json.Marshal(root)
}

type metadata struct {
	Timestamp         int64             `json:"Timestamp"`
	CloudWatchMetrics []metricDirective `json:"CloudWatchMetrics"`
}

type metricDirective struct {
	Namespace  string             `json:"Namespace"`
	Dimensions [][]string         `json:"Dimensions"`
	Metrics    []metricDefinition `json:"Metrics"`
}

type metricDefinition struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

// distribution is an EMF histogram value.
type distribution struct {
	Values []float64 `json:"Values"`
	Counts []uint64  `json:"Counts"`
	Count  uint64    `json:"Count"`
	Sum    float64   `json:"Sum"`
	Min    float64   `json:"Min"`
	Max    float64   `json:"Max"`
}

// collect reads every metric's series and returns, by Metrics index, the
// change since the last collect: a float64 for counters, a *distribution
// for histograms, nil for a metric with no series.
func (w *Writer) collect() ([]any, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = make([]map[string]series, len(w.Metrics))
	}
	out := make([]any, len(w.Metrics))
	for i, m := range w.Metrics {
		now, err := read(m)
		if err != nil {
			return nil, fmt.Errorf("emf: metric %s: %w", m.Name, err)
		}
		prev := w.last[i]
		w.last[i] = now
		if len(now) == 0 {
			continue // no series yet: nothing to say, not even its kind
		}
		var counter float64
		var hist *histogramDelta
		for key, s := range now {
			p := prev[key] // a new series counts from zero
			if s.buckets == nil {
				counter += s.value - p.value
				continue
			}
			if hist == nil {
				hist = &histogramDelta{bounds: s.bounds, counts: make([]uint64, len(s.buckets))}
			}
			if !equalBounds(hist.bounds, s.bounds) {
				return nil, fmt.Errorf("emf: metric %s: series with different buckets", m.Name)
			}
			for b := range s.buckets {
				var was uint64
				if p.buckets != nil {
					was = p.buckets[b]
				}
				hist.counts[b] += s.buckets[b] - was
			}
		}
		if hist != nil {
			out[i] = hist.distribution()
		} else {
			out[i] = counter
		}
	}
	return out, nil
}

// read returns m's matching series by their label set.
func read(m Metric) (map[string]series, error) {
	ch := make(chan prometheus.Metric, 64)
	go func() { m.From.Collect(ch); close(ch) }()
	out := map[string]series{}
	var err error
	for pm := range ch {
		var d dto.Metric
		if e := pm.Write(&d); e != nil {
			err = e
			continue
		}
		if !matches(d.Label, m.Where, m.Except) {
			continue
		}
		key := labelKey(d.Label)
		switch {
		case d.Counter != nil:
			out[key] = series{value: d.Counter.GetValue()}
		case d.Histogram != nil:
			h := d.Histogram
			s := series{bounds: make([]float64, 0, len(h.Bucket)), buckets: make([]uint64, 0, len(h.Bucket)+1)}
			for _, b := range h.Bucket {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue
				}
				s.bounds = append(s.bounds, b.GetUpperBound())
				s.buckets = append(s.buckets, b.GetCumulativeCount())
			}
			s.buckets = append(s.buckets, h.GetSampleCount()) // +Inf
			out[key] = s
		default:
			err = fmt.Errorf("series %s is neither a counter nor a histogram", key)
		}
	}
	return out, err
}

func matches(labels []*dto.LabelPair, where, except map[string]string) bool {
	n := 0
	for _, l := range labels {
		if v, ok := except[l.GetName()]; ok && v == l.GetValue() {
			return false
		}
		if v, ok := where[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(where)
}

func labelKey(labels []*dto.LabelPair) string {
	var b strings.Builder
	for _, l := range labels {
		b.WriteString(l.GetName())
		b.WriteByte('=')
		b.WriteString(l.GetValue())
		b.WriteByte(',')
	}
	return b.String()
}

func equalBounds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// histogramDelta is the change of a histogram's cumulative bucket counts
// (bounds in seconds; counts has one more entry, +Inf).
type histogramDelta struct {
	bounds []float64
	counts []uint64
}

// distribution turns the cumulative counts into per-bucket counts, each at
// its bucket's representative value, in milliseconds.
func (h *histogramDelta) distribution() *distribution {
	d := &distribution{Values: []float64{}, Counts: []uint64{}}
	var below uint64
	for i, cum := range h.counts {
		n := cum - below
		below = cum
		if n == 0 {
			continue
		}
		var v float64
		switch {
		case len(h.bounds) == 0:
			v = 0
		case i == 0:
			v = h.bounds[0] / 2
		case i == len(h.bounds):
			v = h.bounds[i-1]
		default:
			v = (h.bounds[i-1] + h.bounds[i]) / 2
		}
		v = math.Round(v*1000*1000) / 1000 // ms, to the microsecond
		if d.Count == 0 {
			d.Min = v
		}
		d.Max = v
		d.Values = append(d.Values, v)
		d.Counts = append(d.Counts, n)
		d.Count += n
		d.Sum += v * float64(n)
	}
	return d
}
