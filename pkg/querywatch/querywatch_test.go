package querywatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/querywatch"
)

// countingPuppetDB is a querywatch.PuppetDB on a real PuppetDB's query
// API (GET /pdb/query/v4?query=, as pkg/puppetdb.Client asks), counting
// the calls per query.
type countingPuppetDB struct {
	base  string
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingPuppetDB) Query(ctx context.Context, query string) ([]byte, error) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[query]++
	c.mu.Unlock()
	return c.ask(ctx, query)
}

// ask runs query without counting it: what a compile asks.
func (c *countingPuppetDB) ask(ctx context.Context, query string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/pdb/query/v4?"+url.Values{"query": {query}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("PuppetDB answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// takeCalls returns the calls per query since the last take.
func (c *countingPuppetDB) takeCalls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// submitFacts replaces the facts of PuppetDB node certname.
func submitFacts(t *testing.T, pdb *puppetdbtest.PuppetDB, certname string, values map[string]any) {
	t.Helper()
	payload, err := json.Marshal(map[string]any{
		"certname": certname, "environment": "production", "producer": "refresh.test",
		"producer_timestamp": time.Now().UTC().Format(time.RFC3339Nano), "values": values,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pdb.Submit(t.Context(), "replace_facts", 5, certname, payload); err != nil {
		t.Fatalf("replace facts of %s: %v", certname, err)
	}
}

// TestRefresh follows recorded queries through rounds against a real
// PuppetDB and the real intake on an in-memory farm: each distinct query
// is run once a round however many nodes and environments made it; when
// its answer changes exactly the nodes whose catalog recorded another
// answer are queued, with a reason naming the query; a node that compiled
// with the old answer after the change was seen is caught by the recheck;
// a query PuppetDB refuses keeps its stored result.
func TestRefresh(t *testing.T) {
	pdb := puppetdbtest.Shared(t)
	ctx := t.Context()
	client := &countingPuppetDB{base: pdb.URL}

	// PuppetDB's side: web1 is tagged; web2 is tagged later (step 3).
	web1, web2 := puppetdbtest.Certname(t, "refresh-web1"), puppetdbtest.Certname(t, "refresh-web2")
	tag := strings.TrimSuffix(web1, ".test")
	submitFacts(t, pdb, web1, map[string]any{"refresh_tag": tag})
	pdb.Eventually(t, "facts", fmt.Sprintf(`["=", "certname", %q]`, web1), func(rows []map[string]any) bool { return len(rows) == 1 })

	pql := fmt.Sprintf(`inventory[certname] { facts.refresh_tag = %q }`, tag)
	pqlJSON, _ := json.Marshal(pql)
	ast := fmt.Sprintf(`["from", "facts", ["and", ["=", "certname", %q], ["=", "name", "refresh_tag"]]]`, web1)
	const refused = `"nodes { certname ~~ }"`
	// read is what a compile records of query (its JSON), asked now.
	read := func(query string) farm.QueryRead {
		t.Helper()
		q := query
		var s string
		if json.Unmarshal([]byte(query), &s) == nil {
			q = s
		}
		body, err := client.ask(ctx, q)
		if err != nil {
			t.Fatalf("ask %s: %v", q, err)
		}
		return farm.QueryReadOf([]byte(query), body)
	}
	tagged, facts, bad := read(string(pqlJSON)), read(ast), farm.QueryReadOf([]byte(refused), []byte(`[]`))
	if tagged.QueryDigest == facts.QueryDigest {
		t.Fatal("the two queries have one digest")
	}

	// The farm's side.
	r := flowtest.New(t)
	if err := r.Store.PutEnvironment(ctx, farm.Environment{Name: "test", CodeID: "code1"}); err != nil {
		t.Fatal(err)
	}
	r.Pool.Queries = r.Store
	r.Engine.Reads = []string{"cf_role"}
	compile := func(node, env string, queries ...farm.QueryRead) {
		t.Helper()
		r.Engine.Queries = queries
		if _, err := r.SubmitAs(t, node, env, nil, map[string]any{"cf_role": node + "-" + time.Now().String()}); err != nil {
			t.Fatal(err)
		}
		r.Drain(t)
	}
	compile("lb1", "production", tagged, facts)
	compile("lb2", "production", tagged)
	compile("mon", "production", facts)
	compile("plain", "production")
	compile("lb3", "test", tagged)
	// A query PuppetDB now refuses, recorded as the pool records it.
	if _, err := r.Store.Put(ctx, farm.SpaceCatalogs, bad.Query); err != nil {
		t.Fatal(err)
	}
	if err := r.Store.RecordQueries(ctx, "production", []farm.Digest{bad.QueryDigest}); err != nil {
		t.Fatal(err)
	}

	m := metrics.New(nil)
	w := querywatch.New(client, r.Store, r.Store, r.Intake)
	w.Settle, w.Metrics = time.Nanosecond, m.QueryRefresh()
	steps := []struct {
		name        string
		before      func(t *testing.T)
		since       func() time.Time
		want        querywatch.RoundResult
		wantPending []string
	}{
		{
			name:  "first round: each distinct query once, nobody queued (every node has PuppetDB's answer)",
			since: time.Now,
			want:  querywatch.RoundResult{Queries: 4, Due: 4, Runs: 3, Changed: 3, Failed: 1},
		},
		{
			name:  "a round within the interval takes up only the rechecks of the first results",
			since: func() time.Time { return time.Now().Add(-querywatch.DefaultInterval * 9 / 10) },
			want:  querywatch.RoundResult{Queries: 4, Due: 3, Runs: 2},
		},
		{
			name:  "a round within the interval takes nothing up",
			since: func() time.Time { return time.Now().Add(-querywatch.DefaultInterval * 9 / 10) },
			want:  querywatch.RoundResult{Queries: 4},
		},
		{
			name: "web2 tagged: the nodes that made the tagged query are queued, in both environments; the others not",
			before: func(t *testing.T) {
				submitFacts(t, pdb, web2, map[string]any{"refresh_tag": tag})
				pdb.Eventually(t, "", pql, func(rows []map[string]any) bool { return len(rows) == 2 })
			},
			since:       time.Now,
			want:        querywatch.RoundResult{Queries: 4, Due: 4, Runs: 3, Changed: 2, Failed: 1, Queued: 3},
			wantPending: []string{"lb1", "lb2", "lb3"},
		},
		{
			name: "their compiles record the new answer; a node that compiled with the old one after the round is caught by the recheck",
			before: func(t *testing.T) {
				now := read(string(pqlJSON))
				r.Engine.Queries = []farm.QueryRead{now, facts}
				r.Drain(t)
				compile("late", "production", tagged) // ran the query before web2 was tagged
			},
			since:       time.Now,
			want:        querywatch.RoundResult{Queries: 4, Due: 4, Runs: 3, Failed: 1, Queued: 1},
			wantPending: []string{"late"},
		},
		{
			name:  "rechecked: nothing more",
			since: time.Now,
			want:  querywatch.RoundResult{Queries: 4, Due: 4, Runs: 3, Failed: 1},
		},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before(t)
		}
		got, err := w.Round(ctx, st.since())
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got != st.want {
			t.Errorf("%s: %+v, want %+v", st.name, got, st.want)
		}
		calls := client.takeCalls()
		total := 0
		for q, n := range calls {
			total += n
			if n != 1 {
				t.Errorf("%s: PuppetDB asked %d times %s, want once a round", st.name, n, q)
			}
		}
		if total != got.Runs {
			t.Errorf("%s: %d PuppetDB calls, %d runs counted", st.name, total, got.Runs)
		}
		var pending []string
		for _, n := range []string{"lb1", "lb2", "lb3", "mon", "plain", "late"} {
			if node, err := r.Store.GetNode(ctx, n); err == nil && node.Pending() {
				pending = append(pending, n)
			}
		}
		if !slices.Equal(pending, st.wantPending) {
			t.Errorf("%s: pending %v, want %v", st.name, pending, st.wantPending)
		}
		if st.wantPending != nil {
			ex, err := r.Intake.Explain(ctx, st.wantPending[0])
			if err != nil {
				t.Fatal(err)
			}
			if req := ex.Request; req == nil || req.Reason != farm.ReasonQuery || req.Cause == nil || !strings.Contains(req.Cause.Note, pql) {
				t.Errorf("%s: explain %s: %+v; want reason %s naming %s", st.name, ex.Node, req, farm.ReasonQuery, pql)
			}
		}
		r.Engine.Queries = []farm.QueryRead{read(string(pqlJSON))}
		r.Drain(t)
	}

	// The refused query: checked every round, its result never stored.
	p, err := r.Store.ListQueries(ctx, farm.QueryList{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Queries {
		if st.Query == bad.QueryDigest && (st.Result != "" || st.CheckedAt.IsZero()) {
			t.Errorf("refused query's state %+v: want no result, a check time", st)
		}
		if st.Query == tagged.QueryDigest && st.Recheck {
			t.Errorf("tagged query's state %+v: the recheck is done", st)
		}
	}
}

// TestTriggerDebounces: a burst of Triggers makes one round, Debounce
// later; the round at start and the periodic ones are apart.
func TestTriggerDebounces(t *testing.T) {
	r := flowtest.New(t)
	m := metrics.New(nil)
	w := querywatch.New(nil, r.Store, r.Store, r.Intake) // no queries recorded: PuppetDB is never asked
	w.Interval, w.Debounce, w.Metrics = time.Hour, 100*time.Millisecond, m.QueryRefresh()
	rounds := func() uint64 {
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "compilefarm_puppetdb_query_refresh_seconds" {
				return mf.Metric[0].Histogram.GetSampleCount()
			}
		}
		return 0
	}
	wait := func(want uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for rounds() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d rounds, want %d", rounds(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait(1) // the round at start
	start := time.Now()
	for range 20 {
		w.Trigger()
	}
	wait(2)
	if took := time.Since(start); took < w.Debounce {
		t.Errorf("the round after Trigger came %v after it, before the debounce of %v", took, w.Debounce)
	}
	time.Sleep(3 * w.Debounce)
	if n := rounds(); n != 2 {
		t.Errorf("%d rounds after a burst of triggers, want 2 (start, one for the burst)", n)
	}
	w.Trigger()
	wait(3)
}

// TestRefreshersShareTheWork: two refreshers on one store (two fleet
// tasks) take each query up once between them in a round.
func TestRefreshersShareTheWork(t *testing.T) {
	pdb := puppetdbtest.Shared(t)
	ctx := t.Context()
	client := &countingPuppetDB{base: pdb.URL}
	r := flowtest.New(t)
	if err := r.Store.PutEnvironment(ctx, farm.Environment{Name: "test", CodeID: "code1"}); err != nil {
		t.Fatal(err)
	}
	var qs []farm.Digest
	for i := range 6 {
		text, _ := json.Marshal(fmt.Sprintf(`nodes[certname] { certname = %q }`, puppetdbtest.Certname(t, fmt.Sprintf("refresh-share%d", i))))
		d, err := r.Store.Put(ctx, farm.SpaceCatalogs, text)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, d)
	}
	for _, env := range []string{"production", "test"} {
		if err := r.Store.RecordQueries(ctx, env, qs); err != nil {
			t.Fatal(err)
		}
	}
	a := querywatch.New(client, r.Store, r.Store, r.Intake)
	b := querywatch.New(client, r.Store, r.Store, r.Intake)
	since := time.Now()
	var got [2]querywatch.RoundResult
	var wg sync.WaitGroup
	for i, w := range []*querywatch.Refresher{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := w.Round(ctx, since)
			if err != nil {
				t.Error(err)
			}
			got[i] = res
		}()
	}
	wg.Wait()
	if due := got[0].Due + got[1].Due; due != 12 {
		t.Errorf("the two rounds took up %d queries (%+v, %+v), want each of the 12 once", due, got[0], got[1])
	}
	calls := 0
	for _, n := range client.takeCalls() {
		calls += n
	}
	if calls != got[0].Runs+got[1].Runs || calls > 12 {
		t.Errorf("%d PuppetDB calls, runs %d + %d", calls, got[0].Runs, got[1].Runs)
	}
	p, err := r.Store.ListQueries(ctx, farm.QueryList{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Queries {
		if st.Version != 3 || st.Result == "" {
			t.Errorf("%s: version %d, result %q; want taken up and answered once (version 3)", st.Key(), st.Version, st.Result)
		}
	}
}

// A refresher's Intake is the real one.
var _ querywatch.Intake = (*intake.Intake)(nil)
