package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/compilefarm/compilefarm/bench/internal/numfmt"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/compiler"
)

// exportsEnvironment is the environment of bench/scalebench/testdata:
// each node exports its host entry and collects those of its /28.
const exportsEnvironment = "exports"

// exportsResult is part 3 at one node count.
type exportsResult struct {
	Nodes int `json:"nodes"` // exporters, each also a collector
	// Setup is every node's first compile (the collector notifications off,
	// see benchExports).
	SetupJobs    int      `json:"setup_jobs"`
	SetupSeconds float64  `json:"setup_seconds"`
	SetupOut     outcomes `json:"setup_outcomes"`
	Setup        Counts   `json:"setup_store_calls"`
	// Exporter is the compile of the node whose export changed, and what
	// it queued.
	Exporter           sampleStep `json:"exporter_compile"`
	CollectorsQueued   int64      `json:"collectors_queued"`
	QueueCollectors    Counts     `json:"queue_collectors_store_calls"` // the intake's calls to queue them
	QueueCollectorsSec float64    `json:"queue_collectors_seconds"`
	// Cold is one collector compiled by a fresh worker (empty caches, as
	// a new Lambda container); Warm the sample of collectors compiled by
	// the worker that compiled everything before.
	Cold sampleStep `json:"cold_collector"`
	Warm sampleStep `json:"warm_collectors"`
}

// exportsConfig is what part 3 needs.
type exportsConfig struct {
	sample      int // collector recompiles to run with the engine at each size; 0: all
	workers     int
	concurrency int    // fact uploads at once
	envSrc      string // the environmentpath holding exportsEnvironment
}

