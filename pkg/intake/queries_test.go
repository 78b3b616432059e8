package intake_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
)

// TestRecompileQueriers: a query's new result queues exactly the nodes of
// the environment whose catalog recorded another result for it, with a
// reason that names the query; not those with the new result, nor those
// whose compile was requested since the change.
func TestRecompileQueriers(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	if err := r.Store.PutEnvironment(ctx, farm.Environment{Name: "test", CodeID: "code1"}); err != nil {
		t.Fatal(err)
	}
	const text = `nodes[certname] { facts.cf_role = "web" }`
	query := []byte(`"nodes[certname] { facts.cf_role = \"web\" }"`)
	old := farm.QueryReadOf(query, []byte(`[{"certname":"web1"}]`))
	now := farm.QueryReadOf(query, []byte(`[{"certname":"web1"},{"certname":"web2"}]`))
	other := farm.QueryReadOf([]byte(`"nodes {}"`), []byte(`[]`))
	r.Engine.Reads = []string{"cf_role"}
	compile := func(node, env string, queries ...farm.QueryRead) {
		t.Helper()
		r.Engine.Queries = queries
		if _, err := r.SubmitAs(t, node, env, nil, map[string]any{"cf_role": "lb"}); err != nil {
			t.Fatal(err)
		}
		r.Drain(t)
	}
	compile("stale.example.com", "production", old, other)
	compile("fresh.example.com", "production", now)
	compile("none.example.com", "production", other)
	compile("elsewhere.example.com", "test", old)
	before := r.Engine.Count()

	change := intake.QueryChange{Environment: "production", Query: now.QueryDigest, Text: text, Result: now.ResultDigest, Since: time.Now()}
	steps := []struct {
		name  string
		since time.Time
		want  intake.QueriersResult
	}{
		{"the node with the old result is queued", change.Since, intake.QueriersResult{Nodes: 2, Queued: 1}},
		{"not again while its compile requested since is pending", change.Since, intake.QueriersResult{Nodes: 2, Queued: 0}},
		{"again when the change is newer than its request", time.Now().Add(time.Minute), intake.QueriersResult{Nodes: 2, Queued: 1}},
	}
	for _, st := range steps {
		c := change
		c.Since = st.since
		got, err := r.Intake.RecompileQueriers(ctx, c)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got != st.want {
			t.Errorf("%s: %+v, want %+v", st.name, got, st.want)
		}
	}
	for _, n := range []string{"fresh.example.com", "none.example.com", "elsewhere.example.com"} {
		if node := r.Node(t, n); node.Pending() {
			t.Errorf("%s was queued: %+v", n, node.Requested)
		}
	}
	ex, err := r.Intake.Explain(ctx, "stale.example.com")
	if err != nil {
		t.Fatal(err)
	}
	req := ex.Request
	if req == nil || req.Reason != farm.ReasonQuery || req.Lane != farm.LaneUrgent || ex.State != intake.RequestPending || req.Cause == nil ||
		req.Cause.Input != farm.CauseQueryResult || req.Cause.Old != string(old.ResultDigest) || req.Cause.New != string(now.ResultDigest) ||
		!strings.Contains(req.Cause.Note, text) {
		t.Fatalf("explain: %+v, request %+v, cause %+v; want the query named", ex, req, req.Cause)
	}
	if ex.Reads == nil || len(ex.Reads.Queries) != 2 || ex.Reads.Queries[0] != text {
		t.Errorf("explain's reads: %+v, want the catalog's two queries", ex.Reads)
	}
	r.Engine.Queries = []farm.QueryRead{now, other}
	r.Drain(t)
	if got := r.Engine.Count() - before; got != 1 {
		t.Errorf("%d compiles, want 1 (the stale node's, its two jobs collapsed)", got)
	}
	got, err := r.Intake.RecompileQueriers(ctx, change)
	if err != nil || got != (intake.QueriersResult{Nodes: 2}) {
		t.Errorf("after the stale node compiled with the new result: %+v, %v; want 2 nodes, none queued", got, err)
	}
	gone := change
	gone.Environment = "gone"
	if got, err := r.Intake.RecompileQueriers(ctx, gone); err != nil || got != (intake.QueriersResult{}) {
		t.Errorf("an environment that does not exist: %+v, %v; want nothing, no error", got, err)
	}
}
