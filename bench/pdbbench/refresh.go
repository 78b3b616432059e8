package main

import (
	"context"
	"fmt"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/brokermetrics"
	"github.com/compilefarm/compilefarm/bench/internal/latency"
)

// RefreshSize is the query refresh measured with Queries distinct queries
// recorded.
type RefreshSize struct {
	Queries  int `json:"queries"`  // distinct queries the nodes make
	Nodes    int `json:"nodes"`    // nodes making them
	Recorded int `json:"recorded"` // compilefarm_puppetdb_queries after the rounds
	// Rounds are the timed rounds, each started by a delivered command.
	Rounds []RefreshRound `json:"rounds"`
	// Direct is PuppetDB's time for each of the distinct queries, asked by
	// pdbbench over plain http one after the other (ms).
	Direct      latency.Summary `json:"direct_query_ms"`
	DirectTotal float64         `json:"direct_total_ms"`
	SetupSecs   float64         `json:"setup_seconds"` // the nodes' first compiles, until settled
	// SettleRounds are the rounds run before the timed ones, until one
	// found every answer as recorded (see settle).
	SettleRounds int `json:"settle_rounds"`
}

// RefreshRound is one refresh round.
type RefreshRound struct {
	Seconds float64 `json:"seconds"` // compilefarm_puppetdb_query_refresh_seconds of the round
	Runs    float64 `json:"runs"`    // PuppetDB queries it ran
	Changed float64 `json:"changed"` // of them, answers that changed
	Failed  float64 `json:"failed"`
	Queued  float64 `json:"nodes_queued"`
}

// PerQueryMs is the round's time per query it ran.
func (rd RefreshRound) PerQueryMs() float64 {
	if rd.Runs == 0 {
		return 0
	}
	return 1000 * rd.Seconds / rd.Runs
}

// refreshCost records growing numbers of distinct queries (o.querySizes:
// nodes in that many groups, each node listing its group's members with
// puppetdb_query) and times refresh rounds over them, each round started
// by a delivered command (node A's tick fact changing: a replace facts
// command no recorded query's answer depends on).
func (r *runner) refreshCost(ctx context.Context) error {
	made := 0 // groups with nodes so far
	var nodes int
	for _, q := range r.o.querySizes {
		size := RefreshSize{Queries: q}
		start := time.Now()
		var names []string
		for g := made; g < q; g++ {
			for k := range r.o.nodesPerGroup {
				names = append(names, fmt.Sprintf("%s-q%03d-%d.%s", r.o.prefix, g, k, domain))
			}
		}
		r.progress(fmt.Sprintf("refresh: %d distinct queries: %d new nodes in groups %d to %d", q, len(names), made, q-1))
		group, err := r.fleet.enrol(ctx, names)
		if err != nil {
			return err
		}
		for i, n := range group {
			n.extra["pdbbench_group"] = r.group(made + i/r.o.nodesPerGroup)
		}
		if err := r.fleet.uploadAll(ctx, group); err != nil {
			return err
		}
		made, nodes = q, nodes+len(group)
		size.Nodes = nodes
		if size.SettleRounds, err = r.settle(ctx); err != nil {
			return err
		}
		size.SetupSecs = time.Since(start).Seconds()
		for i := range r.o.refreshRounds {
			rd, err := r.tickRound(ctx)
			if err != nil {
				return fmt.Errorf("round %d with %d queries: %w", i+1, q, err)
			}
			r.progress(fmt.Sprintf("refresh: %d queries: round %d ran %.0f queries in %.3fs (%.1f ms a query)", q, i+1, rd.Runs, rd.Seconds, rd.PerQueryMs()))
			size.Rounds = append(size.Rounds, rd)
		}
		s, err := r.b.scrape(ctx)
		if err != nil {
			return err
		}
		size.Recorded = int(s[mQueries])
		if err := r.directQueries(ctx, q, &size); err != nil {
			return err
		}
		r.res.Refresh = append(r.res.Refresh, size)
	}
	return nil
}

// maxSettle bounds the rounds settle runs.
const maxSettle = 6

