package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/numfmt"
	"github.com/compilefarm/compilefarm/pkg/awscalls"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/envcache"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/release"
)

// backend is the storage a farm runs on: the embedded store or the AWS
// drivers on the emulators.
type backend struct {
	name    string
	content farm.ContentStore
	nodes   farm.NodeStore
	envs    farm.EnvironmentStore
	queue   farm.Queue
	// envCache puts pkg/envcache in front of the intake's environment
	// store, as broker serve does.
	envCache bool
	// calls counts the AWS calls of the drivers (nil for the embedded
	// store).
	calls *awscalls.Counter
}

// rig is a farm wired as broker dev (or broker serve and the compile
// function) wires it, with counting decorators between each component and
// the stores: ctl counts the intake's and the deployer's calls (check-ins,
// deploys, status, collectors queued by a changed exporter), pool the
// compile worker's (and its engine's work: compiles, exported resources
// given), lib the worker's code library's (its checkouts).
type rig struct {
	b              backend
	ctl, pool, lib *counter
	intake         *intake.Intake
	deployer       *release.Deployer
	worker         *compiler.Pool
	engine         compiler.Engine // uncounted, for warmUp
	metrics        *metrics.Farm
}

// newRig wires a farm on b: envRoot is the environmentpath deploys read,
// workDir holds the code checkouts.
func newRig(b backend, engine compiler.Engine, envRoot, workDir string, log *slog.Logger) (*rig, error) {
	filter, err := facts.NewFilter(facts.DefaultVolatile)
	if err != nil {
		return nil, fmt.Errorf("volatile facts filter: %w", err)
	}
	r := &rig{b: b, ctl: &counter{}, pool: &counter{}, lib: &counter{}, engine: engine}
	q := countingQueue{b.queue, r.ctl}
	var inEnvs, depEnvs farm.EnvironmentStore = countingEnvs{b.envs, r.ctl}, countingEnvs{b.envs, r.ctl}
	if b.envCache {
		c := envcache.New(inEnvs, envcache.DefaultTTL)
		inEnvs, depEnvs = c, c.ReadThrough()
	}
	r.intake = &intake.Intake{
		Content: countingContent{b.content, r.ctl}, Nodes: countingNodes{b.nodes, r.ctl}, Envs: inEnvs,
		Queue: q, Filter: filter, Log: log,
	}
	r.deployer = &release.Deployer{
		Content: countingContent{b.content, r.ctl}, Envs: depEnvs, Nodes: countingNodes{b.nodes, r.ctl},
		Intake: r.intake, Root: envRoot, Log: log,
	}
	r.metrics = metrics.New(b.queue)
	r.worker = &compiler.Pool{
		Queue: b.queue, Nodes: countingNodes{b.nodes, r.pool}, Content: countingContent{b.content, r.pool},
		Engine: countingEngine{engine, r.pool}, Code: code.NewLibrary(countingContent{b.content, r.lib}, filepath.Join(workDir, "code")),
		Metrics: r.metrics, Log: log, Collectors: countingCollectors{r.intake, r.pool},
	}
	return r, nil
}

// snap is every counter at one moment.
type snap struct {
	ctl, pool, lib Counts
	aws            []awscalls.Count
	outcomes       outcomes
	at             time.Time
}

func (r *rig) snap() snap {
	s := snap{ctl: r.ctl.Snapshot(), pool: r.pool.Snapshot(), lib: r.lib.Snapshot(), outcomes: compileOutcomes(r.metrics), at: time.Now()}
	if r.b.calls != nil {
		s.aws = r.b.calls.Snapshot()
	}
	return s
}

// since is what the counters counted from s to now.
type delta struct {
	ctl, pool, lib Counts
	aws            awsCalls
	outcomes       outcomes
	elapsed        time.Duration
}

func (r *rig) since(s snap) delta {
	now := r.snap()
	return delta{
		ctl: now.ctl.Sub(s.ctl), pool: now.pool.Sub(s.pool), lib: now.lib.Sub(s.lib),
		aws: diffCalls(now.aws, s.aws), outcomes: now.outcomes.sub(s.outcomes), elapsed: now.at.Sub(s.at),
	}
}

