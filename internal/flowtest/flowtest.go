// Package flowtest is an in-memory farm for the tests of the packages along
// the compile flow (intake, compiler, release): memstore stores and queue,
// the real Intake and Pool, and a compile engine whose answers the test
// decides. It is for tests only.
package flowtest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

// Engine is a compile engine whose answers the test decides: it renders
// the facts it was given into the catalog, or fails as told. Set its
// fields before compiles start.
type Engine struct {
	// Fail, when set, decides whether a compile fails, and how.
	Fail func(req compiler.Request) error
	// Reads are the facts the "manifests" read (dotted paths), recorded
	// when set.
	Reads []string
	// Clock makes the recorded compile read the current time too.
	Clock bool
	// CodeInCatalog makes the catalog depend on the code (a resource
	// parameter carries the code_id).
	CodeInCatalog bool
	// ExportsHost makes nodes with an "ip" fact export Host[certname], and
	// nodes with collect_hosts collect every exported Host.
	ExportsHost bool
	// Queries are the PuppetDB queries a recorded compile reports.
	Queries []farm.QueryRead

	mu    sync.Mutex
	calls int
	// gotExports counts, per node, the compiles given exported resources.
	gotExports map[string]int
	// gotNode is, per node, the node information of its latest compile.
	gotNode map[string]nodeinfo.Info
}

// Compile implements compiler.Engine.
func (e *Engine) Compile(ctx context.Context, req compiler.Request) (compiler.Result, error) {
	e.mu.Lock()
	e.calls++
	if req.Exported != nil {
		if e.gotExports == nil {
			e.gotExports = map[string]int{}
		}
		e.gotExports[req.Certname]++
	}
	if e.gotNode == nil {
		e.gotNode = map[string]nodeinfo.Info{}
	}
	e.gotNode[req.Certname] = req.Node
	fail := e.Fail
	e.mu.Unlock()
	if fail != nil {
		if err := fail(req); err != nil {
			return compiler.Result{}, err
		}
	}
	resources := []any{}
	if e.CodeInCatalog {
		resources = append(resources, map[string]any{"type": "Notify", "title": "code", "exported": false,
			"parameters": map[string]any{"message": req.CodeID}})
	}
	var exports []compiler.ExportedResource
	var collects []compiler.Collect
	if e.ExportsHost {
		if ip, ok := req.Facts["ip"]; ok {
			p, _ := json.Marshal(map[string]any{"ip": ip})
			exports = append(exports, compiler.ExportedResource{Type: "Host", Title: req.Certname, Parameters: p})
		}
		if req.Facts["collect_hosts"] == true {
			c := compiler.Collect{Type: "Host"}
			for _, x := range req.Exported {
				if x.Type == "Host" {
					resources = append(resources, map[string]any{"type": "Host", "title": x.Title, "exported": false, "parameters": x.Parameters})
					c.Matched = append(c.Matched, x.Certname)
				}
			}
			collects = append(collects, c)
		}
	}
	b, _ := json.Marshal(map[string]any{"name": req.Certname, "environment": req.Environment,
		"version": 1795306186, "resources": resources, "facts_seen": req.Facts["cf_role"]})
	res := compiler.Result{Catalog: b, Exports: exports, Collects: collects}
	if e.Reads != nil {
		res.Reads = &facts.ReadRecord{Clock: e.Clock, Queries: e.Queries}
		if e.Clock {
			res.Reads.ClockWhy = "Timestamp.now (Timestamp.new() or Timestamp()) reads the clock"
		}
		for _, name := range e.Reads {
			r, _ := facts.Observe(req.Facts, strings.Split(name, "."), facts.ReadValue)
			res.Reads.Reads = append(res.Reads.Reads, r)
		}
	}
	return res, nil
}

// Close implements compiler.Engine.
func (e *Engine) Close() error { return nil }

// Count is how many compiles the engine was asked for.
func (e *Engine) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

// GotExports is how many of node's compiles were given exported resources.
func (e *Engine) GotExports(node string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gotExports[node]
}

// GotNode is the node information node's latest compile was given.
func (e *Engine) GotNode(node string) nodeinfo.Info {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gotNode[node]
}

// PlainCode is a compiler.Code whose snapshots need no checkout and whose
// catalogs are already static.
type PlainCode struct{}

// EnvironmentPath implements compiler.Code.
func (PlainCode) EnvironmentPath(ctx context.Context, codeID string) (string, error) {
	return "/nonexistent/" + codeID, nil
}

