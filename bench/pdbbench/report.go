package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/latency"
	"github.com/compilefarm/compilefarm/bench/internal/numfmt"
	"github.com/compilefarm/compilefarm/bench/internal/textwrap"
	"github.com/compilefarm/compilefarm/pkg/querywatch"
)

// Results are everything one run measured; a phase that did not run or
// failed early is nil or empty, and its error is in Errors.
type Results struct {
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	PuppetDB struct {
		Version string `json:"version"`
		Nodes   int    `json:"active_nodes"` // at the end, this run's included
	} `json:"puppetdb"`
	Broker      string        `json:"broker"`
	Refresh     []RefreshSize `json:"refresh,omitempty"`
	FactChanges []FactChange  `json:"fact_changes,omitempty"`
	Steady      *Steady       `json:"steady,omitempty"`
	Backlog     *Backlog      `json:"backlog,omitempty"`
	Errors      []string      `json:"errors,omitempty"`
}

// Machine is where the run ran.
type Machine struct {
	CPU        string  `json:"cpu"`
	CPUs       int     `json:"cpus"`
	MemGiB     float64 `json:"mem_gib"`
	Kernel     string  `json:"kernel"`
	Go         string  `json:"go"`
	LoadBefore string  `json:"load_before"`
	LoadAfter  string  `json:"load_after"`
	// PhaseLoad is the load average as each phase started.
	PhaseLoad []PhaseLoad `json:"phase_load,omitempty"`
}

// PhaseLoad is the load average (1, 5, 15 minutes) as a phase started.
type PhaseLoad struct {
	Phase string `json:"phase"`
	Load  string `json:"load"`
}

func (r *Results) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// commandNames are the commands as PuppetDB names them, by metric label.
var commandNames = map[string]string{"store_report": "store report", "replace_facts": "replace facts", "replace_catalog": "replace catalog"}

// writeMarkdown writes the run as docs/benchmarks.md's section on
// PuppetDB.
func (r *Results) writeMarkdown(w io.Writer) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	para := func(format string, a ...any) { p("%s", textwrap.Wrap(fmt.Sprintf(format, a...), 100)); p("") }
	p("## PuppetDB: commands, delivery, queries")
	p("")
	report := ""
	if s := r.Steady; s != nil && s.ReportBytes > 0 {
		report = fmt.Sprintf(", %s KB catalogs, %s KB reports", numfmt.Float(float64(s.CatalogJSON)/1000, 0), numfmt.Float(float64(s.ReportBytes)/1000, 0))
	}
	para("What feeding PuppetDB and keeping `puppetdb_query()` answers fresh cost the farm (issue 22), measured by "+
		"`bench/pdbbench` against a real PuppetDB %s on loopback (PostgreSQL 15; %s active nodes at the end, this run's "+
		"included). One `broker dev --puppetdb` (`--puppetdb-query-refresh 1h`, so that every refresh round here is one "+
		"a delivered command started; the other settings are the defaults) reaches PuppetDB over mutual TLS through a "+
		"gate in pdbbench, which can hold the farm's requests: it is PuppetDB's https port as the farm sees it (PuppetDB's "+
		"own certificate, client certificates checked against its CA) and forwards to PuppetDB's plain-http port. Every node compiles the herd environment (the "+
		"benchmark profile with bench/herd's counts: 84 resources%s) with bench/pdbbench/site.pp, whose nodes with "+
		"pdbbench's facts ask PuppetDB. Agent runs are bench/agentsim's: a new mTLS connection, pluginsync, the "+
		"catalog request with the recorded agent's facts, a report of the catalog's resources.",
		r.PuppetDB.Version, numfmt.Int(int64(r.PuppetDB.Nodes)), report)
	if len(r.Errors) > 0 {
		para("**Failed in this run:** %s. The tables show what was measured before.", strings.Join(r.Errors, "; "))
	}
	r.writeSteady(p, para)
	r.writeBacklog(p, para)
	r.writeFactChanges(p, para)
	r.writeRefresh(p, para)
	p("### How to read this")
	p("")
	p("%s", textwrap.Wrap("- Commands are counted when the sink puts them in the outbox (`queued`) and when PuppetDB "+
		"accepts them (`delivered`: `/pdb/cmd/v1` answered; PuppetDB stores a command later, from its own queue). "+
		"A steady run should cost one store report and nothing else; unchanged facts still go once a day per node, "+
		"at the check-ins in its one-hour slot (about 2 of a day's 48 runs at a 30-minute runinterval, the same "+
		"share as measured here). A change of any fact outside the volatile ones (uptime, memory, load) is "+
		"stored and sent at once, whether or not a catalog of the node reads it; volatile facts alone are "+
		"sent only in that daily slot.", 100))
	p("%s", textwrap.Wrap(fmt.Sprintf("- Every delivered replace facts or replace catalog (not a store report) asks the refresher "+
		"for a round %s later (one round per burst): while facts change, a round follows every ~%s and runs "+
		"every distinct recorded query once. The refresh's load on PuppetDB is then about (distinct queries × "+
		"a query's time) per round, not per --puppetdb-query-refresh: the last table gives both factors.",
		querywatch.DefaultDebounce, querywatch.DefaultDebounce), 100))
	p("%s", textwrap.Wrap("- A fact change reaches the nodes that query it after: the upload and the outbox (milliseconds), "+
		"the refresher's debounce (10 s, from the first delivery of a burst), the round's queries until the "+
		"changed one, the compile queue and one compile. The next agent run of the dependent node then gets "+
		"the new catalog.", 100))
	p("")
	m := r.Machine
	var loads []string
	for _, l := range m.PhaseLoad {
		loads = append(loads, l.Phase+" "+l.Load)
	}
	para("Machine: %s, %d CPUs, %.1f GiB; %s; %s; load average %s before the run, %s after; at the start of each "+
		"phase: %s (PuppetDB, PostgreSQL, the broker, its Ruby workers and agentsim share these CPUs, and other "+
		"processes took what the load shows).", m.CPU, m.CPUs, m.MemGiB, m.Kernel, m.Go, m.LoadBefore, m.LoadAfter, strings.Join(loads, "; "))
	p("```")
	p("go build -o bin/broker ./broker && go build -o agentsim ./bench/agentsim   # make bench: bench/run.sh")
	p("%s", r.Command)
	p("```")
	return nil
}

