// Package metrics holds the farm's Prometheus metrics: compiles by result,
// compile durations, catalog requests by outcome, the queue backlog, the
// front door's requests (by endpoint and status class, with their
// durations) and its admission (requests in progress, waits, refusals).
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

// Front door endpoints (the endpoint label of compilefarm_frontdoor_requests_total
// and compilefarm_frontdoor_request_duration_seconds): a fixed set, never a path.
const (
	EndpointCatalog       = "catalog"        // /puppet/v3/catalog
	EndpointNode          = "node"           // /puppet/v3/node
	EndpointFacts         = "facts"          // /puppet/v3/facts
	EndpointReport        = "report"         // /puppet/v3/report
	EndpointFileMetadata  = "file_metadata"  // /puppet/v3/file_metadata
	EndpointFileMetadatas = "file_metadatas" // /puppet/v3/file_metadatas
	EndpointFileContent   = "file_content"   // /puppet/v3/file_content and static_file_content
	EndpointFileBucket    = "file_bucket"    // /puppet/v3/file_bucket_file
	EndpointEnvironments  = "environments"   // /puppet/v3/environments
	EndpointCA            = "ca"             // /puppet-ca/v1/...
	EndpointStatus        = "status"         // /status/v1/... (the load balancer's health check)
	EndpointOperator      = "operator"       // the operator API through the front door
	EndpointOther         = "other"          // no route: 400, 403 (method), 404
)

// Endpoints are every Endpoint*.
var Endpoints = []string{EndpointCatalog, EndpointNode, EndpointFacts, EndpointReport, EndpointFileMetadata,
	EndpointFileMetadatas, EndpointFileContent, EndpointFileBucket, EndpointEnvironments, EndpointCA,
	EndpointStatus, EndpointOperator, EndpointOther}

// Status classes (the code label of compilefarm_frontdoor_requests_total):
// the class of the status code the front door wrote.
var statusClasses = [...]string{1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}

// StatusClass is the code label of status: "2xx" for 200 to 299, and so
// on; "other" outside 100 to 599.
func StatusClass(status int) string {
	if c := status / 100; c >= 1 && c <= 5 {
		return statusClasses[c]
	}
	return "other"
}

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
	Requests        *prometheus.CounterVec   // by endpoint and code (status class)
	RequestDuration *prometheus.HistogramVec // by endpoint
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
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compilefarm_frontdoor_requests_total",
			Help: "Front door requests answered, by endpoint (catalog, node, facts, report, file_metadata, ..., other) and code (the status class written: 2xx, 3xx, 4xx, 5xx).",
		}, []string{"endpoint", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "compilefarm_frontdoor_request_duration_seconds",
			Help: "Time from a front door request's arrival to its handler's return, by endpoint; waits for a slot and for compiles included.",
			// Milliseconds for most requests, up to the 60 s a first
			// catalog request may wait for its compile.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"endpoint"}),
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
	for _, e := range Endpoints {
		m.RequestDuration.WithLabelValues(e)
		for _, c := range statusClasses[1:] {
			m.Requests.WithLabelValues(e, c)
		}
	}
	reg.MustRegister(m.Compiles, m.CompileDuration, m.CatalogRequests, m.FactUploads, m.InFlight, m.QueueWait, m.Refused,
		m.Requests, m.RequestDuration,
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

// EndpointMetrics are one endpoint's request metrics, resolved once (at
// route set-up), so that observing a request takes no lookup or
// allocation: an atomic add and a histogram observation.
type EndpointMetrics struct {
	farm     *Farm
	name     string
	byClass  [6]prometheus.Counter // by status/100; [0] unused
	duration prometheus.Observer
}

// Endpoint returns endpoint's request metrics (nil on a nil *Farm; Observe
// on nil does nothing).
func (m *Farm) Endpoint(endpoint string) *EndpointMetrics {
	if m == nil {
		return nil
	}
	e := &EndpointMetrics{farm: m, name: endpoint, duration: m.RequestDuration.WithLabelValues(endpoint)}
	for c := 1; c <= 5; c++ {
		e.byClass[c] = m.Requests.WithLabelValues(endpoint, statusClasses[c])
	}
	return e
}

// Observe counts one request answered with status after d.
func (e *EndpointMetrics) Observe(status int, d time.Duration) {
	if e == nil {
		return
	}
	if c := status / 100; c >= 1 && c <= 5 {
		e.byClass[c].Inc()
	} else {
		e.farm.Requests.WithLabelValues(e.name, StatusClass(status)).Inc()
	}
	e.duration.Observe(d.Seconds())
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
