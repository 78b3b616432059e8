package main

import (
	"context"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
	"github.com/compilefarm/compilefarm/bench/internal/latency"
	"github.com/compilefarm/compilefarm/bench/internal/procstat"
)

// Round is what one round of runs measured: a herd, a steady period, or
// the warm-up.
type Round struct {
	Name               string  `json:"name"` // "warm-up", "herd", "herd 2", "steady"
	Agents             int     `json:"agents"`
	WindowSeconds      float64 `json:"window_seconds,omitempty"`   // herd: the runs' start times spread over it
	DurationSeconds    float64 `json:"duration_seconds,omitempty"` // steady: runs start within it
	RunintervalSeconds float64 `json:"runinterval_seconds"`
	SplaySeconds       float64 `json:"splay_seconds,omitempty"`
	Concurrency        int     `json:"concurrency"`

	Runs        int64    `json:"runs"`
	Failed      int64    `json:"failed_runs"`
	Interrupted int64    `json:"interrupted_runs,omitempty"` // cut short by Ctrl-C or --timeout; not counted in runs
	Errors      []string `json:"errors,omitempty"`           // the first failed runs' first errors
	// RunSeconds is from the first run's start to the last one's end.
	RunSeconds    float64 `json:"run_seconds"`
	RunsPerSecond float64 `json:"runs_per_second"`
	// DrainSeconds is how long the broker's compile queue took to drain
	// after the last run (the compiles the round caused are counted after it).
	DrainSeconds       float64                 `json:"drain_seconds,omitempty"`
	MaxStartLagSeconds float64                 `json:"max_start_lag_seconds"` // how late a run started for want of a --concurrency slot
	Requests           map[string]RequestStats `json:"requests"`
	Run                latency.Summary         `json:"run_latency_ms"`
	Retries            Retries                 `json:"retries"`
	ConnectionsPerRun  float64                 `json:"tls_connections_per_run"`

	CatalogRequests     int64 `json:"catalog_requests"` // sent, retries included
	CatalogRequestBytes int64 `json:"catalog_request_bytes"`
	CatalogWireBytes    int64 `json:"catalog_wire_bytes,omitempty"`
	CatalogJSONBytes    int64 `json:"catalog_json_bytes,omitempty"`
	ReportBytes         int64 `json:"report_bytes,omitempty"`

	// From the broker's /metrics (--metrics): compiles that finished during
	// the round and its drain, and the counters that moved.
	Compiles *brokermetrics.CompileCounts `json:"compiles,omitempty"`
	Counters map[string]float64           `json:"broker_counters,omitempty"`
	Broker   *BrokerUsage                 `json:"broker,omitempty"`
	// SimCPUSeconds is agentsim's own CPU: it shares the machine with the broker.
	SimCPUSeconds float64 `json:"agentsim_cpu_seconds"`
}

// Retries are the 429/503 answers retried after their Retry-After.
type Retries struct {
	Status503    int64   `json:"503"`
	Status429    int64   `json:"429"`
	Runs         int64   `json:"runs"` // runs with at least one retry
	SleepSeconds float64 `json:"sleep_seconds"`
}

// BrokerUsage is the broker's CPU, memory and descriptors over a round.
type BrokerUsage struct {
	CPUSource              string   `json:"cpu_source"` // "proc" (--broker-pid) or "metrics" (process_cpu_seconds_total)
	CPUSeconds             float64  `json:"cpu_seconds"`
	CPUPerRunMs            float64  `json:"cpu_ms_per_run"`
	CPUPerCatalogRequestMs float64  `json:"cpu_ms_per_catalog_request"`
	WorkersCPUSeconds      *float64 `json:"workers_cpu_seconds,omitempty"` // its child processes: the Ruby compile workers
	RSSMB                  *Triple  `json:"rss_mb,omitempty"`
	FDs                    *Triple  `json:"open_fds,omitempty"`
}

// Triple is a gauge before, at its peak during, and after a round
// (sampled every second).
type Triple struct {
	Before float64 `json:"before"`
	Peak   float64 `json:"peak"`
	After  float64 `json:"after"`
}

// monitor is what a round is measured with.
type monitor struct {
	metricsURL string
	brokerPID  int
	progress   func(string)
	every      time.Duration // progress lines
}

