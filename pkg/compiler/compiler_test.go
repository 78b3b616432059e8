package compiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/metrics"
)

// scriptedEngine is a compile engine whose answers the test decides: it
// renders the facts it was given into the catalog, or fails as told.
type scriptedEngine struct {
	mu    sync.Mutex
	calls int
	fail  func(req Request) error
	reads []string // facts the "manifests" read (dotted paths), recorded when set
	// clock makes the recorded compile read the current time too.
	clock bool
	// codeInCatalog makes the catalog depend on the code (a resource
	// parameter carries the code_id).
	codeInCatalog bool
	// exportsHost makes nodes with an "ip" fact export Host[certname], and
	// nodes with collect_hosts collect every exported Host.
	exportsHost bool
	// gotExports counts, per node, the compiles given exported resources.
	gotExports map[string]int
	// gotNode is, per node, the node information of its latest compile.
	gotNode map[string]NodeInfo
}

func (e *scriptedEngine) Compile(ctx context.Context, req Request) (Result, error) {
	e.mu.Lock()
	e.calls++
	if req.Exported != nil {
		if e.gotExports == nil {
			e.gotExports = map[string]int{}
		}
		e.gotExports[req.Certname]++
	}
	if e.gotNode == nil {
		e.gotNode = map[string]NodeInfo{}
	}
	e.gotNode[req.Certname] = req.Node
	fail := e.fail
	e.mu.Unlock()
	if fail != nil {
		if err := fail(req); err != nil {
			return Result{}, err
		}
	}
	resources := []any{}
	if e.codeInCatalog {
		resources = append(resources, map[string]any{"type": "Notify", "title": "code", "exported": false,
			"parameters": map[string]any{"message": req.CodeID}})
	}
	var exports []ExportedResource
	var collects []Collect
	if e.exportsHost {
		if ip, ok := req.Facts["ip"]; ok {
			p, _ := json.Marshal(map[string]any{"ip": ip})
			exports = append(exports, ExportedResource{Type: "Host", Title: req.Certname, Parameters: p})
		}
		if req.Facts["collect_hosts"] == true {
			c := Collect{Type: "Host"}
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
	res := Result{Catalog: b, Exports: exports, Collects: collects}
	if e.reads != nil {
		res.Reads = &FactReads{Clock: e.clock}
		if e.clock {
			res.Reads.ClockWhy = "Timestamp.now (Timestamp.new() or Timestamp()) reads the clock"
		}
		for _, name := range e.reads {
			r, _ := facts.Observe(req.Facts, strings.Split(name, "."), facts.ReadValue)
			res.Reads.Reads = append(res.Reads.Reads, r)
		}
	}
	return res, nil
}

func (e *scriptedEngine) Close() error { return nil }

func (e *scriptedEngine) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

// plainCode is a Code whose snapshots need no checkout and whose catalogs
// are already static.
type plainCode struct{}

func (plainCode) EnvironmentPath(ctx context.Context, codeID string) (string, error) {
	return "/nonexistent/" + codeID, nil
}

func (plainCode) MakeStatic(ctx context.Context, catalog []byte, codeID string) ([]byte, error) {
	return catalog, nil
}

func (plainCode) Publish(ctx context.Context, codeID string, text []byte) ([]byte, error) {
	return text, nil
}

type rig struct {
	store  *memstore.Store
	queue  *memstore.Queue
	intake *Intake
	pool   *Pool
	engine *scriptedEngine
}

func newRig(t *testing.T) *rig {
	t.Helper()
	store := memstore.New()
	queue := memstore.NewQueue(memstore.QueueOptions{})
	filter, err := facts.NewFilter(facts.DefaultVolatile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code1"}); err != nil {
		t.Fatal(err)
	}
	eng := &scriptedEngine{}
	r := &rig{
		store: store, queue: queue, engine: eng,
		intake: &Intake{Content: store, Nodes: store, Envs: store, Queue: queue, Filter: filter},
		pool: &Pool{Queue: queue, Nodes: store, Content: store, Engine: eng, Code: plainCode{},
			Metrics: metrics.New(queue), MaxAttempts: 2, RetryDelay: time.Millisecond},
	}
	r.pool.Collectors = r.intake
	return r
}

func factsDoc(name string, values map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"name": name, "values": values})
	return b
}