type printer func(format string, a ...any)

func (r *Results) writeSteady(p, para printer) {
	s := r.Steady
	p("### Commands per 1,000 steady agent runs")
	p("")
	if s == nil || s.Queued == nil {
		p("Not measured in this run.")
		p("")
		return
	}
	compiles := numfmt.Float(s.Compiles, 0) + " compiles"
	if s.Compiles > 0 {
		compiles += fmt.Sprintf(": %s queued by refresh rounds that found a query answered otherwise, %s ending with "+
			"the catalog the node had", numfmt.Float(s.QueryQueued, 0), numfmt.Float(s.Unchanged, 0))
	}
	para("%d agents ran once (their first compiles, facts and catalogs: %s), then %d herds of them, each herd's "+
		"runs starting within %s: %s runs (%d failed), the same facts but for what facter measures anew at every "+
		"run, the same catalogs (%s). The commands those runs put in the outbox, from the broker's "+
		"`compilefarm_puppetdb_commands_total{result=\"queued\"}`, per 1,000 runs:",
		s.Agents, secs(s.Warmup), s.Rounds, secs(s.Window), numfmt.Int(s.Runs), s.Failed, compiles)
	p("| command | per 1,000 runs | expected |")
	p("|:--|--:|:--|")
	p("| store report | %s | 1,000: one per run |", numfmt.Float(s.Per1000(s.Queued["store_report"]), 1))
	p("| replace facts | %s | %s: the runs whose node was in its daily slot (`farm.InSlot`, 24 h, 1-hour slot) |",
		numfmt.Float(s.Per1000(s.Queued["replace_facts"]), 1), numfmt.Float(s.Per1000(s.InSlot), 1))
	p("| replace catalog | %s | 0: no catalog changed |", numfmt.Float(s.Per1000(s.Queued["replace_catalog"]), 1))
	p("")
	para("Their deliveries started %s refresh rounds, during the runs' %s and just after, which ran %s PuppetDB "+
		"queries (%s distinct queries recorded): %s queries per 1,000 runs.", numfmt.Float(s.RefreshRounds, 0), secs(s.Seconds),
		numfmt.Float(s.QueryRuns, 0), numfmt.Float(s.Recorded, 0), numfmt.Float(s.Per1000(s.QueryRuns), 0))
}

