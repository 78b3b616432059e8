package compiler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/classifier"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestPoolStoresCatalog(t *testing.T) {
	r := flowtest.New(t)
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Drain(t)
	n, err := r.Store.GetNode(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Catalog == nil || n.Pending() || n.Compile.Result != farm.ResultOK || n.Catalog.CodeID != "code1" {
		t.Fatalf("node after compile: %+v", n)
	}
	for _, d := range []farm.Digest{n.Catalog.Digest, n.Catalog.GzipDigest} {
		if ok, _ := r.Store.Has(context.Background(), farm.SpaceCatalogs, d); !ok {
			t.Errorf("catalog blob %s not stored", d)
		}
	}
}

func TestPoolCompileErrorRecorded(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.Fail = func(compiler.Request) error {
		return &compiler.CompileError{Message: "Syntax error at '}'", File: "/x/site.pp", Line: 3, Column: 1}
	}
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Drain(t)
	n, _ := r.Store.GetNode(context.Background(), "n1")
	if n.Compile == nil || n.Compile.Result != farm.ResultFailed || n.Catalog != nil || n.Pending() {
		t.Fatalf("node after failed compile: %+v", n)
	}
	if n.Compile.Error != "Syntax error at '}' (file: /x/site.pp, line: 3, column: 1)" {
		t.Errorf("error kept = %q", n.Compile.Error)
	}
	if r.Engine.Count() != 1 {
		t.Errorf("a compile error was retried: %d calls", r.Engine.Count())
	}
}

func TestPoolTransientRetriedThenRecorded(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.Fail = func(compiler.Request) error { return fmt.Errorf("worker crashed: %w", farm.ErrTransient) }
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := r.Store.GetNode(context.Background(), "n1")
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
		d, err := r.Queue.Receive(ctx)
		cancel()
		if err == nil {
			r.Pool.Handle(context.Background(), d)
		}
	}
	if got := r.Engine.Count(); got != 2 {
		t.Errorf("engine called %d times, want MaxAttempts=2", got)
	}
}

// TestPoolUnchangedRecompile deploys new code that compiles to the same
// catalog: the compile is recorded as unchanged and the node keeps its
// catalog bytes; a code change that does change the catalog moves it.
func TestPoolUnchangedRecompile(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Drain(t)
	first, _ := r.Store.GetNode(ctx, "n1")

	r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2"})
	if n, err := r.Intake.Requeue(ctx, "production", farm.LaneBulk); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	r.Drain(t)
	n, _ := r.Store.GetNode(ctx, "n1")
	if n.Compile.Result != farm.ResultUnchanged || n.Catalog.Digest != first.Catalog.Digest || n.Pending() {
		t.Fatalf("after an unchanged recompile: compile %+v, catalog %s (was %s), pending %v",
			n.Compile, n.Catalog.Digest, first.Catalog.Digest, n.Pending())
	}
	if got := testutilCounter(r, "unchanged"); got != 1 {
		t.Errorf("unchanged compiles counted = %v, want 1", got)
	}

	r.Submit(t, "n1", map[string]any{"cf_role": "db"})
	r.Drain(t)
	n, _ = r.Store.GetNode(ctx, "n1")
	if n.Compile.Result != farm.ResultOK || n.Catalog.Digest == first.Catalog.Digest || n.Catalog.CodeID != "code2" {
		t.Errorf("after a changing recompile: compile %+v, catalog code %s", n.Compile, n.Catalog.CodeID)
	}
}

func testutilCounter(r *flowtest.Rig, result string) float64 {
	m := &dto.Metric{}
	r.Pool.Metrics.Compiles.WithLabelValues(result).Write(m)
	return m.GetCounter().GetValue()
}

