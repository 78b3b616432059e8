package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Counts is what the counting decorators saw: store calls by method. The
// fields are JSON so that --json carries them as they are.
type Counts struct {
	GetNode       int64 `json:"get_node"`
	QueryPages    int64 `json:"query_pages"`    // QueryNodes calls (one page each)
	QueryNodes    int64 `json:"query_nodes"`    // records those pages returned
	UpdateNode    int64 `json:"update_node"`    // UpdateNode calls
	RecordReport  int64 `json:"record_report"`  // RecordReport calls
	ContentGet    int64 `json:"content_get"`    // ContentStore.Get
	ContentPut    int64 `json:"content_put"`    // ContentStore.Put
	ContentHas    int64 `json:"content_has"`    // ContentStore.Has
	EnvGet        int64 `json:"env_get"`        // EnvironmentStore.GetEnvironment
	EnvList       int64 `json:"env_list"`       // EnvironmentStore.ListEnvironments
	EnvPut        int64 `json:"env_put"`        // EnvironmentStore.PutEnvironment
	Enqueued      int64 `json:"enqueued"`       // Queue.Enqueue
	EnqueuedBulk  int64 `json:"enqueued_bulk"`  // ... of them on the bulk lane
	Collectors    int64 `json:"collectors"`     // collectors RecompileCollectors queued
	CollectorRuns int64 `json:"collector_runs"` // RecompileCollectors calls
	// The engine's work (not store calls): Engine.Compile calls (a
	// collector's first compile takes two, see compiler.Pool) and the
	// exported resources they were given.
	EngineCompiles int64 `json:"engine_compiles"`
	ExportedGiven  int64 `json:"exported_given"`
}

// Reads are the store reads: node records (GetNode), index pages
// (QueryNodes) and content blobs (Get, Has).
func (c Counts) Reads() int64 { return c.GetNode + c.QueryPages + c.ContentGet + c.ContentHas }

// Sub returns c minus o, field by field.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		GetNode: c.GetNode - o.GetNode, QueryPages: c.QueryPages - o.QueryPages, QueryNodes: c.QueryNodes - o.QueryNodes,
		UpdateNode: c.UpdateNode - o.UpdateNode, RecordReport: c.RecordReport - o.RecordReport,
		ContentGet: c.ContentGet - o.ContentGet, ContentPut: c.ContentPut - o.ContentPut, ContentHas: c.ContentHas - o.ContentHas,
		EnvGet: c.EnvGet - o.EnvGet, EnvList: c.EnvList - o.EnvList, EnvPut: c.EnvPut - o.EnvPut,
		Enqueued: c.Enqueued - o.Enqueued, EnqueuedBulk: c.EnqueuedBulk - o.EnqueuedBulk,
		Collectors: c.Collectors - o.Collectors, CollectorRuns: c.CollectorRuns - o.CollectorRuns,
		EngineCompiles: c.EngineCompiles - o.EngineCompiles, ExportedGiven: c.ExportedGiven - o.ExportedGiven,
	}
}

// counter holds the live counts one set of decorators shares. Safe for
// concurrent use.
type counter struct {
	getNode, queryPages, queryNodes, updateNode, recordReport atomic.Int64
	contentGet, contentPut, contentHas                        atomic.Int64
	envGet, envList, envPut                                   atomic.Int64
	enqueued, enqueuedBulk                                    atomic.Int64
	collectors, collectorRuns                                 atomic.Int64
	engineCompiles, exportedGiven                             atomic.Int64
}

// Snapshot returns the counts so far.
func (c *counter) Snapshot() Counts {
	return Counts{
		GetNode: c.getNode.Load(), QueryPages: c.queryPages.Load(), QueryNodes: c.queryNodes.Load(),
		UpdateNode: c.updateNode.Load(), RecordReport: c.recordReport.Load(),
		ContentGet: c.contentGet.Load(), ContentPut: c.contentPut.Load(), ContentHas: c.contentHas.Load(),
		EnvGet: c.envGet.Load(), EnvList: c.envList.Load(), EnvPut: c.envPut.Load(),
		Enqueued: c.enqueued.Load(), EnqueuedBulk: c.enqueuedBulk.Load(),
		Collectors: c.collectors.Load(), CollectorRuns: c.collectorRuns.Load(),
		EngineCompiles: c.engineCompiles.Load(), ExportedGiven: c.exportedGiven.Load(),
	}
}

// countingNodes is a farm.NodeStore that counts the calls it passes on.
// A call counts whether or not it succeeds: a failed read is a read.
type countingNodes struct {
	next farm.NodeStore
	c    *counter
}

