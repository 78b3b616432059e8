package emf

import (
	"strings"

	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// Namespace is the CloudWatch namespace of the farm's EMF metrics.
const Namespace = "compilefarm"

// Names of the front door's CloudWatch metrics (FrontDoor).
const (
	Requests       = "Requests"       // requests answered, health checks (status) left out
	Requests4xx    = "Requests4xx"    // ... with a 4xx
	Requests5xx    = "Requests5xx"    // ... with a 5xx (refusals and pending first compiles included)
	Refused        = "Refused"        // 503 + Retry-After for want of capacity (back-pressure)
	Latency        = "Latency"        // their durations (ms, distribution)
	CatalogLatency = "CatalogLatency" // catalog requests' durations (ms, distribution)
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
//
// The status endpoint is left out of the requests and their latency: the
// load balancer's health checks, dozens a minute per task whatever the
// agents do, would make up most of a quiet stage's requests and latency.
func FrontDoor(m *metrics.Farm) []Metric {
	health := map[string]string{"endpoint": metrics.EndpointStatus}
	ms := []Metric{
		{Name: Requests, From: m.Requests, Except: health},
		{Name: Requests4xx, From: m.Requests, Where: map[string]string{"code": "4xx"}, Except: health},
		{Name: Requests5xx, From: m.Requests, Where: map[string]string{"code": "5xx"}, Except: health},
		{Name: Refused, From: m.Refused},
	}
	for _, o := range []string{metrics.CatalogFresh, metrics.CatalogStale, metrics.CatalogWaited, metrics.CatalogFailed, metrics.CatalogPending} {
		ms = append(ms, Metric{Name: CatalogMetric(o), From: m.CatalogRequests, Where: map[string]string{"outcome": o}})
	}
	return append(ms,
		Metric{Name: Latency, From: m.RequestDuration, Except: health},
		Metric{Name: CatalogLatency, From: m.RequestDuration, Where: map[string]string{"endpoint": metrics.EndpointCatalog}},
	)
}
