package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of running a recorded PuppetDB query again (the outcome label
// of compilefarm_puppetdb_query_runs_total).
const (
	QueryUnchanged = "unchanged" // the same result as before
	QueryChanged   = "changed"   // another result: the nodes that made it were checked
	QueryFailed    = "failed"    // PuppetDB refused it or could not be reached: tried next round
)

// QueryRefresh is the metrics of the PuppetDB query refresher. Its methods
// are safe on a nil *QueryRefresh (no metrics).
type QueryRefresh struct {
	queries  prometheus.Gauge
	lastRuns prometheus.Gauge
	runs     *prometheus.CounterVec
	duration prometheus.Histogram
	queued   prometheus.Counter
}

// QueryRefresh registers the query refresher's metrics: the queries
// recorded, the queries run per round and by outcome, round durations and
// the nodes queued because a result changed.
func (m *Farm) QueryRefresh() *QueryRefresh {
	q := &QueryRefresh{
		queries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "compilefarm_puppetdb_queries",
			Help: "Distinct PuppetDB queries recorded (per environment) as of the latest refresh round.",
		}),
		lastRuns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "compilefarm_puppetdb_query_refresh_last_runs",
			Help: "PuppetDB queries the latest refresh round ran (each distinct query once, however many nodes and environments made it).",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compilefarm_puppetdb_query_runs_total",
			Help: "Recorded PuppetDB queries run again, by outcome (unchanged, changed, failed).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "compilefarm_puppetdb_query_refresh_seconds",
			Help:    "Duration of a PuppetDB query refresh round (running the queries and queueing the nodes whose result changed).",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 15, 60, 300, 900},
		}),
		queued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "compilefarm_puppetdb_query_nodes_queued_total",
			Help: "Compiles queued because a PuppetDB query a node's catalog made answers otherwise.",
		}),
	}
	m.Registry.MustRegister(q.queries, q.lastRuns, q.runs, q.duration, q.queued)
	return q
}

// Ran counts one query run with outcome (Query*).
func (q *QueryRefresh) Ran(outcome string) {
	if q != nil {
		q.runs.WithLabelValues(outcome).Inc()
	}
}

// Queued counts n nodes queued for a changed result.
func (q *QueryRefresh) Queued(n int) {
	if q != nil && n > 0 {
		q.queued.Add(float64(n))
	}
}

// Round records a finished round: the queries recorded, the queries it
// ran, and how long it took.
func (q *QueryRefresh) Round(queries, runs int, took time.Duration) {
	if q != nil {
		q.queries.Set(float64(queries))
		q.lastRuns.Set(float64(runs))
		q.duration.Observe(took.Seconds())
	}
}
