// Package metrics holds the farm's Prometheus metrics: compiles by result,
// compile durations, catalog requests by outcome, the queue backlog, and
// the front door's admission (requests in progress, waits, refusals).
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

// Front door admission lanes (the lane label of compilefarm_frontdoor_*).
const (
	LaneHeavy = "heavy" // requests with a body, catalogs and node classification
	LaneLight = "light" // CA certificate and CRL, file metadata and content, status
)

// Why the front door refused a request (compilefarm_frontdoor_refused_total).
const (
	RefusedQueueFull = "queue_full" // every slot busy and the wait queue full
	RefusedQueueWait = "queue_wait" // no slot within the queue wait
)

// Farm is the set of metrics one process exports.
type Farm struct {
	Registry        *prometheus.Registry
	Compiles        *prometheus.CounterVec
	CompileDuration prometheus.Histogram
	CatalogRequests *prometheus.CounterVec
	FactUploads     *prometheus.CounterVec
	InFlight        *prometheus.GaugeVec
	QueueWait       *prometheus.HistogramVec
	Refused         *prometheus.CounterVec
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
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "compilefarm_frontdoor_in_flight",
			Help: "Front door requests in progress, by admission lane (heavy, light).",
		}, []string{"lane"}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "compilefarm_frontdoor_queue_wait_seconds",
			Help:    "Time a front door request waited for a slot, by lane; only requests that found every slot busy (admitted or refused).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"lane"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compilefarm_frontdoor_refused_total",
			Help: "Front door requests answered 503 + Retry-After for want of capacity, by lane and reason (queue_full, queue_wait).",
		}, []string{"lane", "reason"}),
	}
	for _, r := range []string{CompileOK, CompileFailed, CompileTransient, CompileStale, CompileUnchanged} {
		m.Compiles.WithLabelValues(r)
	}
	for _, o := range []string{CatalogFresh, CatalogStale, CatalogWaited, CatalogFailed, CatalogPending} {
		m.CatalogRequests.WithLabelValues(o)
	}
	for _, l := range []string{LaneHeavy, LaneLight} {
		m.InFlight.WithLabelValues(l)
		m.QueueWait.WithLabelValues(l)
		for _, r := range []string{RefusedQueueFull, RefusedQueueWait} {
			m.Refused.WithLabelValues(l, r)
		}
	}
	reg.MustRegister(m.Compiles, m.CompileDuration, m.CatalogRequests, m.FactUploads, m.InFlight, m.QueueWait, m.Refused,
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

// AddInFlight moves the count of a lane's requests in progress by delta.
func (m *Farm) AddInFlight(lane string, delta int) {
	if m != nil {
		m.InFlight.WithLabelValues(lane).Add(float64(delta))
	}
}

// ObserveQueueWait records how long a request waited for a slot in lane.
func (m *Farm) ObserveQueueWait(lane string, d time.Duration) {
	if m != nil {
		m.QueueWait.WithLabelValues(lane).Observe(d.Seconds())
	}
}

// ObserveRefused counts one request of lane refused for reason (Refused*).
func (m *Farm) ObserveRefused(lane, reason string) {
	if m != nil {
		m.Refused.WithLabelValues(lane, reason).Inc()
	}
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
