package main

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/latency"
)

// Result is one measured run (one phase at one client count).
type Result struct {
	Phase   string `json:"phase"` // "catalog" or "connections"
	Clients int    `json:"clients"`
	Nodes   int    `json:"nodes"`
	Facts   string `json:"facts,omitempty"` // catalog phase: "same" or "fresh"

	Requests   int64    `json:"requests"` // answered 200 (and verified, where sampled)
	Errors     int64    `json:"errors"`
	ErrorKinds []string `json:"error_kinds,omitempty"`
	Seconds    float64  `json:"seconds"`
	PerSecond  float64  `json:"per_second"` // requests (catalog) or new connections (connections) per second
	StoppedBy  string   `json:"stopped_by"` // "duration" or "max-requests"

	Latency latency.Summary `json:"latency_ms"`
	// Handshake is the TLS handshake part of Latency (connections phase).
	Handshake *latency.Summary `json:"handshake_ms,omitempty"`

	// Catalog phase: bytes of each response as sent (gzip) and decoded.
	WireBytes    float64 `json:"wire_bytes_per_response,omitempty"`
	DecodedBytes int64   `json:"decoded_bytes_per_response,omitempty"`
	Verified     int64   `json:"verified_responses,omitempty"`
	NewConns     int64   `json:"new_connections,omitempty"`
	TLSVersion   string  `json:"tls_version,omitempty"`
	LoadgenCPU   float64 `json:"loadgen_cpu_seconds"`
	// MachineCores is the whole machine's busy CPU during the run, in
	// cores; OtherCores what neither the broker nor loadgen used (other
	// processes, the broker's Ruby workers): noise when it is not ~0.
	MachineCores  float64 `json:"machine_busy_cores,omitempty"`
	OtherCores    float64 `json:"other_processes_cores,omitempty"`
	BrokerCPU     float64 `json:"broker_cpu_seconds,omitempty"`
	BrokerCPUUsec float64 `json:"broker_cpu_us_per_request,omitempty"`
	// Outcomes are the broker's catalog request outcomes and fact upload
	// results during the run (from /metrics, when --metrics is given).
	Outcomes map[string]float64 `json:"broker_counters,omitempty"`
}

// finish fills in what every measured run reports: its length, the
// requests that succeeded (their latencies lat), the rate, why it stopped
// and its kinds of errors.
func (res *Result) finish(elapsed time.Duration, lat []time.Duration, stoppedBy string, elog *errorLog) {
	res.Seconds = round(elapsed.Seconds(), 2)
	res.Requests = int64(len(lat))
	res.PerSecond = round(float64(len(lat))/elapsed.Seconds(), 1)
	res.StoppedBy = stoppedBy
	res.Latency = latency.Summarize(lat)
	res.ErrorKinds = elog.list()
}

// Report is everything one loadgen invocation measured.
type Report struct {
	Target      string    `json:"target"`
	Environment string    `json:"environment"`
	Started     time.Time `json:"started"`
	Command     string    `json:"command"`
	Key         string    `json:"key"`
	Nodes       int       `json:"nodes"`
	// Churn is the churn phase's result, when it ran.
	Churn *ChurnResult `json:"churn,omitempty"`
	// Corpus is the corpus phase's result, when it ran.
	Corpus    *CorpusResult `json:"corpus,omitempty"`
	EnrolSecs float64       `json:"enrol_seconds"`
	// Warm-up of the catalog phase: every node's first catalog.
	WarmupSecs      float64 `json:"warmup_seconds,omitempty"`
	CatalogBytes    int64   `json:"catalog_bytes,omitempty"`      // decoded JSON, one node
	CatalogGzip     int64   `json:"catalog_gzip_bytes,omitempty"` // as sent
	CatalogRes      int     `json:"catalog_resources,omitempty"`
	CompileMeanSecs float64 `json:"compile_mean_seconds,omitempty"` // broker's histogram, when --metrics
	Compiles        float64 `json:"compiles,omitempty"`
	// CompileMs: the warm-up compiles of these nodes, from the operator
	// API, in milliseconds (the first compile on each worker also loads the
	// environment; the median is a warm compile).
	CompileMs *latency.Summary `json:"compile_ms,omitempty"`
	Runs      []Result         `json:"runs"`
}

func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTSV writes one line per run for scripts.
func (r *Report) writeTSV(w io.Writer) error {
	for _, x := range r.Runs {
		facts := x.Facts
		if facts == "" {
			facts = "-"
		}
		if _, err := fmt.Fprintf(w, "%s\t%d\t%s\t%.1f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\n", x.Phase, x.Clients, facts,
			x.PerSecond, x.Latency.P50, x.Latency.P90, x.Latency.P99, x.Latency.Max, x.Errors); err != nil {
			return err
		}
	}
	return nil
}

