// Package metrics holds the farm's Prometheus metrics: compiles by result,
// compile durations, catalog requests by outcome, and the queue backlog.
package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Compile results counted in compilefarm_compiles_total.
const (
	CompileOK        = "ok"        // a catalog was stored
	CompileFailed    = "failed"    // Puppet reported a compile error
	CompileTransient = "transient" // the engine failed; the job is retried
	CompileStale     = "stale"     // a newer compile had already won
	CompileUnchanged = "unchanged" // the same catalog as the node has: kept
)

// Catalog request outcomes counted in compilefarm_catalog_requests_total.
const (
	CatalogFresh   = "fresh"   // the current catalog, served at once
	CatalogStale   = "stale"   // the last good catalog while a new compile runs
	CatalogWaited  = "waited"  // served after waiting for a compile
	CatalogFailed  = "failed"  // compile failed and no catalog to fall back on
	CatalogPending = "pending" // no catalog within the wait bound: 503
)

// Fact upload results counted in compilefarm_fact_uploads_total.
const (
	UploadQueued    = "queued"    // the upload queued a compile
	UploadUnchanged = "unchanged" // nothing that matters changed: no compile
)

// Farm is the set of metrics one process exports.
type Farm struct {
	Registry        *prometheus.Registry
	Compiles        *prometheus.CounterVec
	CompileDuration prometheus.Histogram
	CatalogRequests *prometheus.CounterVec
	FactUploads     *prometheus.CounterVec
}

// QueueStatser is the part of a queue the backlog gauges read.
type QueueStatser interface {
	Stats(ctx context.Context) ([]farm.QueueStats, error)
}

// New registers the farm's metrics. queue may be nil (a process without a
// queue of its own exports no backlog gauges).
func New(queue QueueStatser) *Farm {
	reg := prometheus.NewRegistry()
	m := &Farm{
		Registry: reg,
		Compiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compilefarm_compiles_total",
			Help: "Catalog compiles finished, by result (ok, failed, transient, stale, unchanged).",
		}, []string{"result"}),
		CompileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "compilefarm_compile_duration_seconds",
			Help:    "Time to compile one catalog, engine call included.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120},
		}),
		CatalogRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compilefarm_catalog_requests_total",
			Help: "Catalog requests answered, by outcome (fresh, stale, waited, failed, pending).",
		}, []string{"outcome"}),
		FactUploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compilefarm_fact_uploads_total",
			Help: "Fact uploads received, by whether they queued a compile (queued, unchanged).",
		}, []string{"result"}),
	}
	for _, r := range []string{CompileOK, CompileFailed, CompileTransient, CompileStale, CompileUnchanged} {
		m.Compiles.WithLabelValues(r)
	}
	for _, o := range []string{CatalogFresh, CatalogStale, CatalogWaited, CatalogFailed, CatalogPending} {
		m.CatalogRequests.WithLabelValues(o)
	}
	reg.MustRegister(m.Compiles, m.CompileDuration, m.CatalogRequests, m.FactUploads,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	if queue != nil {
		reg.MustRegister(&queueCollector{q: queue})
	}
	return m
}

// Handler serves the metrics in Prometheus text format.
func (m *Farm) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// The Observe methods do nothing on a nil *Farm, so a process (or test)
// without metrics needs no checks at the call sites.

// ObserveCompile counts one finished compile.
func (m *Farm) ObserveCompile(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.Compiles.WithLabelValues(result).Inc()
	if result == CompileOK || result == CompileFailed || result == CompileUnchanged {
		m.CompileDuration.Observe(d.Seconds())
	}
}

// ObserveCatalogRequest counts one catalog request by outcome (Catalog*).
func (m *Farm) ObserveCatalogRequest(outcome string) {
	if m != nil {
		m.CatalogRequests.WithLabelValues(outcome).Inc()
	}
}

// ObserveFactUpload counts one fact upload by whether it queued a compile.
func (m *Farm) ObserveFactUpload(queued bool) {
	if m == nil {
		return
	}
	result := UploadUnchanged
	if queued {
		result = UploadQueued
	}
	m.FactUploads.WithLabelValues(result).Inc()
}

var (
	depthDesc = prometheus.NewDesc("compilefarm_queue_depth",
		"Compile jobs waiting, by lane.", []string{"lane"}, nil)
	inFlightDesc = prometheus.NewDesc("compilefarm_queue_in_flight",
		"Compile jobs handed to workers and not yet finished, by lane.", []string{"lane"}, nil)
	ageDesc = prometheus.NewDesc("compilefarm_queue_oldest_age_seconds",
		"Age of the oldest waiting compile job, by lane (0 when empty).", []string{"lane"}, nil)
)

type queueCollector struct{ q QueueStatser }

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- inFlightDesc
	ch <- ageDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.q.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, err)
		return
	}
	for _, s := range stats {
		lane := string(s.Lane)
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(s.Depth), lane)
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(s.InFlight), lane)
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, s.OldestAge.Seconds(), lane)
	}
}
