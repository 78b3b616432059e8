package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Results of a PuppetDB command (the result label of
// compilefarm_puppetdb_commands_total).
const (
	PuppetDBQueued      = "queued"       // put in the outbox
	PuppetDBQueueFailed = "queue_failed" // could not be put in the outbox: PuppetDB misses it
	PuppetDBDelivered   = "delivered"    // PuppetDB accepted it
	PuppetDBRetried     = "retried"      // PuppetDB could not be reached or was busy: tried again later
	PuppetDBRefused     = "refused"      // PuppetDB refused it (4xx) or it could not be made: dead-lettered
)

// OutboxStatser is the part of an outbox the backlog gauges read.
type OutboxStatser interface {
	Stats(ctx context.Context) (farm.OutboxStats, error)
}

// PuppetDB is the metrics of the PuppetDB sink. Its methods are safe on a
// nil *PuppetDB (no metrics).
type PuppetDB struct {
	commands *prometheus.CounterVec
	delivery prometheus.Histogram
}

// PuppetDB registers the PuppetDB sink's metrics: commands by kind and
// result, delivery times, and, read from outbox at each scrape (nil: none),
// the outbox's backlog, its oldest command's age and its dead letters.
func (m *Farm) PuppetDB(outbox OutboxStatser) *PuppetDB {
	p := &PuppetDB{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compilefarm_puppetdb_commands_total",
			Help: "PuppetDB commands, by command (replace_facts, replace_catalog, store_report) and result (queued, queue_failed, delivered, retried, refused).",
		}, []string{"command", "result"}),
		delivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "compilefarm_puppetdb_delivery_seconds",
			Help:    "Time from a PuppetDB command entering the outbox to PuppetDB accepting it.",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 30, 60, 300, 1800, 3600, 4 * 3600},
		}),
	}
	m.Registry.MustRegister(p.commands, p.delivery)
	if outbox != nil {
		m.Registry.MustRegister(&outboxCollector{o: outbox})
	}
	return p
}

// Command counts one command of kind ("replace facts", as PuppetDB names
// it; the label spells it replace_facts, as PuppetDB's URL does) with
// result.
func (p *PuppetDB) Command(kind, result string) {
	if p != nil {
		p.commands.WithLabelValues(commandLabel(kind), result).Inc()
	}
}

func commandLabel(kind string) string { return strings.ReplaceAll(kind, " ", "_") }

// Delivered counts a delivered command and how long it waited.
func (p *PuppetDB) Delivered(kind string, waited time.Duration) {
	if p != nil {
		p.commands.WithLabelValues(commandLabel(kind), PuppetDBDelivered).Inc()
		p.delivery.Observe(waited.Seconds())
	}
}

var (
	outboxBacklogDesc = prometheus.NewDesc("compilefarm_puppetdb_outbox_backlog",
		"PuppetDB commands not yet delivered (waiting, in flight or waiting to be retried).", nil, nil)
	outboxAgeDesc = prometheus.NewDesc("compilefarm_puppetdb_outbox_oldest_age_seconds",
		"Age of the oldest PuppetDB command not yet delivered (0 when none, or when the outbox cannot tell: SQS, see its CloudWatch ApproximateAgeOfOldestMessage).", nil, nil)
	outboxDeadDesc = prometheus.NewDesc("compilefarm_puppetdb_dead_letters",
		"PuppetDB commands set aside because PuppetDB refused them.", nil, nil)
)

type outboxCollector struct{ o OutboxStatser }

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxBacklogDesc
	ch <- outboxAgeDesc
	ch <- outboxDeadDesc
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.o.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(outboxBacklogDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(outboxBacklogDesc, prometheus.GaugeValue, float64(s.Backlog))
	ch <- prometheus.MustNewConstMetric(outboxAgeDesc, prometheus.GaugeValue, s.OldestAge.Seconds())
	ch <- prometheus.MustNewConstMetric(outboxDeadDesc, prometheus.GaugeValue, float64(s.DeadLetters))
}