// storeResult is parts 1 and 2 of the benchmark for one backend.
type storeResult struct {
	Backend     string       `json:"backend"`
	Environment string       `json:"environment"`
	Nodes       int          `json:"nodes"`
	Creates     []createStep `json:"creates"`
	Samples     []sampleStep `json:"samples"`
	Ops         []opResult   `json:"operations"` // deploy, status, release status, check-ins
	// Warmup is each engine worker's first compile of the code, before
	// any measured compile; CheckoutReads the code library's reads for it
	// (its checkout of the code_id, once per worker process).
	WarmupSeconds float64       `json:"warmup_seconds"`
	CheckoutReads int64         `json:"checkout_reads"`
	Deploy        *DeployResult `json:"deploy,omitempty"`
	Status        any           `json:"status,omitempty"`
	Release       any           `json:"release_status,omitempty"`
}

// DeployResult is the deploy's own answer, as the CLI prints it.
type DeployResult = release.DeployResult

// createStep is one stretch of node creation through the intake.
type createStep struct {
	From      int      `json:"from"`
	To        int      `json:"to"`
	Seconds   float64  `json:"seconds"`
	PerSecond float64  `json:"nodes_per_second"`
	Queued    int      `json:"queued"` // uploads that queued a compile (each new node)
	Calls     Counts   `json:"store_calls"`
	AWS       awsCalls `json:"aws_calls,omitempty"`
}

// sampleStep is a sample of compiles at one node count.
type sampleStep struct {
	Nodes    int      `json:"nodes"` // nodes in the store
	Jobs     int      `json:"jobs"`
	Outcomes outcomes `json:"outcomes"`
	Seconds  float64  `json:"seconds"`
	Pool     Counts   `json:"store_calls"`      // the compile worker's, over all jobs
	Code     Counts   `json:"code_store_calls"` // its code library's (checkouts, once per code_id)
	Queued   Counts   `json:"queued_by_compiles,omitempty"`
	AWS      awsCalls `json:"aws_calls,omitempty"` // over all jobs, SQS included
}

// ReadsPerCompile is the worker's store reads per job.
func (s sampleStep) ReadsPerCompile() float64 { return per(s.Pool.Reads(), s.Jobs) }

// opResult is one operation over the whole environment.
type opResult struct {
	Name     string   `json:"name"`
	Nodes    int      `json:"nodes"` // nodes it went through
	Count    int      `json:"count"` // calls of the operation (check-ins: one per node)
	Seconds  float64  `json:"seconds"`
	Mem      *memPeak `json:"memory,omitempty"`
	Enqueued int64    `json:"jobs_enqueued"`
	Calls    Counts   `json:"store_calls"`
	AWS      awsCalls `json:"aws_calls,omitempty"`
	Answer   string   `json:"answer"` // what it answered, in short
}