var _ farm.NodeStore = countingNodes{}

func (s countingNodes) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	s.c.getNode.Add(1)
	return s.next.GetNode(ctx, certname)
}

func (s countingNodes) QueryNodes(ctx context.Context, q farm.NodeQuery) (farm.NodePage, error) {
	s.c.queryPages.Add(1)
	p, err := s.next.QueryNodes(ctx, q)
	s.c.queryNodes.Add(int64(len(p.Nodes)))
	return p, err
}

func (s countingNodes) UpdateNode(ctx context.Context, certname string, fn func(*farm.Node) error) (farm.Node, error) {
	s.c.updateNode.Add(1)
	return s.next.UpdateNode(ctx, certname, fn)
}

func (s countingNodes) RecordReport(ctx context.Context, certname string, sum farm.ReportSummary) (*farm.ReportSummary, error) {
	s.c.recordReport.Add(1)
	return s.next.RecordReport(ctx, certname, sum)
}

// countingContent is a farm.ContentStore that counts the calls it passes on.
type countingContent struct {
	next farm.ContentStore
	c    *counter
}

var _ farm.ContentStore = countingContent{}

func (s countingContent) Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error) {
	s.c.contentPut.Add(1)
	return s.next.Put(ctx, space, data)
}

func (s countingContent) Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error) {
	s.c.contentGet.Add(1)
	return s.next.Get(ctx, space, d)
}

func (s countingContent) Has(ctx context.Context, space farm.Space, d farm.Digest) (bool, error) {
	s.c.contentHas.Add(1)
	return s.next.Has(ctx, space, d)
}

// countingEnvs is a farm.EnvironmentStore that counts the calls it passes
// on. A cache (pkg/envcache) goes on top of it, so that what is counted is
// what reaches the store.
type countingEnvs struct {
	next farm.EnvironmentStore
	c    *counter
}

var _ farm.EnvironmentStore = countingEnvs{}

func (s countingEnvs) GetEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	s.c.envGet.Add(1)
	return s.next.GetEnvironment(ctx, name)
}

func (s countingEnvs) ListEnvironments(ctx context.Context) ([]farm.Environment, error) {
	s.c.envList.Add(1)
	return s.next.ListEnvironments(ctx)
}

func (s countingEnvs) PutEnvironment(ctx context.Context, env farm.Environment) error {
	s.c.envPut.Add(1)
	return s.next.PutEnvironment(ctx, env)
}

// countingQueue is a farm.Queue that counts the jobs enqueued through it.
type countingQueue struct {
	next farm.Queue
	c    *counter
}

var _ farm.Queue = countingQueue{}

func (q countingQueue) Enqueue(ctx context.Context, job farm.Job) error {
	q.c.enqueued.Add(1)
	if job.Lane == farm.LaneBulk {
		q.c.enqueuedBulk.Add(1)
	}
	return q.next.Enqueue(ctx, job)
}

func (q countingQueue) Receive(ctx context.Context) (farm.Delivery, error) {
	return q.next.Receive(ctx)
}
func (q countingQueue) Ack(ctx context.Context, d farm.Delivery) error { return q.next.Ack(ctx, d) }
func (q countingQueue) Retry(ctx context.Context, d farm.Delivery, after time.Duration) error {
	return q.next.Retry(ctx, d, after)
}
func (q countingQueue) Stats(ctx context.Context) ([]farm.QueueStats, error) {
	return q.next.Stats(ctx)
}

// countingCollectors is the pool's compiler.Collectors: it counts the
// collectors a changed exporter had queued.
type countingCollectors struct {
	next compiler.Collectors
	c    *counter
}

func (cc countingCollectors) RecompileCollectors(ctx context.Context, environment, exporter string, types []string) (int, error) {
	cc.c.collectorRuns.Add(1)
	n, err := cc.next.RecompileCollectors(ctx, environment, exporter, types)
	cc.c.collectors.Add(int64(n))
	return n, err
}

// countingEngine is a compiler.Engine that counts the compiles it passes
// on and the exported resources each was given.
type countingEngine struct {
	next compiler.Engine
	c    *counter
}

var _ compiler.Engine = countingEngine{}

func (e countingEngine) Compile(ctx context.Context, req compiler.Request) (compiler.Result, error) {
	e.c.engineCompiles.Add(1)
	e.c.exportedGiven.Add(int64(len(req.Exported)))
	return e.next.Compile(ctx, req)
}

// Close does not close the engine: the benchmark shares one between its
// parts and closes it at the end.
func (e countingEngine) Close() error { return nil }
