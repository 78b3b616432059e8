package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// Results are everything one agentsim invocation measured.
type Results struct {
	Command     string    `json:"command"`
	Target      string    `json:"target"`
	Environment string    `json:"environment"`
	Started     time.Time `json:"started"`
	Agents      int       `json:"agents"`
	Key         string    `json:"key"`
	// How the agents behave (see the flags of the same names).
	NodeRequest  string `json:"node_request"`
	Locales      bool   `json:"locales"`
	FileMetadata string `json:"file_metadata"`
	Enrol        Enrol  `json:"enrol"`
	// FirstRun is the number of the agents' first run here, for the facts
	// they send (corpus.Churn): 0, or where the last invocation with the
	// same --state left off.
	FirstRun int     `json:"first_run_number"`
	Rounds   []Round `json:"rounds"`
}

// Enrol is how the agents got their certificates.
type Enrol struct {
	Seconds float64 `json:"seconds"`
	New     int64   `json:"new"`    // enrolled against the CA now
	Reused  int64   `json:"reused"` // from --state
}

// failures counts the failed runs of all rounds.
func (r *Results) failures() int64 {
	var n int64
	for _, rd := range r.Rounds {
		n += rd.Failed
	}
	return n
}

func (r *Results) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTo writes with fn to path ("-" for stdout); nothing for "".
func writeTo(path string, fn func(io.Writer) error) error {
	if path == "" {
		return nil
	}
	if path == "-" {
		return fn(os.Stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// requestRows are the rows of a round's latency table: each request kind,
// then whole runs.
func (rd *Round) requestRows() [][]string {
	var rows [][]string
	for k := range numKinds {
		q := rd.Requests[k.String()]
		if q.Count == 0 {
			rows = append(rows, []string{k.String(), "0", "0", "-", "-", "-"})
			continue
		}
		rows = append(rows, []string{k.String(), fmt.Sprint(q.Count), fmt.Sprint(q.Failed),
			ms(q.Latency.P50), ms(q.Latency.P99), ms(q.Latency.Max)})
	}
	return append(rows, []string{"whole run", fmt.Sprint(rd.Runs), fmt.Sprint(rd.Failed), ms(rd.Run.P50), ms(rd.Run.P99), ms(rd.Run.Max)})
}

func ms(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// describe is a round's header line: what ran and how fast.
func (rd *Round) describe() string {
	var what string
	switch {
	case rd.DurationSeconds > 0:
		what = fmt.Sprintf("%d agents for %s, runinterval %s, splay %s", rd.Agents, secs(rd.DurationSeconds),
			secs(rd.RunintervalSeconds), secs(rd.SplaySeconds))
	default:
		what = fmt.Sprintf("%d agents within %s", rd.Agents, secs(rd.WindowSeconds))
	}
	return fmt.Sprintf("%s (%s, concurrency %d): %d runs in %.1fs, %.1f runs/s, %d failed", rd.Name, what,
		rd.Concurrency, rd.Runs, rd.RunSeconds, rd.RunsPerSecond, rd.Failed)
}

func secs(s float64) string { return (time.Duration(s * float64(time.Second))).String() }

// brokerLines describe the broker's side of a round.
func (rd *Round) brokerLines() []string {
	var out []string
	if c := rd.Compiles; c != nil {
		out = append(out, fmt.Sprintf("compiles: %.0f (ok %.0f, unchanged %.0f, failed %.0f)%s", c.Total(), c.OK, c.Unchanged, c.Failed,
			map[bool]string{true: fmt.Sprintf("; queue drained in %.1fs", rd.DrainSeconds), false: ""}[rd.DrainSeconds > 0.5]))
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(rd.Counters)) {
			if !strings.HasPrefix(k, "compiles_total") {
				kv = append(kv, fmt.Sprintf("%s %.0f", k, rd.Counters[k]))
			}
		}
		if len(kv) > 0 {
			out = append(out, "broker counters: "+strings.Join(kv, ", "))
		}
	}
	if u := rd.Broker; u != nil {
		line := fmt.Sprintf("broker CPU (%s): %.2fs, %.2f ms per run, %.2f ms per catalog request", u.CPUSource, u.CPUSeconds,
			u.CPUPerRunMs, u.CPUPerCatalogRequestMs)
		if u.WorkersCPUSeconds != nil {
			line += fmt.Sprintf("; compile workers %.2fs", *u.WorkersCPUSeconds)
		}
		out = append(out, line)
		if u.RSSMB != nil {
			out = append(out, fmt.Sprintf("broker RSS %.0f → peak %.0f → %.0f MB; open fds %.0f → peak %.0f → %.0f",
				u.RSSMB.Before, u.RSSMB.Peak, u.RSSMB.After, u.FDs.Before, u.FDs.Peak, u.FDs.After))
		}
	}
	return out
}

// writeText writes the human summary: per round, its header, the latency
// table, retries, sizes and the broker's side.
func (r *Results) writeText(w io.Writer) {
	fmt.Fprintf(w, "agentsim: %d agents at %s, environment %s; enrolled in %.1fs (%d new, %d from --state); first run number %d\n",
		r.Agents, r.Target, r.Environment, r.Enrol.Seconds, r.Enrol.New, r.Enrol.Reused, r.FirstRun)
	for i := range r.Rounds {
		rd := &r.Rounds[i]
		fmt.Fprintf(w, "\n%s\n", rd.describe())
		fmt.Fprintf(w, "  %-15s %8s %7s %10s %10s %10s\n", "request", "count", "failed", "p50 ms", "p99 ms", "max ms")
		for _, row := range rd.requestRows() {
			fmt.Fprintf(w, "  %-15s %8s %7s %10s %10s %10s\n", row[0], row[1], row[2], row[3], row[4], row[5])
		}
		fmt.Fprintf(w, "  retries after Retry-After: %d (503: %d, 429: %d) in %d runs, %.1fs asleep (not failures)\n",
			rd.Retries.Status503+rd.Retries.Status429, rd.Retries.Status503, rd.Retries.Status429, rd.Retries.Runs, rd.Retries.SleepSeconds)
		fmt.Fprintf(w, "  per run: %.2f TLS connections; catalog request %d B, catalog %d B on the wire (%d B JSON), report %d B; latest start %.1fs late\n",
			rd.ConnectionsPerRun, rd.CatalogRequestBytes, rd.CatalogWireBytes, rd.CatalogJSONBytes, rd.ReportBytes, rd.MaxStartLagSeconds)
		for _, l := range rd.brokerLines() {
			fmt.Fprintf(w, "  %s\n", l)
		}
		fmt.Fprintf(w, "  agentsim CPU: %.2fs (same machine)\n", rd.SimCPUSeconds)
		for _, e := range rd.Errors {
			fmt.Fprintf(w, "  error: %s\n", e)
		}
	}
}

// writeMarkdown writes the rounds as Markdown tables for docs: one row per
// round, then each round's latencies.
func (r *Results) writeMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "Agents: %d at `%s`, environment `%s` (node request: %s, file metadata: %s, locales: %v, first run number: %d).\n\n",
		r.Agents, r.Target, r.Environment, r.NodeRequest, r.FileMetadata, r.Locales, r.FirstRun)
	fmt.Fprintln(w, "| round | runs | runs/s | failed | retries (503/429) | compiles | broker CPU per run | per catalog request | workers CPU | broker RSS before → peak → after | fds peak | agentsim CPU |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
	for i := range r.Rounds {
		rd := &r.Rounds[i]
		compiles, cpuRun, cpuCat, workers, rss, fds := "-", "-", "-", "-", "-", "-"
		if rd.Compiles != nil {
			compiles = fmt.Sprintf("%.0f", rd.Compiles.Total())
		}
		if u := rd.Broker; u != nil {
			cpuRun, cpuCat = fmt.Sprintf("%.2f ms", u.CPUPerRunMs), fmt.Sprintf("%.2f ms", u.CPUPerCatalogRequestMs)
			if u.WorkersCPUSeconds != nil {
				workers = fmt.Sprintf("%.1f s", *u.WorkersCPUSeconds)
			}
			if u.RSSMB != nil {
				rss = fmt.Sprintf("%.0f → %.0f → %.0f MB", u.RSSMB.Before, u.RSSMB.Peak, u.RSSMB.After)
				fds = fmt.Sprintf("%.0f", u.FDs.Peak)
			}
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %d | %d/%d | %s | %s | %s | %s | %s | %s | %.1f s |\n", rd.describeShort(), rd.Runs, rd.RunsPerSecond,
			rd.Failed, rd.Retries.Status503, rd.Retries.Status429, compiles, cpuRun, cpuCat, workers, rss, fds, rd.SimCPUSeconds)
	}
	for i := range r.Rounds {
		rd := &r.Rounds[i]
		fmt.Fprintf(w, "\n%s: latency (ms; a request's includes its retries)\n\n", rd.describeShort())
		fmt.Fprintln(w, "| request | count | failed | p50 | p99 | max |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
		for _, row := range rd.requestRows() {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
	return nil
}

// describeShort names a round for a table.
func (rd *Round) describeShort() string {
	if rd.DurationSeconds > 0 {
		return fmt.Sprintf("%s (%d agents, %s, runinterval %s)", rd.Name, rd.Agents, secs(rd.DurationSeconds), secs(rd.RunintervalSeconds))
	}
	return fmt.Sprintf("%s (%d agents within %s)", rd.Name, rd.Agents, secs(rd.WindowSeconds))
}