// measure runs fn as round r and fills in r: the runs' numbers, the
// broker's compiles and counters (after its queue drained), its CPU, RSS
// and descriptors, agentsim's CPU. expected is the runs fn will make (0
// when unknown), for progress lines.
func (m *monitor) measure(ctx context.Context, r *Round, expected int, fn func(rs *roundStats)) {
	rs := &roundStats{}
	before, err := brokermetrics.Scrape(ctx, m.metricsURL)
	if err != nil {
		m.progress(fmt.Sprintf("%s: %v", r.Name, err))
	}
	var b0 brokerSample
	pidOK := m.brokerPID > 0
	if pidOK {
		if b0, err = sampleBroker(m.brokerPID, true); err != nil {
			m.progress(err.Error())
			pidOK = false
		}
	}
	self0, _ := procstat.ReadStat(0)
	rss := Triple{Before: float64(b0.rss), Peak: float64(b0.rss)}
	fds := Triple{Before: float64(b0.fds), Peak: float64(b0.fds)}

	stop := make(chan struct{})
	sampled := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		lastLine := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var bs brokerSample
			if pidOK {
				if s, err := sampleBroker(m.brokerPID, false); err == nil {
					bs = s
					rss.Peak, fds.Peak = max(rss.Peak, float64(s.rss)), max(fds.Peak, float64(s.fds))
				}
			}
			if time.Since(lastLine) >= m.every {
				lastLine = time.Now()
				m.progress(progressLine(r.Name, rs, expected, time.Since(start), pidOK, bs))
			}
		}
	}()

	fn(rs)
	ran := time.Now()
	if m.metricsURL != "" && ctx.Err() == nil {
		if err := brokermetrics.WaitDrained(ctx, m.metricsURL); err != nil {
			m.progress(fmt.Sprintf("%s: %v", r.Name, err))
		}
		r.DrainSeconds = round2(time.Since(ran).Seconds())
	}
	close(stop)
	<-sampled
	rs.fill(r)
	self1, _ := procstat.ReadStat(0)
	r.SimCPUSeconds = round2(self1.CPU - self0.CPU)

	after, err := brokermetrics.Scrape(context.WithoutCancel(ctx), m.metricsURL)
	if err != nil {
		m.progress(fmt.Sprintf("%s: %v", r.Name, err))
	}
	if before != nil && after != nil {
		c := brokermetrics.CompilesBetween(before, after)
		r.Compiles = &c
		r.Counters = brokermetrics.CounterDeltas(before, after)
	}
	u := &BrokerUsage{}
	switch {
	case pidOK:
		b1, err := sampleBroker(m.brokerPID, true)
		if err != nil {
			m.progress(err.Error())
			break
		}
		u.CPUSource, u.CPUSeconds = "proc", b1.cpu-b0.cpu
		w := round2(b1.workersCPU - b0.workersCPU)
		u.WorkersCPUSeconds = &w
		rss.After, fds.After = float64(b1.rss), float64(b1.fds)
		rss.Peak, fds.Peak = max(rss.Peak, rss.After), max(fds.Peak, fds.After)
		const mb = 1 << 20
		u.RSSMB = &Triple{Before: round2(rss.Before / mb), Peak: round2(rss.Peak / mb), After: round2(rss.After / mb)}
		u.FDs = &fds
	case before != nil && after != nil && after["process_cpu_seconds_total"] > 0:
		u.CPUSource, u.CPUSeconds = "metrics", after["process_cpu_seconds_total"]-before["process_cpu_seconds_total"]
	}
	if u.CPUSource != "" {
		if r.Runs > 0 {
			u.CPUPerRunMs = round2(u.CPUSeconds * 1000 / float64(r.Runs))
		}
		if r.CatalogRequests > 0 {
			u.CPUPerCatalogRequestMs = round2(u.CPUSeconds * 1000 / float64(r.CatalogRequests))
		}
		u.CPUSeconds = round2(u.CPUSeconds)
		r.Broker = u
	}
}

// progressLine says how a round is going.
func progressLine(name string, rs *roundStats, expected int, elapsed time.Duration, pidOK bool, bs brokerSample) string {
	done := rs.done.Load()
	s := fmt.Sprintf("%s: %d", name, done)
	if expected > 0 {
		s += fmt.Sprintf("/%d", expected)
	}
	rs.mu.Lock()
	failed := rs.failed
	rs.mu.Unlock()
	s += fmt.Sprintf(" runs done (%d failed), %d running, %d retries, %.0fs", failed, rs.running.Load(), rs.retries.Load(), elapsed.Seconds())
	if pidOK {
		s += fmt.Sprintf("; broker RSS %.0f MB, %d fds", float64(bs.rss)/(1<<20), bs.fds)
	}
	return s
}