// settle waits until the farm is quiet, then runs refresh rounds (a tick
// each) until one finds every recorded answer unchanged and queues no
// node, waiting for the recompiles each queued; it returns the rounds it
// ran. New nodes' first compiles ran their queries while their group's
// other members were still on their way to PuppetDB, and the round their
// deliveries started may have run before PuppetDB stored them or before
// the last compiles recorded their queries: nothing starts another round
// until the next delivered command (or --puppetdb-query-refresh), so
// settle delivers one.
func (r *runner) settle(ctx context.Context) (int, error) {
	if err := r.waitQuiet(ctx); err != nil {
		return 0, err
	}
	for n := 1; n <= maxSettle; n++ {
		rd, err := r.tickRound(ctx)
		if err != nil {
			return n, err
		}
		if rd.Changed == 0 && rd.Queued == 0 {
			return n, nil
		}
		r.progress(fmt.Sprintf("settling: round %d found %.0f answers changed and queued %.0f nodes", n, rd.Changed, rd.Queued))
		if err := r.waitSettled(ctx); err != nil {
			return n, err
		}
	}
	return maxSettle, fmt.Errorf("the answers did not settle in %d rounds", maxSettle)
}

// group is the name of group g (pdbbench_group): the run's prefix keeps
// other runs' nodes, still in PuppetDB, out of its answers.
func (r *runner) group(g int) string { return fmt.Sprintf("%s-g%03d", r.o.prefix, g) }

// tickRound changes node A's tick fact and waits for the refresh round
// its delivery starts; it returns that round.
func (r *runner) tickRound(ctx context.Context) (RefreshRound, error) {
	before, err := r.b.scrape(ctx)
	if err != nil {
		return RefreshRound{}, err
	}
	r.watched.extra["pdbbench_tick"] = r.watched.extra["pdbbench_tick"].(int) + 1
	if err := r.fleet.upload(ctx, r.watched); err != nil {
		return RefreshRound{}, err
	}
	var after brokermetrics.Samples
	err = r.waitFor(ctx, "the refresh round a delivered command starts", 2*time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		s, err := r.b.scrape(ctx)
		if err != nil {
			return false, "", err
		}
		after = s
		return s[mRoundsCount] > before[mRoundsCount], fmt.Sprintf("%.0f commands delivered", allCommands(s, "delivered")-allCommands(before, "delivered")), nil
	})
	if err != nil {
		return RefreshRound{}, err
	}
	return roundBetween(before, after), nil
}

// roundBetween is the refresh round (or the mean of the rounds) that
// finished between two scrapes.
func roundBetween(before, after brokermetrics.Samples) RefreshRound {
	n := after[mRoundsCount] - before[mRoundsCount]
	if n <= 0 {
		return RefreshRound{}
	}
	d := func(outcome string) float64 {
		k := fmt.Sprintf("%soutcome=%q}", queryRunsName, outcome)
		return (after[k] - before[k]) / n
	}
	return RefreshRound{
		Seconds: (after[mRoundsSum] - before[mRoundsSum]) / n,
		Runs:    (queryRuns(after) - queryRuns(before)) / n,
		Changed: d("changed"), Failed: d("failed"),
		Queued: (after[mNodesQueued] - before[mNodesQueued]) / n,
	}
}

// directQueries times PuppetDB answering each of the first q group
// queries, one after the other, asked by pdbbench itself.
func (r *runner) directQueries(ctx context.Context, q int, size *RefreshSize) error {
	var times []time.Duration
	var total time.Duration
	for g := range q {
		rows, took, err := r.pdb.query(ctx, groupQuery(r.group(g)))
		if err != nil {
			return err
		}
		if len(rows) != r.o.nodesPerGroup {
			return fmt.Errorf("PuppetDB answers %d members of group %s, want %d", len(rows), r.group(g), r.o.nodesPerGroup)
		}
		times = append(times, took)
		total += took
	}
	size.Direct = latency.Summarize(times)
	size.DirectTotal = float64(total.Microseconds()) / 1000
	return nil
}
