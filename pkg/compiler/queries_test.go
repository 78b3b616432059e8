package compiler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// countingRecorder is a compiler.QueryRecorder over a farm.QueryStore that
// counts calls and fails while fail is set.
type countingRecorder struct {
	farm.QueryStore
	mu    sync.Mutex
	calls []string // "ENV n" per call
	fail  error
}

func (c *countingRecorder) RecordQueries(ctx context.Context, env string, qs []farm.Digest) error {
	c.mu.Lock()
	c.calls = append(c.calls, fmt.Sprintf("%s %d", env, len(qs)))
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		return fail
	}
	return c.QueryStore.RecordQueries(ctx, env, qs)
}

func (c *countingRecorder) takeCalls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// TestPoolRecordsQueriesOnce: the queries of a served catalog reach the
// QueryStore once per environment and query in a process; a failure to
// record them leaves the compile standing and is tried again by the next.
func TestPoolRecordsQueriesOnce(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	if err := r.Store.PutEnvironment(ctx, farm.Environment{Name: "test", CodeID: "code1"}); err != nil {
		t.Fatal(err)
	}
	rec := &countingRecorder{QueryStore: r.Store}
	r.Pool.Queries = rec
	q1 := farm.QueryReadOf([]byte(`"nodes { facts.os.family = 'Debian' }"`), []byte(`[]`))
	q2 := farm.QueryReadOf([]byte(`["from","resources",["=","type","Sshkey"]]`), []byte(`[]`))
	r.Engine.Reads = []string{"cf_role"}
	r.Engine.Queries = []farm.QueryRead{q1, q2}

	steps := []struct {
		name      string
		node, env string
		role      string
		wantCalls []string
	}{
		{"first compile records both", "n1", "production", "web", []string{"production 2"}},
		{"another node making them records nothing", "n2", "production", "web", nil},
		{"a recompile records nothing", "n1", "production", "db", nil},
		{"another environment records them there", "n3", "test", "web", []string{"test 2"}},
	}
	for _, st := range steps {
		if _, err := r.SubmitAs(t, st.node, st.env, nil, map[string]any{"cf_role": st.role}); err != nil {
			t.Fatalf("%s: submit: %v", st.name, err)
		}
		r.Drain(t)
		if got := rec.takeCalls(); !slices.Equal(got, st.wantCalls) {
			t.Errorf("%s: RecordQueries calls %q, want %q", st.name, got, st.wantCalls)
		}
	}
	p, err := r.Store.ListQueries(ctx, farm.QueryList{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Queries) != 4 {
		t.Fatalf("recorded %+v, want q1 and q2 in production and test", p.Queries)
	}

	// A failing store: the catalog is still served, and the next compile
	// that makes the query records it.
	r2 := flowtest.New(t)
	rec2 := &countingRecorder{QueryStore: r2.Store, fail: errors.New("store down")}
	r2.Pool.Queries = rec2
	r2.Engine.Reads, r2.Engine.Queries = []string{"cf_role"}, []farm.QueryRead{q1}
	r2.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r2.Drain(t)
	if n := r2.Node(t, "n1"); n.Catalog == nil || n.Compile == nil || n.Compile.Result != farm.ResultOK {
		t.Fatalf("node after a compile whose queries could not be recorded: %+v", n)
	}
	rec2.fail = nil
	r2.Submit(t, "n1", map[string]any{"cf_role": "db"})
	r2.Drain(t)
	if got, want := rec2.takeCalls(), []string{"production 1", "production 1"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q (the failed one, then again)", got, want)
	}
}
