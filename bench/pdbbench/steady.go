package main

import (
	"context"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// The sink's defaults for unchanged facts (pkg/puppetdb.Sink: FactsEvery,
// FactsSlot), which broker dev keeps (--puppetdb-facts-every 24h).
const (
	factsEvery = 24 * time.Hour
	factsSlot  = time.Hour
)

// Steady is what a steady state's agent runs sent PuppetDB.
type Steady struct {
	Agents   int     `json:"agents"`
	Rounds   int     `json:"rounds"`
	Runs     int64   `json:"runs"`
	Failed   int64   `json:"failed_runs"`
	Seconds  float64 `json:"seconds"` // agentsim's run of the herds
	Warmup   float64 `json:"warmup_seconds"`
	Window   float64 `json:"window_seconds"` // each herd's runs start within it
	Compiles float64 `json:"compiles"`       // during the measured runs
	// Of them, compiles that ended with the node's catalog unchanged, and
	// recompiles queued by refresh rounds (a query answered otherwise).
	Unchanged   float64 `json:"compiles_unchanged"`
	QueryQueued float64 `json:"query_queued"`
	// Queued are the commands put in the outbox, by command.
	Queued map[string]float64 `json:"queued"`
	// InSlot is how many of the runs fell in their node's daily slot for
	// unchanged facts (farm.InSlot; the mean of the runs' start and end):
	// the replace facts commands expected.
	InSlot float64 `json:"runs_in_facts_slot"`
	// Refresh rounds the deliveries started during the runs and just
	// after, and the queries they ran.
	RefreshRounds float64  `json:"refresh_rounds"`
	QueryRuns     float64  `json:"query_runs"`
	Recorded      float64  `json:"queries_recorded"`
	ReportBytes   int64    `json:"report_bytes"`
	CatalogJSON   int64    `json:"catalog_json_bytes"`
	Errors        []string `json:"errors,omitempty"`
}

// Per1000 is a count per 1,000 runs.
func (s *Steady) Per1000(n float64) float64 {
	if s.Runs == 0 {
		return 0
	}
	return 1000 * n / float64(s.Runs)
}

// steady runs o.agents agents once (their first runs: compiles, facts,
// catalogs), then o.steadyRounds herds of them (the same facts but what
// facter measures anew, the same catalogs), and counts the commands those
// runs put in the outbox.
func (r *runner) steady(ctx context.Context) error {
	st := &Steady{Agents: r.o.agents, Rounds: r.o.steadyRounds, Window: r.o.window.Seconds()}
	r.res.Steady = st
	start := time.Now()
	r.progress(fmt.Sprintf("steady: first runs of %d agents (enrolment, first compiles)", r.o.agents))
	if _, err := r.herd.run(ctx, r.b, "first", 1, 0, r.o.concurrency); err != nil {
		return err
	}
	if err := r.waitSettled(ctx); err != nil {
		return err
	}
	st.Warmup = time.Since(start).Seconds()
	before, err := r.b.scrape(ctx)
	if err != nil {
		return err
	}
	// Nodes in their daily slot send their unchanged facts at every
	// check-in in it: count them at the start and the end of the runs (a
	// minute or two of an hour-wide slot) and expect the mean per herd.
	inSlot := func() (n int) {
		for i := range r.o.agents {
			if farm.InSlot(r.herd.name(i), time.Now(), factsEvery, factsSlot) {
				n++
			}
		}
		return n
	}
	slotBefore := inSlot()
	r.progress(fmt.Sprintf("steady: %d herds of %d agents within %s each", r.o.steadyRounds, r.o.agents, r.o.window))
	h, err := r.herd.run(ctx, r.b, "steady", r.o.steadyRounds, r.o.window, r.o.concurrency)
	st.Runs, st.Failed, st.Errors, st.ReportBytes, st.CatalogJSON = h.Runs, h.Failed, h.Errors, h.ReportBytes, h.CatalogJSON
	st.Seconds = h.Seconds
	st.InSlot = float64(r.o.steadyRounds*(slotBefore+inSlot())) / 2
	if err != nil {
		return err
	}
	// Quiet: the refresh round the last deliveries started is counted.
	if err := r.waitQuiet(ctx); err != nil {
		return err
	}
	after, err := r.b.scrape(ctx)
	if err != nil {
		return err
	}
	st.Queued = commandsBetween(before, after, "queued")
	c := brokermetrics.CompilesBetween(before, after)
	st.Compiles, st.Unchanged = c.Total(), c.Unchanged
	st.QueryQueued = after[mNodesQueued] - before[mNodesQueued]
	st.RefreshRounds = after[mRoundsCount] - before[mRoundsCount]
	st.QueryRuns = queryRuns(after) - queryRuns(before)
	st.Recorded = after[mQueries]
	return nil
}