// TestExportedResources: node a exports a Host, node b collects Hosts.
// When a's export changes, b is recompiled (once) and gets the new Host.
func TestExportedResources(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.ExportsHost = true
	r.Engine.Reads = []string{"ip", "collect_hosts"}
	ctx := context.Background()
	r.Submit(t, "a", map[string]any{"ip": "10.0.0.1"})
	r.Drain(t)
	r.Submit(t, "b", map[string]any{"collect_hosts": true})
	r.Drain(t)
	hostIP := func() string {
		t.Helper()
		n, _ := r.Store.GetNode(ctx, "b")
		b, _ := r.Store.Get(ctx, farm.SpaceCatalogs, n.Catalog.Digest)
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
	a, _ := r.Store.GetNode(ctx, "a")
	b, _ := r.Store.GetNode(ctx, "b")
	if a.ExportsDigest == "" || a.ExportTypes[0] != "Host" || b.Collects[0] != "Host" {
		t.Fatalf("exports/collects not recorded: a %v %v, b %v", a.ExportsDigest, a.ExportTypes, b.Collects)
	}

	before := r.Engine.Count()
	r.Submit(t, "a", map[string]any{"ip": "10.0.0.2"})
	r.Drain(t)
	if got := r.Engine.Count() - before; got != 2 {
		t.Errorf("export change caused %d compiles, want 2 (a, then its collector b)", got)
	}
	if got := hostIP(); got != "10.0.0.2" {
		t.Errorf("after a's export changed, b collects ip %q", got)
	}
	nb, _ := r.Store.GetNode(ctx, "b")
	if nb.Requested.Reason != farm.ReasonExports {
		t.Errorf("b's recompile reason = %q", nb.Requested.Reason)
	}
	// Only the collector's compiles were handed the environment's exports
	// (found through the exporters index).
	if r.Engine.GotExports("a") != 0 || r.Engine.GotExports("b") == 0 {
		t.Errorf("compiles given exports: a %d, b %d; want only b's", r.Engine.GotExports("a"), r.Engine.GotExports("b"))
	}
	// A change of a's facts that does not change its exports leaves b alone.
	before = r.Engine.Count()
	r.Submit(t, "a", map[string]any{"ip": "10.0.0.2", "unrelated": 1})
	r.Drain(t)
	if got := r.Engine.Count() - before; got != 0 {
		t.Errorf("an unread fact change caused %d compiles", got)
	}
}

func TestHandleBatch(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	job := func(name, role string, seq uint64) []byte {
		doc := flowtest.FactsDoc(name, map[string]any{"cf_role": role})
		d, _ := r.Store.Put(ctx, farm.SpaceFacts, doc)
		r.Store.UpdateNode(ctx, name, func(n *farm.Node) error {
			n.RequestSeq = seq
			n.Requested = &farm.CompileRequest{Seq: seq, Environment: "production", CodeID: "code1", FactsDigest: d}
			return nil
		})
		b, _ := json.Marshal(farm.Job{Certname: name, Environment: "production", CodeID: "code1", FactsDigest: d, Seq: seq, Lane: farm.LaneUrgent})
		return b
	}
	r.Engine.Fail = func(req compiler.Request) error {
		switch req.Certname {
		case "crash":
			return fmt.Errorf("worker died: %w", farm.ErrTransient)
		case "broken":
			return &compiler.CompileError{Message: "Syntax error"}
		}
		return nil
	}
	items := []compiler.BatchItem{
		{ID: "m1", Body: job("ok1", "web", 1), ReceiveCount: 1},
		{ID: "m2", Body: job("crash", "web", 1), ReceiveCount: 1},
		{ID: "m3", Body: job("broken", "web", 1), ReceiveCount: 1},
		{ID: "m4", Body: []byte("{not json"), ReceiveCount: 1},
		{ID: "m5", Body: job("ok1", "web", 1), ReceiveCount: 2}, // redelivered duplicate
	}
	failed := r.Pool.HandleBatch(ctx, items, 3)
	if strings.Join(failed, ",") != "m2,m3,m4" {
		t.Fatalf("failed items = %v, want [m2 m3 m4] (the crash, the compile error and the malformed job)", failed)
	}
	if n, _ := r.Store.GetNode(ctx, "ok1"); n.Catalog == nil || n.Catalog.Seq != 1 {
		t.Errorf("ok1 has no catalog: %+v", n.Catalog)
	}
	if n, _ := r.Store.GetNode(ctx, "broken"); n.Compile == nil || n.Compile.Result != farm.ResultFailed {
		t.Errorf("broken's compile error not recorded: %+v", n.Compile)
	}
	// Last delivery of the crashing job: still reported failed (the queue
	// dead-letters it) and the error recorded on the node.
	failed = r.Pool.HandleBatch(ctx, []compiler.BatchItem{{ID: "m6", Body: job("crash", "web", 1), ReceiveCount: 3}}, 3)
	if len(failed) != 1 {
		t.Errorf("last delivery not reported failed: %v", failed)
	}
	if n, _ := r.Store.GetNode(ctx, "crash"); n.Compile == nil || !strings.Contains(n.Compile.Error, "dead-lettered") {
		t.Errorf("crash's final error not recorded: %+v", n.Compile)
	}
	// Out of time: nothing attempted, everything comes back.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if failed := r.Pool.HandleBatch(done, items[:2], 3); len(failed) != 2 {
		t.Errorf("cancelled batch: failed = %v, want both", failed)
	}
}