func (r *Results) writeBacklog(p, para printer) {
	b := r.Backlog
	p("### Delivering a backlog")
	p("")
	if b == nil || b.Delivered == nil {
		p("Not measured in this run.")
		p("")
		return
	}
	var kinds []string
	for _, k := range commandKinds {
		if b.Delivered[k] > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %s", numfmt.Float(b.Delivered[k], 0), commandNames[k]))
		}
	}
	para("The gate held the farm's requests to PuppetDB (TLS handshakes still completed) while the agents made %s "+
		"more runs (%s): the drainer's first deliveries waited at the gate, the other commands in the outbox. Then the "+
		"gate let everything through. Timed: from the release until the outbox's backlog "+
		"(`compilefarm_puppetdb_outbox_backlog`, read every 100 ms) was 0, and until PuppetDB answered every report "+
		"of the agents (a count query every 250 ms). The drainer delivers a batch of at most 10 commands at a time, "+
		"8 nodes at once, and receives the next batch when the batch is done. (A request held on a connection "+
		"PuppetDB closed as idle meanwhile fails and is retried a second later, within the hold: the retries "+
		"below.)", numfmt.Int(b.Runs), secs(b.HeldSeconds))
	p("| | |")
	p("|:--|--:|")
	p("| commands in the outbox at the release | %s |", numfmt.Float(b.Commands, 0))
	p("| delivered (PuppetDB accepted them) | %s in %s |", strings.Join(kinds, ", "), secs(b.DeliverSeconds))
	p("| **commands delivered per second** | **%s** |", numfmt.Float(b.PerSecond(), 0))
	if b.Answers.P50 > 0 {
		p("| PuppetDB's answer to a request, at the gate: p50 / p90 / max | %.0f / %.0f / %.0f ms |", b.Answers.P50, b.Answers.P90, b.Answers.Max)
	}
	if n := sum(b.Delivered); n > 0 {
		p("| broker CPU per command delivered (reading the outbox, building the command, TLS) | %s ms |", numfmt.Float(1000*b.BrokerCPU/n, 2))
	}
	p("| retried (since the hold) / refused | %s / %s |", numfmt.Float(b.Retried, 0), numfmt.Float(b.Refused, 0))
	if b.StoredSeconds > 0 {
		p("| PuppetDB holds all %s reports of the agents, after the release | %s (%s reports stored per second) |",
			numfmt.Int(int64(b.Reports)), secs(b.StoredSeconds), numfmt.Float(b.Delivered["store_report"]/b.StoredSeconds, 0))
	}
	if b.PuppetDBProcessed > 0 {
		p("| PuppetDB's own processing of a command (its `global.processing-time`, recent commands): p50 / mean | %.1f / %.1f ms |",
			b.PuppetDBProcessingP50, b.PuppetDBProcessingMean)
	}
	p("| refresh rounds that finished meanwhile | %s |", numfmt.Float(b.RefreshRounds, 0))
	p("")
}

func (r *Results) writeFactChanges(p, para printer) {
	p("### A fact change to the dependent node's recompile")
	p("")
	if len(r.FactChanges) == 0 {
		p("Not measured in this run.")
		p("")
		return
	}
	para("Node A's fact `pdbbench_value` changes (`PUT /puppet/v3/facts`, as `puppet facts upload`; A's own catalog " +
		"reads it too, as a node's role or address usually is); node B's catalog holds the value PuppetDB has for it (`puppetdb_query(\"facts[value] { certname = 'A' and name = " +
		"'pdbbench_value' }\")`). Each row is one change on a quiet farm, in seconds from the start of A's upload: " +
		"when the upload was answered (its replace facts in the outbox), PuppetDB accepted the command (the outbox's " +
		"wait, `compilefarm_puppetdb_delivery_seconds`), PuppetDB answered the new value (polled every 50 ms), the " +
		"refresh round queued B's recompile (the request's time in `broker explain`), B's compile started and " +
		"B's new catalog was stored (the node record's compile time and duration). The round's own time and " +
		"queries are the last columns.")
	p("| change | upload answered | delivered | in PuppetDB | B queued | B's compile started | **B compiled** | round | queries in the round |")
	p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	var totals, queued []time.Duration
	for i, fc := range r.FactChanges {
		p("| %d | %.3f | %.3f | %.2f | %.2f | %.2f | **%.2f** | %.3f | %s |", i+1, fc.Upload, fc.Delivered, fc.InPuppetDB,
			fc.Queued, fc.CompileFrom, fc.Compiled, fc.Round, numfmt.Float(fc.RoundRuns, 0))
		totals = append(totals, dur(fc.Compiled))
		queued = append(queued, dur(fc.Queued-fc.Delivered))
	}
	p("")
	t, q := latency.Summarize(totals), latency.Summarize(queued)
	var compile []time.Duration
	for _, fc := range r.FactChanges {
		compile = append(compile, dur(fc.Compiled-fc.CompileFrom))
	}
	c := latency.Summarize(compile)
	para("Fact change to B's new catalog: median %s, max %s over %d changes. Of it, from PuppetDB accepting the "+
		"command to B's recompile queued: median %s (the refresher's %s debounce, then the round until B's query); "+
		"B's compile: median %s.", secs(t.P50/1000), secs(t.Max/1000), len(totals), secs(q.P50/1000),
		querywatch.DefaultDebounce, secs(c.P50/1000))
}