// writeMarkdown writes one table per phase, a row per run, after a line
// on the catalog served.
func (r *Report) writeMarkdown(w io.Writer) {
	if c := r.Churn; c != nil {
		fmt.Fprintf(w, "| fact uploads | nodes | uploads changing a used fact | compiles | compiles per 1,000 uploads | seconds |\n|--:|--:|--:|--:|--:|--:|\n")
		fmt.Fprintf(w, "| %d | %d | %d (%.1f%%) | %.0f | **%.2f** | %.1f |\n", c.Uploads, r.Nodes, c.UsedChanges, c.UsedFraction*100, c.Compiles, c.PerThousand, c.Seconds)
	}
	if c := r.Corpus; c != nil {
		c.writeMarkdown(w, r.Nodes)
	}
	if r.CatalogBytes > 0 {
		fmt.Fprintf(w, "Catalog served: %d resources, %.0f KB of JSON, %.1f KB gzip on the wire (%s environment, %d nodes warmed up in %.1fs",
			r.CatalogRes, float64(r.CatalogBytes)/1000, float64(r.CatalogGzip)/1000, r.Environment, r.Nodes, r.WarmupSecs)
		if r.Compiles > 0 {
			fmt.Fprintf(w, "; %.0f compiles, mean %.2fs each as measured by the broker", r.Compiles, r.CompileMeanSecs)
		}
		if c := r.CompileMs; c != nil {
			fmt.Fprintf(w, "; compile time per node: median %.2fs, p90 %.2fs, max %.2fs", c.P50/1000, c.P90/1000, c.Max/1000)
		}
		fmt.Fprint(w, ").\n\n")
	}
	var cat, conn []Result
	for _, x := range r.Runs {
		if x.Phase == "catalog" {
			cat = append(cat, x)
		} else {
			conn = append(conn, x)
		}
	}
	cpu := func(x Result) string {
		if x.BrokerCPUUsec == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", x.BrokerCPUUsec)
	}
	other := func(x Result) string {
		if x.MachineCores == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", x.OtherCores)
	}
	if len(cat) > 0 {
		fmt.Fprintln(w, "| clients | nodes | facts | requests | req/s | p50 ms | p90 ms | p99 ms | max ms | bytes/resp (gzip) | errors | broker CPU µs/req | loadgen CPU s | other processes (cores) |")
		fmt.Fprintln(w, "|--:|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		for _, x := range cat {
			fmt.Fprintf(w, "| %d | %d | %s | %d | **%.0f** | %.2f | %.2f | %.2f | %.2f | %.0f | %d | %s | %.1f | %s |\n",
				x.Clients, x.Nodes, x.Facts, x.Requests, x.PerSecond, x.Latency.P50, x.Latency.P90, x.Latency.P99, x.Latency.Max,
				x.WireBytes, x.Errors, cpu(x), x.LoadgenCPU, other(x))
		}
	}
	if len(conn) > 0 {
		if len(cat) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "| clients | nodes | new connections | conn/s | p50 ms | p90 ms | p99 ms | max ms | handshake p50 / p99 ms | TLS | errors | broker CPU µs/conn | loadgen CPU s | other processes (cores) |")
		fmt.Fprintln(w, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|--:|--:|--:|--:|")
		for _, x := range conn {
			hs := "–"
			if x.Handshake != nil {
				hs = fmt.Sprintf("%.2f / %.2f", x.Handshake.P50, x.Handshake.P99)
			}
			fmt.Fprintf(w, "| %d | %d | %d | **%.0f** | %.2f | %.2f | %.2f | %.2f | %s | %s | %d | %s | %.1f | %s |\n",
				x.Clients, x.Nodes, x.Requests, x.PerSecond, x.Latency.P50, x.Latency.P90, x.Latency.P99, x.Latency.Max,
				hs, x.TLSVersion, x.Errors, cpu(x), x.LoadgenCPU, other(x))
		}
	}
}