// TestPoolClassifiesAgain: a pool with a classifier compiles with its
// current answer (a code deploy picks up new classes) and records it on the
// catalog, so the next check-in with that answer compiles nothing.
func TestPoolClassifiesAgain(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	enc := &flowtest.Classifier{}
	r.Intake.Classifier, r.Pool.Classifier = enc, enc
	values := map[string]any{"cf_role": "web"}
	enc.Set("n1", classifier.Classification{Classes: []string{"base"}})
	if _, err := r.SubmitAs(t, "n1", "production", nil, values); err != nil {
		t.Fatal(err)
	}
	r.Drain(t)

	enc.Set("n1", classifier.Classification{Classes: []string{"base", "ntp"}})
	if err := r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Intake.Requeue(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	r.Drain(t)
	if got := r.Engine.GotNode("n1").Classes; !flowtest.SameJSON(got, []string{"base", "ntp"}) {
		t.Fatalf("the deploy's compile got classes %v, want the classifier's current answer", got)
	}
	n, _ := r.Store.GetNode(ctx, "n1")
	if n.Catalog == nil || n.Catalog.NodeInfo == n.Requested.NodeInfo {
		t.Fatalf("the catalog does not record the compile's own classification: %+v", n.Catalog)
	}
	calls := r.Engine.Count()
	if out, err := r.SubmitAs(t, "n1", "production", nil, values); err != nil || out.Queued {
		t.Errorf("check-in with the classification the catalog has: %+v %v, want nothing queued", out, err)
	}
	if r.Engine.Count() != calls {
		t.Errorf("compiled again")
	}

	// A failing classifier at compile time is retried, then recorded.
	if err := r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Intake.Requeue(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	enc.Forget("n1")
	for i := 0; i < r.Pool.MaxAttempts; i++ {
		r.Drain(t)
	}
	n, _ = r.Store.GetNode(ctx, "n1")
	if n.Compile == nil || n.Compile.Result != farm.ResultFailed || !strings.Contains(n.Compile.Error, "Failed when searching for node n1") {
		t.Errorf("compile status after the classifier failed: %+v", n.Compile)
	}
}

// TestPoolRecordsQueries: the PuppetDB queries of a compile's read record
// reach the node record as digests, and their texts the content store.
func TestPoolRecordsQueries(t *testing.T) {
	r := flowtest.New(t)
	q1 := farm.QueryReadOf([]byte(`"nodes { facts.os.family = 'Debian' }"`), []byte(`[{"certname":"a"}]`))
	q2 := farm.QueryReadOf([]byte(`["from", "resources", ["=", "type", "Sshkey"]]`), []byte(`[]`))
	r.Engine.Reads = []string{"cf_role"}
	r.Engine.Queries = []farm.QueryRead{q2, q1}
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Drain(t)
	ctx := context.Background()
	n := r.Node(t, "n1")
	want := []farm.Digest{q1.QueryDigest, q2.QueryDigest}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if fmt.Sprint(n.Queries) != fmt.Sprint(want) {
		t.Fatalf("node queries %v, want %v (sorted)", n.Queries, want)
	}
	for _, q := range []farm.QueryRead{q1, q2} {
		b, err := r.Store.Get(ctx, farm.SpaceCatalogs, q.QueryDigest)
		if err != nil || string(b) != string(q.Query) {
			t.Errorf("query text %s: %q, %v; want %s", q.QueryDigest, b, err, q.Query)
		}
	}
	page, err := r.Store.QueryNodes(ctx, farm.NodeQuery{Environment: n.Environment, Query: q1.QueryDigest})
	if err != nil || len(page.Nodes) != 1 || page.Nodes[0].Certname != "n1" {
		t.Fatalf("nodes by query: %+v, %v", page, err)
	}
	b, err := r.Store.Get(ctx, farm.SpaceCatalogs, n.Catalog.ReadsDigest)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Queries []farm.QueryRead `json:"queries"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || len(rec.Queries) != 2 || rec.Queries[1].ResultDigest != q1.ResultDigest {
		t.Fatalf("read record queries %+v, %v", rec.Queries, err)
	}
}

// TestPoolRetiresDroppedCatalogs: a catalog that falls out of the node's
// History is retired (plain and gzipped), the catalogs the node refers to
// are not, and a catalog the node comes back to is kept again.
func TestPoolRetiresDroppedCatalogs(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	retired := func(d farm.Digest) bool {
		t.Helper()
		ok, err := r.Store.Retired(ctx, farm.SpaceCatalogs, d)
		if err != nil {
			t.Fatalf("retired %s: %v", d, err)
		}
		return ok
	}
	compile := func(role string) farm.Node {
		t.Helper()
		r.Submit(t, "n1", map[string]any{"cf_role": role})
		r.Drain(t)
		n, err := r.Store.GetNode(ctx, "n1")
		if err != nil || n.Catalog == nil || n.Compile.Result != farm.ResultOK {
			t.Fatalf("node after compiling role %s: %+v, %v", role, n, err)
		}
		return n
	}
	first := *compile("role0").Catalog
	for i := 1; i <= farm.HistoryLen; i++ {
		n := compile(fmt.Sprint("role", i))
		for _, d := range n.CatalogBlobs() {
			if retired(d) {
				t.Fatalf("after %d changes: blob %s the node refers to is retired", i, d)
			}
		}
	}
	n := compile("role-last") // role0's catalog falls out of History
	for _, d := range []farm.Digest{first.Digest, first.GzipDigest} {
		if !retired(d) {
			t.Errorf("blob %s of the catalog that fell out of History is not retired", d)
		}
	}
	for _, d := range n.CatalogBlobs() {
		if retired(d) {
			t.Errorf("blob %s the node refers to is retired", d)
		}
	}
	n = compile("role0") // back to the first catalog
	if n.Catalog.Digest != first.Digest {
		t.Fatalf("role0 again compiled to %s, first time %s", n.Catalog.Digest, first.Digest)
	}
	for _, d := range n.CatalogBlobs() {
		if retired(d) {
			t.Errorf("blob %s the node refers to again is still retired", d)
		}
	}
}