func (r *rig) submit(t *testing.T, name string, values map[string]any) Outcome {
	t.Helper()
	doc := factsDoc(name, values)
	out, err := r.intake.Submit(context.Background(), Upload{Certname: name, Environment: "production",
		Document: func() ([]byte, error) { return doc, nil }})
	if err != nil {
		t.Fatalf("submit facts of %s: %v", name, err)
	}
	return out
}

// drain handles every job the queue has now.
func (r *rig) drain(t *testing.T) {
	t.Helper()
	for {
		st, _ := r.queue.Stats(context.Background())
		waiting := 0
		for _, s := range st {
			waiting += s.Depth
		}
		if waiting == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := r.queue.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		r.pool.Handle(context.Background(), d)
	}
}

// withFact returns a copy of base with fact k set to v.
func withFact(base map[string]any, k string, v any) map[string]any {
	m := maps.Clone(base)
	m[k] = v
	return m
}

func TestIntakeDecides(t *testing.T) {
	base := map[string]any{"cf_role": "web", "uptime_seconds": 10, "os": map[string]any{"family": "Debian"}}
	with := func(k string, v any) map[string]any { return withFact(base, k, v) }
	tests := []struct {
		name       string
		second     map[string]any
		newCode    bool
		wantQueued bool
		wantReason string
	}{
		{"same facts", base, false, false, ""},
		{"volatile fact changed", with("uptime_seconds", 99), false, false, ""},
		{"used fact changed", with("cf_role", "db"), false, true, farm.ReasonFactsChanged},
		{"new fact", with("extra", true), false, true, farm.ReasonFactsChanged},
		{"code changed", base, true, true, farm.ReasonCodeChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			first := r.submit(t, "n1", base)
			if !first.Queued || first.Reason != farm.ReasonNewNode {
				t.Fatalf("first upload: %+v, want queued new-node", first)
			}
			r.drain(t)
			if tt.newCode {
				r.store.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: "code2"})
			}
			out := r.submit(t, "n1", tt.second)
			if out.Queued != tt.wantQueued || out.Reason != tt.wantReason {
				t.Errorf("second upload: queued=%v reason=%q, want %v %q", out.Queued, out.Reason, tt.wantQueued, tt.wantReason)
			}
		})
	}
}

func TestIntakeRefusesBadInput(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	tests := []struct {
		name string
		up   Upload
		want error
	}{
		{"bad certname", Upload{Certname: "Bad/Name", Environment: "production"}, farm.ErrInvalid},
		{"bad environment", Upload{Certname: "n1", Environment: "../x"}, farm.ErrInvalid},
		{"unknown environment", Upload{Certname: "n1", Environment: "staging"}, farm.ErrNotFound},
		{"facts not json", Upload{Certname: "n1", Environment: "production",
			Document: func() ([]byte, error) { return []byte("{"), nil }}, farm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := r.intake.Submit(ctx, tt.up); !errors.Is(err, tt.want) {
				t.Fatalf("Submit = %v, want %v", err, tt.want)
			}
			if _, err := r.store.GetNode(ctx, "n1"); !errors.Is(err, farm.ErrNotFound) {
				t.Errorf("a node was stored after refused input: %v", err)
			}
		})
	}
}

func TestIntakeRawKeySkipsDecode(t *testing.T) {
	r := newRig(t)
	doc := factsDoc("n1", map[string]any{"cf_role": "web"})
	calls := 0
	up := Upload{Certname: "n1", Environment: "production", RawKey: farm.DigestOf(doc),
		Document: func() ([]byte, error) { calls++; return doc, nil }}
	for i := 0; i < 3; i++ {
		if _, err := r.intake.Submit(context.Background(), up); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Errorf("document decoded %d times for identical uploads, want 1", calls)
	}
}