func (r *Results) writeRefresh(p, para printer) {
	p("### The query refresh's cost")
	p("")
	if len(r.Refresh) == 0 {
		p("Not measured in this run.")
		p("")
		return
	}
	nodes := 0
	if len(r.Refresh) > 0 && r.Refresh[0].Queries > 0 {
		nodes = r.Refresh[0].Nodes / r.Refresh[0].Queries
	}
	para("Nodes in groups, %d per group, each listing its group's members "+
		"(`puppetdb_query(\"inventory[certname] { facts.pdbbench_group = 'G' }\")`): one distinct query per group, "+
		"however many nodes make it. After their first compiles, rounds ran until one found every answer as its "+
		"compiles recorded it (*rounds to settle*: a node compiled before its group's other members reached PuppetDB "+
		"is recompiled); then each timed round was started by a delivered command "+
		"no recorded answer depends on (node A's replace facts: its tick fact changed) and timed by the broker "+
		"(`compilefarm_puppetdb_query_refresh_seconds`: listing the recorded queries, taking each up, asking "+
		"PuppetDB, comparing the answer's digest). *PuppetDB alone*: pdbbench asked PuppetDB the same distinct "+
		"queries itself, one after the other, over plain http.", nodes)
	p("| distinct queries | nodes making them | queries recorded | rounds to settle | round, each measured | queries run per round | per query (round ÷ queries) | PuppetDB alone: per query p50 / p90 / max | PuppetDB alone: all |")
	p("|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range r.Refresh {
		var rounds []string
		var runs, per []float64
		for _, rd := range s.Rounds {
			rounds = append(rounds, fmt.Sprintf("%.3f", rd.Seconds))
			runs = append(runs, rd.Runs)
			per = append(per, rd.PerQueryMs())
		}
		p("| %s | %s | %s | %d | %s s | %s | %s ms | %.1f / %.1f / %.1f ms | %s ms |", numfmt.Int(int64(s.Queries)), numfmt.Int(int64(s.Nodes)),
			numfmt.Int(int64(s.Recorded)), s.SettleRounds, strings.Join(rounds, ", "), spread(runs, 0), spread(per, 1),
			s.Direct.P50, s.Direct.P90, s.Direct.Max, numfmt.Float(s.DirectTotal, 0))
	}
	p("")
}

// spread writes the values' range: "5" when all equal, else "min–max".
func spread(v []float64, prec int) string {
	if len(v) == 0 {
		return "–"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if numfmt.Float(lo, prec) == numfmt.Float(hi, prec) {
		return numfmt.Float(lo, prec)
	}
	return numfmt.Float(lo, prec) + "–" + numfmt.Float(hi, prec)
}

func sum(m map[string]float64) float64 {
	var n float64
	for _, v := range m {
		n += v
	}
	return n
}

func dur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// secs writes seconds as the report does: 0.123 s, 12.3 s.
func secs(s float64) string {
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0):
		return "–"
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}

// writeText is the summary printed on stderr at the end.
func (r *Results) writeText(w io.Writer) {
	if s := r.Steady; s != nil && s.Queued != nil {
		fmt.Fprintf(w, "pdbbench: per 1,000 steady runs: %.1f store report, %.1f replace facts (%.1f in slot), %.1f replace catalog\n",
			s.Per1000(s.Queued["store_report"]), s.Per1000(s.Queued["replace_facts"]), s.Per1000(s.InSlot), s.Per1000(s.Queued["replace_catalog"]))
	}
	if b := r.Backlog; b != nil && b.Delivered != nil {
		fmt.Fprintf(w, "pdbbench: backlog of %.0f commands delivered in %.1fs: %.0f/s; PuppetDB stored the reports in %.1fs\n",
			b.Commands, b.DeliverSeconds, b.PerSecond(), b.StoredSeconds)
	}
	for i, fc := range r.FactChanges {
		fmt.Fprintf(w, "pdbbench: fact change %d: B recompiled after %.2fs\n", i+1, fc.Compiled)
	}
	for _, s := range r.Refresh {
		for _, rd := range s.Rounds {
			fmt.Fprintf(w, "pdbbench: %d distinct queries: round %.3fs, %.0f queries, %.1f ms a query (PuppetDB alone p50 %.1f ms)\n",
				s.Queries, rd.Seconds, rd.Runs, rd.PerQueryMs(), s.Direct.P50)
		}
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "pdbbench: FAILED %s\n", e)
	}
}