// writeText is the human summary.
func (r *Report) writeText(w io.Writer) {
	fmt.Fprintf(w, "target %s, environment %s, %s keys\n", r.Target, r.Environment, r.Key)
	if c := r.Churn; c != nil {
		fmt.Fprintf(w, "churn: %d fact uploads (%d changed a fact the manifests read): %.0f compiles, %.2f per 1,000 uploads\n",
			c.Uploads, c.UsedChanges, c.Compiles, c.PerThousand)
	}
	if c := r.Corpus; c != nil {
		fmt.Fprintf(w, "corpus: %d check-ins (%d changed a used fact): %.0f compiles, %.2f per 1,000 (target %.2f), %.0f extra, %.0f failed; "+
			"baseline: %.0f compiles in %.1fs\n", c.Uploads, c.UsedChanges, c.Compiles, c.PerThousand, c.Target, c.Extra, c.Failed,
			c.BaselineCompiles.Total(), c.BaselineSeconds)
		for _, n := range c.BaselineFailed {
			fmt.Fprintf(w, "  FAILED first compile: %s\n", n)
		}
		for _, n := range c.Unexpected {
			fmt.Fprintf(w, "  unexpected: %s\n", n)
		}
	}
	if r.CatalogBytes > 0 {
		fmt.Fprintf(w, "catalog: %d resources, %d bytes JSON, %d bytes gzip; warm-up %.1fs", r.CatalogRes, r.CatalogBytes, r.CatalogGzip, r.WarmupSecs)
		if r.Compiles > 0 {
			fmt.Fprintf(w, "; %.0f compiles, mean %.2fs", r.Compiles, r.CompileMeanSecs)
		}
		if c := r.CompileMs; c != nil {
			fmt.Fprintf(w, " (median %.2fs, max %.2fs)", c.P50/1000, c.Max/1000)
		}
		fmt.Fprintln(w)
	}
	for _, x := range r.Runs {
		unit := "req/s"
		if x.Phase == "connections" {
			unit = "conn/s"
		}
		fmt.Fprintf(w, "%-11s clients=%-4d %8.0f %s  p50 %.2fms p90 %.2fms p99 %.2fms max %.2fms  n=%d errors=%d (%.1fs, stopped by %s)",
			x.Phase, x.Clients, x.PerSecond, unit, x.Latency.P50, x.Latency.P90, x.Latency.P99, x.Latency.Max,
			x.Requests, x.Errors, x.Seconds, x.StoppedBy)
		if x.WireBytes > 0 {
			fmt.Fprintf(w, "  %.0f B/resp", x.WireBytes)
		}
		if x.BrokerCPUUsec > 0 {
			fmt.Fprintf(w, "  broker %.0fµs CPU/req", x.BrokerCPUUsec)
		}
		if x.MachineCores > 0 {
			fmt.Fprintf(w, "  machine %.2f cores busy (others %.2f)", x.MachineCores, x.OtherCores)
		}
		fmt.Fprintln(w)
		if len(x.ErrorKinds) > 0 {
			fmt.Fprintf(w, "    errors: %s\n", strings.Join(x.ErrorKinds, "; "))
		}
	}
}

// errorLog keeps the first few distinct error messages of a run.
type errorLog struct {
	kinds map[string]int
}

// localAddr matches the ephemeral local address in network errors, so that
// one kind of error is counted once, not once per source port.
var localAddr = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+|\[[0-9a-f:]+\]):\d+->`)

func (e *errorLog) add(msg string) { e.addN(localAddr.ReplaceAllString(msg, ""), 1) }

func (e *errorLog) addN(msg string, n int) {
	if e.kinds == nil {
		e.kinds = map[string]int{}
	}
	if _, ok := e.kinds[msg]; ok || len(e.kinds) < 8 {
		e.kinds[msg] += n
	}
}

func (e *errorLog) merge(o *errorLog) {
	for k, n := range o.kinds {
		e.addN(k, n)
	}
}

func (e *errorLog) list() []string {
	var out []string
	for k, n := range e.kinds {
		out = append(out, fmt.Sprintf("%s (x%d)", k, n))
	}
	slices.Sort(out)
	return out
}

// writeMarkdown writes the corpus phase's table, a line on its baseline,
// and the nodes that compiled other than for their used-fact changes.
func (c *CorpusResult) writeMarkdown(w io.Writer, nodes int) {
	if f := c.BaselineCompiles.Failed + c.Failed; f > 0 {
		fmt.Fprintf(w, "**%.0f compiles FAILED: the corpus or the farm is broken, and these numbers measure nothing.**\n\n", f)
	}
	fmt.Fprintln(w, "| check-ins | nodes | used-fact changes | compiles | failed | extra compiles | compiles per 1,000 check-ins | target per 1,000 | seconds |")
	fmt.Fprintln(w, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	fmt.Fprintf(w, "| %d | %d | %d (%.1f%%) | %.0f | %.0f | %.0f | **%.2f** | %.2f | %.1f |\n", c.Uploads, nodes, c.UsedChanges,
		c.UsedFraction*100, c.Compiles, c.Failed, c.Extra, c.PerThousand, c.Target, c.Seconds)
	fmt.Fprintf(w, "\n%d nodes over the %d corpus nodes (%d roles); each check-in changes %.1f fact values on average. "+
		"Baseline (every node's first facts): %.0f compiles (%.0f unchanged, %.0f failed) in %.1fs: the first compiles, and "+
		"collectors compiled again as new nodes export their ssh host keys.\n", nodes, c.CorpusNodes, c.Roles, c.VolatilePerCheckIn,
		c.BaselineCompiles.Total(), c.BaselineCompiles.Unchanged, c.BaselineCompiles.Failed, c.BaselineSeconds)
	if len(c.BaselineFailed) > 0 {
		fmt.Fprintln(w, "\nFirst compiles that failed:")
		fmt.Fprintln(w)
		for _, n := range c.BaselineFailed {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	if len(c.Unexpected) > 0 {
		fmt.Fprintln(w, "\nNodes that did not compile once per used-fact change during the check-ins, or whose last compile failed, "+
			"with the farm's reason for their last compile (`broker explain NODE` tells more):")
		fmt.Fprintln(w)
		for _, n := range c.Unexpected {
			fmt.Fprintf(w, "- `%s`\n", n)
		}
	}
}