func per(n int64, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// storeConfig is what parts 1 and 2 need.
type storeConfig struct {
	sizes       []int // node counts at which compiles are sampled; the last is the total
	samples     int   // compiles per size
	workers     int   // compile workers (the engine's Ruby processes)
	concurrency int   // intake uploads at once
	checkins    int   // unchanged check-ins to time at the end
	environment string
}

// benchStore runs parts 1 and 2 on r: nodes created through the intake up
// to each size with sample compiles at each, then a code deploy, code
// status, release status and unchanged check-ins over all of them.
func benchStore(ctx context.Context, cfg storeConfig, r *rig, fl *fleet, envCopy string, p *progress) (*storeResult, error) {
	res := &storeResult{Backend: r.b.name, Environment: cfg.environment}
	if _, err := r.deployer.Deploy(ctx, cfg.environment, ""); err != nil {
		return res, fmt.Errorf("first deploy: %w", err)
	}
	p.printf("warming up the %d compile workers on %s's code", cfg.workers, cfg.environment)
	s := r.snap()
	if err := warmUp(ctx, r, fl, cfg.environment, cfg.workers); err != nil {
		return res, err
	}
	d := r.since(s)
	res.WarmupSeconds, res.CheckoutReads = d.elapsed.Seconds(), d.lib.Reads()
	created, waiting := 0, 0 // nodes created; their compile jobs not sampled yet
	for _, size := range cfg.sizes {
		p.printf("creating nodes %s to %s through the intake (%d uploads at once)", numfmt.Int(int64(created)), numfmt.Int(int64(size)), cfg.concurrency)
		s := r.snap()
		cr, err := fl.create(ctx, r.intake, cfg.environment, created, size, cfg.concurrency, p)
		if err != nil {
			return res, err
		}
		d := r.since(s)
		step := createStep{From: created, To: size, Seconds: d.elapsed.Seconds(), PerSecond: float64(cr.Nodes) / d.elapsed.Seconds(),
			Queued: cr.Queued, Calls: d.ctl, AWS: d.aws}
		res.Creates = append(res.Creates, step)
		created = size
		res.Nodes = size
		p.printf("%s nodes created in %.1fs (%s/s); %d compiles queued", numfmt.Int(int64(cr.Nodes)), step.Seconds, fmtRate(float64(cr.Nodes), d.elapsed), cr.Queued)

		waiting += cr.Queued
		n := min(cfg.samples, waiting)
		waiting -= n
		p.printf("%d sample compiles at %s nodes (real Puppet engine, %d workers)", n, numfmt.Int(int64(size)), cfg.workers)
		s = r.snap()
		if _, err := runJobs(ctx, r.worker, r.b.queue, n, cfg.workers, p); err != nil {
			return res, fmt.Errorf("sample compiles at %d nodes: %w", size, err)
		}
		d = r.since(s)
		ss := sampleStep{Nodes: size, Jobs: n, Outcomes: d.outcomes, Seconds: d.elapsed.Seconds(), Pool: d.pool, Code: d.lib, Queued: d.ctl, AWS: d.aws}
		res.Samples = append(res.Samples, ss)
		if ss.Outcomes.compiled() != n {
			return res, fmt.Errorf("sample compiles at %d nodes: %d of %d stored a catalog (%v): the sample must be real compiles (a \"stale\" one is a delivery handed out again: see the log for \"ack compile job\")", size, ss.Outcomes.compiled(), n, ss.Outcomes)
		}
		p.printf("at %s nodes: %.1f store reads per compile (%v)", numfmt.Int(int64(size)), ss.ReadsPerCompile(), ss.Outcomes)
	}

	// The code deploy: a changed file in the environment, deployed as
	// `broker code deploy` does.
	if err := touchCode(envCopy, cfg.environment); err != nil {
		return res, err
	}
	p.printf("code deploy of %s (%s nodes)", cfg.environment, numfmt.Int(int64(created)))
	stopMem := sampleMemory(50 * time.Millisecond)
	stop := p.watch("code deploy", r.ctl)
	s = r.snap()
	dep, err := r.deployer.Deploy(ctx, cfg.environment, "")
	d = r.since(s)
	stop()
	mem := stopMem()
	if err != nil {
		return res, fmt.Errorf("deploy: %w", err)
	}
	res.Deploy = &dep
	res.Ops = append(res.Ops, opResult{Name: "code deploy", Nodes: created, Count: 1, Seconds: d.elapsed.Seconds(), Mem: &mem,
		Enqueued: d.ctl.Enqueued, Calls: d.ctl, AWS: d.aws,
		Answer: fmt.Sprintf("changed %v, queued %s (bulk lane: %s jobs)", dep.Changed, numfmt.Int(int64(dep.Queued)), numfmt.Int(d.ctl.EnqueuedBulk))})
	p.printf("deployed in %.1fs: %s queued, peak heap %.0f MB, peak RSS %.0f MB", d.elapsed.Seconds(), numfmt.Int(int64(dep.Queued)), mem.PeakHeapMB, mem.PeakRSSMB)

	p.printf("code status of %s", cfg.environment)
	stop = p.watch("code status", r.ctl)
	s = r.snap()
	st, err := r.deployer.Status(ctx, cfg.environment)
	d = r.since(s)
	stop()
	if err != nil {
		return res, fmt.Errorf("code status: %w", err)
	}
	res.Status = st
	res.Ops = append(res.Ops, opResult{Name: "code status", Nodes: st.Nodes, Count: 1, Seconds: d.elapsed.Seconds(), Calls: d.ctl, AWS: d.aws,
		Answer: fmt.Sprintf("nodes %s, queued %s, compiled %s, other %s", numfmt.Int(int64(st.Nodes)), numfmt.Int(int64(st.Queued)), numfmt.Int(int64(st.Compiled)), numfmt.Int(int64(st.Other)))})
	p.printf("code status in %.2fs: %s", d.elapsed.Seconds(), res.Ops[len(res.Ops)-1].Answer)

	p.printf("release status of %s", cfg.environment)
	stop = p.watch("release status", r.ctl)
	s = r.snap()
	rs, err := r.deployer.ReleaseStatus(ctx, cfg.environment)
	d = r.since(s)
	stop()
	if err != nil {
		return res, fmt.Errorf("release status: %w", err)
	}
	res.Release = rs
	answer := fmt.Sprintf("nodes %s", numfmt.Int(int64(rs.Nodes)))
	for _, c := range rs.Codes {
		answer += fmt.Sprintf("; %s code: targeted %s, compiled %s", c.Role, numfmt.Int(int64(c.Targeted)), numfmt.Int(int64(c.Compiled)))
	}
	res.Ops = append(res.Ops, opResult{Name: "release status", Nodes: rs.Nodes, Count: 1, Seconds: d.elapsed.Seconds(), Calls: d.ctl, AWS: d.aws, Answer: answer})
	p.printf("release status in %.2fs: %s", d.elapsed.Seconds(), answer)

	// Check-ins with the facts the nodes have: the request path of a
	// fleet at rest.
	k := min(cfg.checkins, created)
	if k > 0 {
		p.printf("%d check-ins with unchanged facts", k)
		s = r.snap()
		queued := 0
		for i := 0; i < k; i++ {
			out, err := fl.submit(ctx, r.intake, cfg.environment, i*(created/k), 0)
			if err != nil {
				return res, err
			}
			if out.Queued {
				queued++
			}
		}
		d = r.since(s)
		res.Ops = append(res.Ops, opResult{Name: "check-in, facts unchanged", Nodes: k, Count: k, Seconds: d.elapsed.Seconds(), Enqueued: d.ctl.Enqueued,
			Calls: d.ctl, AWS: d.aws, Answer: fmt.Sprintf("%d compiles queued", queued)})
	}
	return res, nil
}

// touchCode changes the environment's code (a comment at the end of
// site.pp), so the next deploy is a new code_id; the catalogs stay the
// same.
func touchCode(envRoot, environment string) error {
	site := filepath.Join(envRoot, environment, "manifests", "site.pp")
	f, err := os.OpenFile(site, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("change the code to deploy: %w", err)
	}
	if _, err := fmt.Fprintf(f, "# scalebench deploy at %s\n", time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		f.Close()
		return fmt.Errorf("change the code to deploy: %w", err)
	}
	return f.Close()
}

// awsCall is the number of calls of one AWS operation on one resource.
type awsCall struct {
	Service   string `json:"service"`
	Operation string `json:"operation"`
	Resource  string `json:"resource,omitempty"`
	Calls     int64  `json:"calls"`
}

type awsCalls []awsCall

// diffCalls is now minus before, leaving out what did not change.
func diffCalls(now, before []awscalls.Count) awsCalls {
	var out awsCalls
	for _, c := range now {
		n := c.Calls
		for _, b := range before {
			if b.Key == c.Key {
				n -= b.Calls
			}
		}
		if n != 0 {
			out = append(out, awsCall{Service: c.Service, Operation: c.Operation, Resource: c.Resource, Calls: n})
		}
	}
	return out
}

// op sums the calls of a service's operation over its resources.
func (a awsCalls) op(service, operation string) int64 {
	var n int64
	for _, c := range a {
		if c.Service == service && c.Operation == operation {
			n += c.Calls
		}
	}
	return n
}

// service sums the calls of a service.
func (a awsCalls) service(service string) int64 {
	var n int64
	for _, c := range a {
		if c.Service == service {
			n += c.Calls
		}
	}
	return n
}

// ops lists the operations of a service that were called, sorted.
func (a awsCalls) ops(service string) []string {
	var out []string
	for _, c := range a {
		if c.Service == service && !slices.Contains(out, c.Operation) {
			out = append(out, c.Operation)
		}
	}
	slices.Sort(out)
	return out
}