// benchExports runs part 3 at n nodes in a fresh embedded store under
// dir: every node submits its facts and is compiled once; then one
// exporter's IP address changes, its compile changes its export, and the
// collectors it queues are compiled (a sample of them).
//
// During the first compiles the pool does not tell collectors about new
// exports: otherwise each node's first compile queues every node compiled
// before it (the embedded queue collapses those into one waiting job per
// node, so ~2n compiles, not n). What is measured is unchanged by it: every
// node has compiled once, exports and collects File, and its export list
// is stored; the collectors' catalogs are complete after the measured
// recompile.
//
// Each node collects the entries of its /28 only (testdata), not
// everyone's: the farm queues every collector of the type and gives each
// compile every exported File of the environment either way (that is what
// is measured), but catalogs of 16 collected entries rather than up to n
// keep the n first compiles from costing n²/2 catalog resources (at 800
// nodes, /24 racks of 256 took twice the CPU of these /28 racks).
func benchExports(ctx context.Context, cfg exportsConfig, n int, engine compiler.Engine, fl *fleet, dir string, log *slog.Logger, p *progress) (*exportsResult, error) {
	res := &exportsResult{Nodes: n}
	envs := filepath.Join(dir, "environments")
	if err := copyTree(filepath.Join(cfg.envSrc, exportsEnvironment), filepath.Join(envs, exportsEnvironment)); err != nil {
		return res, err
	}
	b, closeStore, err := openEmbedded(ctx, filepath.Join(dir, "store"), log)
	if err != nil {
		return res, err
	}
	defer closeStore()
	r, err := newRig(b, engine, envs, dir, log)
	if err != nil {
		return res, err
	}
	if _, err := r.deployer.Deploy(ctx, exportsEnvironment, ""); err != nil {
		return res, fmt.Errorf("deploy %s: %w", exportsEnvironment, err)
	}
	p.printf("%s nodes: warming up the %d compile workers", numfmt.Int(int64(n)), cfg.workers)
	if err := warmUp(ctx, r, fl, exportsEnvironment, cfg.workers); err != nil {
		return res, err
	}
	p.printf("%s nodes: creating them through the intake", numfmt.Int(int64(n)))
	if _, err := fl.create(ctx, r.intake, exportsEnvironment, 0, n, cfg.concurrency, p); err != nil {
		return res, err
	}
	p.printf("%s nodes: first compile of each (real engine, %d workers)", numfmt.Int(int64(n)), cfg.workers)
	collectors := r.worker.Collectors
	r.worker.Collectors = nil
	s := r.snap()
	if _, err := runJobs(ctx, r.worker, b.queue, n, cfg.workers, p); err != nil {
		return res, fmt.Errorf("first compiles: %w", err)
	}
	d := r.since(s)
	r.worker.Collectors = collectors
	res.SetupJobs, res.SetupSeconds, res.SetupOut, res.Setup = n, d.elapsed.Seconds(), d.outcomes, d.pool
	if d.outcomes.compiled() != n {
		return res, fmt.Errorf("first compiles: %d of %d stored a catalog (%v)", d.outcomes.compiled(), n, d.outcomes)
	}
	p.printf("%s first compiles in %.0fs (%.2f s each)", numfmt.Int(int64(n)), d.elapsed.Seconds(), d.elapsed.Seconds()/float64(n))

	// One exporter's address changes: its next check-in queues its
	// compile, which changes its export and queues the collectors.
	x := n / 2
	out, err := fl.submit(ctx, r.intake, exportsEnvironment, x, 1)
	if err != nil {
		return res, err
	}
	if !out.Queued {
		return res, fmt.Errorf("the changed IP address of %s queued no compile: the catalog should read it", fl.certname(x))
	}
	p.printf("%s's IP address changed: compiling it", fl.certname(x))
	s = r.snap()
	if _, err := runJobs(ctx, r.worker, b.queue, 1, 1, p); err != nil {
		return res, fmt.Errorf("compile the changed exporter: %w", err)
	}
	d = r.since(s)
	res.Exporter = sampleStep{Nodes: n, Jobs: 1, Outcomes: d.outcomes, Seconds: d.elapsed.Seconds(), Pool: d.pool, Code: d.lib}
	res.CollectorsQueued, res.QueueCollectors = d.pool.Collectors, d.ctl
	p.printf("the exporter's compile queued %s collectors", numfmt.Int(res.CollectorsQueued))
	if res.CollectorsQueued != int64(n-1) {
		return res, fmt.Errorf("the changed export queued %d collectors, want %d", res.CollectorsQueued, n-1)
	}

	// One collector in a fresh worker: no cached export lists.
	cold := &compiler.Pool{
		Queue: b.queue, Nodes: countingNodes{b.nodes, r.pool}, Content: countingContent{b.content, r.pool}, Engine: countingEngine{engine, r.pool},
		Code:    code.NewLibrary(countingContent{b.content, r.lib}, filepath.Join(dir, "code-cold")),
		Metrics: r.metrics, Log: log, Collectors: collectors,
	}
	s = r.snap()
	if _, err := runJobs(ctx, cold, b.queue, 1, 1, p); err != nil {
		return res, fmt.Errorf("compile a collector in a fresh worker: %w", err)
	}
	d = r.since(s)
	res.Cold = sampleStep{Nodes: n, Jobs: 1, Outcomes: d.outcomes, Seconds: d.elapsed.Seconds(), Pool: d.pool, Code: d.lib, Queued: d.ctl}

	k := n - 2 // the collectors left
	if cfg.sample > 0 {
		k = min(k, cfg.sample)
	}
	p.printf("compiling %s of the %s queued collectors", numfmt.Int(int64(k)), numfmt.Int(res.CollectorsQueued))
	s = r.snap()
	if _, err := runJobs(ctx, r.worker, b.queue, k, cfg.workers, p); err != nil {
		return res, fmt.Errorf("compile the collectors: %w", err)
	}
	d = r.since(s)
	res.Warm = sampleStep{Nodes: n, Jobs: k, Outcomes: d.outcomes, Seconds: d.elapsed.Seconds(), Pool: d.pool, Code: d.lib, Queued: d.ctl}
	if got := res.Warm.Outcomes.compiled() + res.Cold.Outcomes.compiled(); got != k+1 {
		return res, fmt.Errorf("collector recompiles: %d of %d stored a catalog (%v, %v)", got, k+1, res.Cold.Outcomes, res.Warm.Outcomes)
	}
	p.printf("%.1f store reads per collector recompile (fresh worker: %d)", res.Warm.ReadsPerCompile(), res.Cold.Pool.Reads())
	return res, nil
}