// MakeStatic implements compiler.Code.
func (PlainCode) MakeStatic(ctx context.Context, catalog []byte, codeID string) ([]byte, error) {
	return catalog, nil
}

// Publish implements compiler.Code.
func (PlainCode) Publish(ctx context.Context, codeID string, text []byte) ([]byte, error) {
	return text, nil
}

// Rig is a farm on memstore with environment "production" at code "code1":
// facts go in through Intake, Drain compiles what was queued with Pool.
type Rig struct {
	Store  *memstore.Store
	Queue  *memstore.Queue
	Intake *intake.Intake
	Pool   *compiler.Pool
	Engine *Engine
}

// New returns a rig whose pool tells the intake of changed exports.
func New(t *testing.T) *Rig {
	t.Helper()
	store := memstore.New()
	queue := memstore.NewQueue(memstore.QueueOptions{})
	filter, err := facts.NewFilter(facts.DefaultVolatile)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code1"}); err != nil {
		t.Fatal(err)
	}
	eng := &Engine{}
	r := &Rig{
		Store: store, Queue: queue, Engine: eng,
		Intake: &intake.Intake{Content: store, Nodes: store, Envs: store, Queue: queue, Filter: filter},
		Pool: &compiler.Pool{Queue: queue, Nodes: store, Content: store, Engine: eng, Code: PlainCode{},
			Metrics: metrics.New(queue), MaxAttempts: 2, RetryDelay: time.Millisecond},
	}
	r.Pool.Collectors = r.Intake
	return r
}

// FactsDoc is the facts document of node name with values.
func FactsDoc(name string, values map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"name": name, "values": values})
	return b
}

// Submit uploads values as the facts of node name in production.
func (r *Rig) Submit(t *testing.T, name string, values map[string]any) intake.Outcome {
	t.Helper()
	out, err := r.SubmitAs(t, name, "production", nil, values)
	if err != nil {
		t.Fatalf("submit facts of %s: %v", name, err)
	}
	return out
}

// SubmitAs uploads values as the facts of node name in env, presenting a
// certificate with extensions exts.
func (r *Rig) SubmitAs(t *testing.T, name, env string, exts map[string]string, values map[string]any) (intake.Outcome, error) {
	t.Helper()
	doc := FactsDoc(name, values)
	return r.Intake.Submit(context.Background(), intake.Upload{Certname: name, Environment: env, TrustedExtensions: exts,
		Facts: facts.JSONDocument(doc)})
}

// Drain handles every job the queue has now.
func (r *Rig) Drain(t *testing.T) {
	t.Helper()
	for {
		st, _ := r.Queue.Stats(context.Background())
		waiting := 0
		for _, s := range st {
			waiting += s.Depth
		}
		if waiting == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := r.Queue.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		r.Pool.Handle(context.Background(), d)
	}
}

// Node reads node name's record.
func (r *Rig) Node(t *testing.T, name string) farm.Node {
	t.Helper()
	n, err := r.Store.GetNode(context.Background(), name)
	if err != nil {
		t.Fatalf("read node %s: %v", name, err)
	}
	return n
}

// WithFact returns a copy of base with fact k set to v.
func WithFact(base map[string]any, k string, v any) map[string]any {
	m := maps.Clone(base)
	m[k] = v
	return m
}

// Classifier answers from a table the test changes; a node missing from it
// fails, as a classifier that does not know it.
type Classifier struct {
	mu      sync.Mutex
	answers map[string]classifier.Classification
	calls   int
}

// Classify implements the intake's and the pool's Classifier.
func (c *Classifier) Classify(ctx context.Context, certname string) (classifier.Classification, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	a, ok := c.answers[certname]
	if !ok {
		return classifier.Classification{}, fmt.Errorf("Failed to find %s via exec: Execution of '/enc %s' returned 1: unknown node: %w",
			certname, certname, classifier.ErrFailed)
	}
	return a, nil
}

// Calls is how many times Classify was called.
func (c *Classifier) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// Set makes the classifier answer a for certname.
func (c *Classifier) Set(certname string, a classifier.Classification) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = map[string]classifier.Classification{}
	}
	c.answers[certname] = a
}

// Forget makes the classifier fail for certname.
func (c *Classifier) Forget(certname string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.answers, certname)
}

// SameJSON compares values as their JSON: node information read back from
// the store holds []any where the classifier gave []string.
func SameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