func TestPoolStoresCatalog(t *testing.T) {
	r := newRig(t)
	r.submit(t, "n1", map[string]any{"cf_role": "web"})
	r.drain(t)
	n, err := r.store.GetNode(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Catalog == nil || n.Pending() || n.Compile.Result != farm.ResultOK || n.Catalog.CodeID != "code1" {
		t.Fatalf("node after compile: %+v", n)
	}
	for _, d := range []farm.Digest{n.Catalog.Digest, n.Catalog.GzipDigest} {
		if ok, _ := r.store.Has(context.Background(), farm.SpaceCatalogs, d); !ok {
			t.Errorf("catalog blob %s not stored", d)
		}
	}
}

func TestPoolCompileErrorRecorded(t *testing.T) {
	r := newRig(t)
	r.engine.fail = func(Request) error {
		return &CompileError{Message: "Syntax error at '}'", File: "/x/site.pp", Line: 3, Column: 1}
	}
	r.submit(t, "n1", map[string]any{"cf_role": "web"})
	r.drain(t)
	n, _ := r.store.GetNode(context.Background(), "n1")
	if n.Compile == nil || n.Compile.Result != farm.ResultFailed || n.Catalog != nil || n.Pending() {
		t.Fatalf("node after failed compile: %+v", n)
	}
	if n.Compile.Error != "Syntax error at '}' (file: /x/site.pp, line: 3, column: 1)" {
		t.Errorf("error kept = %q", n.Compile.Error)
	}
	if r.engine.count() != 1 {
		t.Errorf("a compile error was retried: %d calls", r.engine.count())
	}
}

func TestPoolTransientRetriedThenRecorded(t *testing.T) {
	r := newRig(t)
	r.engine.fail = func(Request) error { return fmt.Errorf("worker crashed: %w", farm.ErrTransient) }
	r.submit(t, "n1", map[string]any{"cf_role": "web"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := r.store.GetNode(context.Background(), "n1")
		if !n.Pending() {
			if n.Compile.Result != farm.ResultFailed {
				t.Fatalf("after retries: %+v", n.Compile)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job never finished")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, err := r.queue.Receive(ctx)
		cancel()
		if err == nil {
			r.pool.Handle(context.Background(), d)
		}
	}
	if got := r.engine.count(); got != 2 {
		t.Errorf("engine called %d times, want MaxAttempts=2", got)
	}
}

// TestPoolNewestWins delivers two compiles of one node and finishes them in
// both orders: the stored catalog is always the newer one.
func TestPoolNewestWins(t *testing.T) {
	for _, order := range []string{"in order", "reversed"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t)
			ctx := context.Background()
			store := r.store
			mk := func(role string, seq uint64) farm.Delivery {
				doc := factsDoc("n1", map[string]any{"cf_role": role})
				d, _ := store.Put(ctx, farm.SpaceFacts, doc)
				return farm.Delivery{Job: farm.Job{Certname: "n1", Environment: "production", CodeID: "code1",
					FactsDigest: d, Seq: seq, Lane: farm.LaneUrgent}, ID: fmt.Sprint(seq), Attempts: 1}
			}
			store.UpdateNode(ctx, "n1", func(n *farm.Node) error {
				n.RequestSeq = 2
				n.Requested = &farm.CompileRequest{Seq: 2, Environment: "production", CodeID: "code1"}
				return nil
			})
			old, newer := mk("web", 1), mk("db", 2)
			first, second := old, newer
			if order == "reversed" {
				first, second = newer, old
			}
			// Bypass the skip of superseded jobs for the old one by compiling
			// directly, as a second worker that read the node early would.
			for _, d := range []farm.Delivery{first, second} {
				r.pool.compile(ctx, d, r.pool.log())
			}
			n, _ := store.GetNode(ctx, "n1")
			if n.Catalog == nil || n.Catalog.Seq != 2 {
				t.Fatalf("stored catalog seq = %+v, want 2", n.Catalog)
			}
			b, _ := store.Get(ctx, farm.SpaceCatalogs, n.Catalog.Digest)
			var cat map[string]any
			json.Unmarshal(b, &cat)
			if cat["facts_seen"] != "db" {
				t.Errorf("catalog compiled from %v, want the newer facts (db)", cat["facts_seen"])
			}
		})
	}
}

// TestRequeuePending loses a queued job (as a crash between recording the
// request and queueing it would) and checks that RequeuePending restores it.
func TestRequeuePending(t *testing.T) {
	r := newRig(t)
	r.submit(t, "n1", map[string]any{"cf_role": "web"})
	r.submit(t, "n2", map[string]any{"cf_role": "web"})
	r.drain(t) // both compiled
	r.submit(t, "n1", map[string]any{"cf_role": "db"})
	// Drop n1's job on the floor.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	d, err := r.queue.Receive(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	r.queue.Ack(context.Background(), d)

	n, err := r.intake.RequeuePending(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("RequeuePending = %d, %v; want 1 (only n1 is pending)", n, err)
	}
	r.drain(t)
	node, _ := r.store.GetNode(context.Background(), "n1")
	if node.Pending() || node.Catalog == nil || node.Catalog.Seq != node.Requested.Seq {
		t.Errorf("n1 after requeue: %+v", node)
	}
}

// TestPoolUnchangedRecompile deploys new code that compiles to the same
// catalog: the compile is recorded as unchanged and the node keeps its
// catalog bytes; a code change that does change the catalog moves it.
func TestPoolUnchangedRecompile(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.submit(t, "n1", map[string]any{"cf_role": "web"})
	r.drain(t)
	first, _ := r.store.GetNode(ctx, "n1")

	r.store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2"})
	if n, err := r.intake.Requeue(ctx, "production", farm.LaneBulk); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	r.drain(t)
	n, _ := r.store.GetNode(ctx, "n1")
	if n.Compile.Result != farm.ResultUnchanged || n.Catalog.Digest != first.Catalog.Digest || n.Pending() {
		t.Fatalf("after an unchanged recompile: compile %+v, catalog %s (was %s), pending %v",
			n.Compile, n.Catalog.Digest, first.Catalog.Digest, n.Pending())
	}
	if got := testutilCounter(r, "unchanged"); got != 1 {
		t.Errorf("unchanged compiles counted = %v, want 1", got)
	}

	r.submit(t, "n1", map[string]any{"cf_role": "db"})
	r.drain(t)
	n, _ = r.store.GetNode(ctx, "n1")
	if n.Compile.Result != farm.ResultOK || n.Catalog.Digest == first.Catalog.Digest || n.Catalog.CodeID != "code2" {
		t.Errorf("after a changing recompile: compile %+v, catalog code %s", n.Compile, n.Catalog.CodeID)
	}
}

func testutilCounter(r *rig, result string) float64 {
	m := &dto.Metric{}
	r.pool.Metrics.Compiles.WithLabelValues(result).Write(m)
	return m.GetCounter().GetValue()
}

// TestIntakeUsesRecordedReads: with a record of the facts a catalog read,
// only changes to those facts compile; the volatile list no longer matters.
func TestIntakeUsesRecordedReads(t *testing.T) {
	base := map[string]any{"cf_role": "web", "kernel": "6.1", "uptime_seconds": 10}
	with := func(k string, v any) map[string]any { return withFact(base, k, v) }
	tests := []struct {
		name       string
		second     map[string]any
		wantQueued bool
	}{
		{"unread fact changed", with("kernel", "6.2"), false},
		{"new unread fact", with("extra", 1), false},
		{"volatile fact changed", with("uptime_seconds", 99), false},
		{"read fact changed", with("cf_role", "db"), true},
		{"read fact changed type", with("cf_role", 1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.engine.reads = []string{"cf_role"}
			r.submit(t, "n1", base)
			r.drain(t)
			if out := r.submit(t, "n1", tt.second); out.Queued != tt.wantQueued {
				t.Errorf("queued = %v (%s), want %v", out.Queued, out.Reason, tt.wantQueued)
			}
			// An upload that queues nothing is not written until the
			// facts are FactsRefresh old; then the node takes them.
			n, _ := r.store.GetNode(context.Background(), "n1")
			latest := farm.DigestOf(factsDoc("n1", tt.second))
			if tt.wantQueued != (n.FactsDigest == latest) {
				t.Errorf("facts written = %v, want %v (only with a compile)", n.FactsDigest == latest, tt.wantQueued)
			}
			now := time.Now().Add(time.Hour)
			r.intake.Now = func() time.Time { return now }
			r.submit(t, "n1", tt.second)
			if n, _ := r.store.GetNode(context.Background(), "n1"); n.FactsDigest != latest {
				t.Errorf("facts not refreshed after FactsRefresh")
			}
		})
	}
}

// TestExportedResources: node a exports a Host, node b collects Hosts.
// When a's export changes, b is recompiled (once) and gets the new Host.
func TestExportedResources(t *testing.T) {
	r := newRig(t)
	r.engine.exportsHost = true
	r.engine.reads = []string{"ip", "collect_hosts"}
	ctx := context.Background()
	r.submit(t, "a", map[string]any{"ip": "10.0.0.1"})
	r.drain(t)
	r.submit(t, "b", map[string]any{"collect_hosts": true})
	r.drain(t)
	hostIP := func() string {
		t.Helper()
		n, _ := r.store.GetNode(ctx, "b")
		b, _ := r.store.Get(ctx, farm.SpaceCatalogs, n.Catalog.Digest)
		var c struct {
			Resources []struct {
				Type       string
				Title      string
				Parameters map[string]any
			}
		}
		json.Unmarshal(b, &c)
		for _, res := range c.Resources {
			if res.Type == "Host" && res.Title == "a" {
				return fmt.Sprint(res.Parameters["ip"])
			}
		}
		return ""
	}
	if got := hostIP(); got != "10.0.0.1" {
		t.Fatalf("b collected Host[a] ip = %q", got)
	}
	a, _ := r.store.GetNode(ctx, "a")
	b, _ := r.store.GetNode(ctx, "b")
	if a.ExportsDigest == "" || a.ExportTypes[0] != "Host" || b.Collects[0] != "Host" {
		t.Fatalf("exports/collects not recorded: a %v %v, b %v", a.ExportsDigest, a.ExportTypes, b.Collects)
	}

	before := r.engine.count()
	r.submit(t, "a", map[string]any{"ip": "10.0.0.2"})
	r.drain(t)
	if got := r.engine.count() - before; got != 2 {
		t.Errorf("export change caused %d compiles, want 2 (a, then its collector b)", got)
	}
	if got := hostIP(); got != "10.0.0.2" {
		t.Errorf("after a's export changed, b collects ip %q", got)
	}
	nb, _ := r.store.GetNode(ctx, "b")
	if nb.Requested.Reason != farm.ReasonExports {
		t.Errorf("b's recompile reason = %q", nb.Requested.Reason)
	}
	// Only the collector's compiles were handed the environment's exports
	// (listing them scans every node).
	if r.engine.gotExports["a"] != 0 || r.engine.gotExports["b"] == 0 {
		t.Errorf("compiles given exports: %v, want only b's", r.engine.gotExports)
	}
	// A change of a's facts that does not change its exports leaves b alone.
	before = r.engine.count()
	r.submit(t, "a", map[string]any{"ip": "10.0.0.2", "unrelated": 1})
	r.drain(t)
	if got := r.engine.count() - before; got != 0 {
		t.Errorf("an unread fact change caused %d compiles", got)
	}
}

// TestPendingCompileJudgedByReads: while a node's recompile is queued,
// uploads that change only unread facts do not queue it again (each new
// request would supersede the compile in flight).
func TestPendingCompileJudgedByReads(t *testing.T) {
	r := newRig(t)
	r.engine.reads = []string{"cf_role"}
	r.submit(t, "n1", map[string]any{"cf_role": "web", "noise": 0})
	r.drain(t)
	first := r.submit(t, "n1", map[string]any{"cf_role": "db", "noise": 1})
	if !first.Queued {
		t.Fatal("a read fact change queued nothing")
	}
	for i := 2; i < 6; i++ {
		if out := r.submit(t, "n1", map[string]any{"cf_role": "db", "noise": i}); out.Queued {
			t.Fatalf("upload %d (only an unread fact changed) queued a compile while one is pending", i)
		}
	}
	if out := r.submit(t, "n1", map[string]any{"cf_role": "app", "noise": 9}); !out.Queued {
		t.Error("a read fact change while pending queued nothing")
	}
	n, _ := r.store.GetNode(context.Background(), "n1")
	if n.RequestSeq != first.Node.RequestSeq+1 {
		t.Errorf("request seq went %d -> %d, want one more request", first.Node.RequestSeq, n.RequestSeq)
	}
}

func TestRecordCacheIsBounded(t *testing.T) {
	c := recordCache[int]{max: 3}
	for i := 0; i < 10; i++ {
		c.Store(farm.Digest(fmt.Sprint(i)), i)
		if len(c.entries) > 3 {
			t.Fatalf("cache holds %d entries, max 3", len(c.entries))
		}
	}
	if v, ok := c.Load("9"); !ok || v != 9 {
		t.Errorf("latest entry lost: %v %v", v, ok)
	}
}

func TestHandleBatch(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	job := func(name, role string, seq uint64) []byte {
		doc := factsDoc(name, map[string]any{"cf_role": role})
		d, _ := r.store.Put(ctx, farm.SpaceFacts, doc)
		r.store.UpdateNode(ctx, name, func(n *farm.Node) error {
			n.RequestSeq = seq
			n.Requested = &farm.CompileRequest{Seq: seq, Environment: "production", CodeID: "code1", FactsDigest: d}
			return nil
		})
		b, _ := json.Marshal(farm.Job{Certname: name, Environment: "production", CodeID: "code1", FactsDigest: d, Seq: seq, Lane: farm.LaneUrgent})
		return b
	}
	r.engine.fail = func(req Request) error {
		switch req.Certname {
		case "crash":
			return fmt.Errorf("worker died: %w", farm.ErrTransient)
		case "broken":
			return &CompileError{Message: "Syntax error"}
		}
		return nil
	}
	items := []BatchItem{
		{ID: "m1", Body: job("ok1", "web", 1), ReceiveCount: 1},
		{ID: "m2", Body: job("crash", "web", 1), ReceiveCount: 1},
		{ID: "m3", Body: job("broken", "web", 1), ReceiveCount: 1},
		{ID: "m4", Body: []byte("{not json"), ReceiveCount: 1},
		{ID: "m5", Body: job("ok1", "web", 1), ReceiveCount: 2}, // redelivered duplicate
	}
	failed := r.pool.HandleBatch(ctx, items, 3)
	if strings.Join(failed, ",") != "m2,m3,m4" {
		t.Fatalf("failed items = %v, want [m2 m3 m4] (the crash, the compile error and the malformed job)", failed)
	}
	if n, _ := r.store.GetNode(ctx, "ok1"); n.Catalog == nil || n.Catalog.Seq != 1 {
		t.Errorf("ok1 has no catalog: %+v", n.Catalog)
	}
	if n, _ := r.store.GetNode(ctx, "broken"); n.Compile == nil || n.Compile.Result != farm.ResultFailed {
		t.Errorf("broken's compile error not recorded: %+v", n.Compile)
	}
	// Last delivery of the crashing job: still reported failed (the queue
	// dead-letters it) and the error recorded on the node.
	failed = r.pool.HandleBatch(ctx, []BatchItem{{ID: "m6", Body: job("crash", "web", 1), ReceiveCount: 3}}, 3)
	if len(failed) != 1 {
		t.Errorf("last delivery not reported failed: %v", failed)
	}
	if n, _ := r.store.GetNode(ctx, "crash"); n.Compile == nil || !strings.Contains(n.Compile.Error, "dead-lettered") {
		t.Errorf("crash's final error not recorded: %+v", n.Compile)
	}
	// Out of time: nothing attempted, everything comes back.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if failed := r.pool.HandleBatch(done, items[:2], 3); len(failed) != 2 {
		t.Errorf("cancelled batch: failed = %v, want both", failed)
	}
}
