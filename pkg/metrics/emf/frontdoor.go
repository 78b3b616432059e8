package emf

import (
	"strings"

	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// Namespace is the CloudWatch namespace of the farm's EMF metrics.
const Namespace = "compilefarm"

// Names of the front door's CloudWatch metrics (FrontDoor).
const (
	Requests       = "Requests"       // requests answered
	Requests4xx    = "Requests4xx"    // ... with a 4xx
	Requests5xx    = "Requests5xx"    // ... with a 5xx (refusals and pending first compiles included)
	Refused        = "Refused"        // 503 + Retry-After for want of capacity (back-pressure)
	Latency        = "Latency"        // request durations, every endpoint (ms, distribution)
	CatalogLatency = "CatalogLatency" // catalog request durations (ms, distribution)
)

// CatalogMetric is the CloudWatch metric counting catalog requests of
// outcome (metrics.Catalog*): CatalogFresh, CatalogStale, ...
func CatalogMetric(outcome string) string {
	return "Catalog" + strings.ToUpper(outcome[:1]) + outcome[1:]
}

// FrontDoor are the front door's metrics in CloudWatch, read from m:
// requests, 4xx and 5xx, refusals, catalog requests by outcome, and the
// latency of all requests and of catalog requests. Eleven custom metrics
// per set of dimensions (CloudWatch bills each).
func FrontDoor(m *metrics.Farm) []Metric {
	ms := []Metric{
		{Name: Requests, From: m.Requests},
		{Name: Requests4xx, From: m.Requests, Where: map[string]string{"code": "4xx"}},
		{Name: Requests5xx, From: m.Requests, Where: map[string]string{"code": "5xx"}},
		{Name: Refused, From: m.Refused},
	}
	for _, o := range []string{metrics.CatalogFresh, metrics.CatalogStale, metrics.CatalogWaited, metrics.CatalogFailed, metrics.CatalogPending} {
		ms = append(ms, Metric{Name: CatalogMetric(o), From: m.CatalogRequests, Where: map[string]string{"outcome": o}})
	}
	return append(ms,
		Metric{Name: Latency, From: m.RequestDuration},
		Metric{Name: CatalogLatency, From: m.RequestDuration, Where: map[string]string{"endpoint": metrics.EndpointCatalog}},
	)
}
