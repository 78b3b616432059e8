// Package brokermetrics reads what the measuring tools (bench/loadgen,
// bench/agentsim) need from a broker's Prometheus /metrics: the
// compilefarm_* samples and the process CPU, how many compiles finished
// between two reads, and whether the compile queue has drained.
package brokermetrics

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Samples are one read of /metrics: sample (name with its labels, as
// exposed) → value.
type Samples map[string]float64

// Scrape reads the broker's Prometheus text exposition at metricsURL: only
// the compilefarm_* and process_cpu_seconds_total samples. An empty URL
// reads nothing (nil, nil).
func Scrape(ctx context.Context, metricsURL string) (Samples, error) {
	if metricsURL == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", metricsURL, resp.Status)
	}
	out := Samples{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "compilefarm_") && !strings.HasPrefix(line, "process_cpu_seconds_total") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	return out, nil
}

// CompileCounts are the broker's compile outcomes
// (compilefarm_compiles_total by result) between two scrapes.
type CompileCounts struct {
	OK        float64 `json:"ok"`
	Unchanged float64 `json:"unchanged"` // compiled again to the same catalog
	Failed    float64 `json:"failed"`
	Transient float64 `json:"transient,omitempty"` // failed, retried
	Stale     float64 `json:"stale,omitempty"`     // discarded: a newer compile won
}

// Total is the compiles that answered a request: ok, unchanged and failed.
func (c CompileCounts) Total() float64 { return c.OK + c.Unchanged + c.Failed }

// CompilesBetween counts the compiles that finished between two scrapes.
func CompilesBetween(before, after Samples) CompileCounts {
	d := func(r string) float64 {
		k := `compilefarm_compiles_total{result="` + r + `"}`
		return after[k] - before[k]
	}
	return CompileCounts{OK: d("ok"), Unchanged: d("unchanged"), Failed: d("failed"), Transient: d("transient"), Stale: d("stale")}
}

// CounterDeltas returns the counters of catalog request outcomes, fact
// uploads and compiles that moved between two scrapes, by sample name
// without the compilefarm_ prefix (catalog_requests_total{outcome="fresh"}).
// Either scrape missing gives nil.
func CounterDeltas(before, after Samples) map[string]float64 {
	if before == nil || after == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range after {
		if !strings.HasPrefix(k, "compilefarm_catalog_requests_total") && !strings.HasPrefix(k, "compilefarm_fact_uploads_total") &&
			!strings.HasPrefix(k, "compilefarm_compiles_total") {
			continue
		}
		if d := v - before[k]; d != 0 {
			out[strings.TrimPrefix(k, "compilefarm_")] = d
		}
	}
	return out
}

// QueueBusy is the compile jobs queued or running, both lanes.
func (s Samples) QueueBusy() float64 {
	busy := 0.0
	for _, lane := range []string{"urgent", "bulk"} {
		busy += s[`compilefarm_queue_depth{lane="`+lane+`"}`] + s[`compilefarm_queue_in_flight{lane="`+lane+`"}`]
	}
	return busy
}

// WaitDrained waits until the broker's compile queue is empty, at most 10
// minutes.
func WaitDrained(ctx context.Context, metricsURL string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		m, err := Scrape(ctx, metricsURL)
		if err != nil {
			return err
		}
		busy := m.QueueBusy()
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the compile queue did not drain in 10 minutes (%v jobs left)", busy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
