package site

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/corpus"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestCorpusCompilesOnlyWhatChanged runs the corpus of real Debian modules
// (internal/corpus: a roles-and-profiles environment, every node's facts
// recorded from a real agent) through the farm as its agents would check
// in: after each node's first compile, three check-ins whose facts differ
// only in what changes on every run (uptime, free memory, load, mountpoint
// usage) compile nothing on any node; then a change of a fact each role
// really reads compiles every node exactly once, into a new catalog, and
// the node says which fact it was.
func TestCorpusCompilesOnlyWhatChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: a real broker, Ruby Puppet and Debian's puppet modules; skipped with -short")
	}
	envs, err := corpus.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := corpus.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	f := e2e.StartFarm(t, t.TempDir(), envs)
	synth := make([]*e2e.SyntheticNode, len(nodes))
	for i, n := range nodes {
		synth[i] = e2e.Enrol(t, f, n.Certname)
	}
	// upload sends every node's facts (given its index) at once, two at a
	// time, as agents checking in together do.
	upload := func(facts func(i int) map[string]any) {
		t.Helper()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 2)
		for i, n := range synth {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := n.TryPutFacts(f, facts(i)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	// settled waits until every node's latest request is answered and
	// returns the nodes.
	settled := func(what string) map[string]farm.Node {
		t.Helper()
		var got map[string]farm.Node
		e2e.WaitFor(t, what, 5*time.Minute, func() bool {
			// The queue first: a compile whose exports changed queues its
			// collectors before its own job leaves the queue.
			for _, lane := range []string{"urgent", "bulk"} {
				if f.Metric(`compilefarm_queue_depth{lane="`+lane+`"}`)+f.Metric(`compilefarm_queue_in_flight{lane="`+lane+`"}`) > 0 {
					return false
				}
			}
			got = corpusNodes(t, f)
			for _, n := range nodes {
				r, ok := got[n.Certname]
				if !ok || r.Pending() {
					return false
				}
			}
			return true
		})
		for _, n := range nodes {
			if c := got[n.Certname].Compile; c == nil || c.Result == farm.ResultFailed {
				t.Fatalf("%s (role %s): compile %+v", n.Certname, n.Role, c)
			}
		}
		return got
	}

	// First check-ins: every node compiles, and as each one's exported ssh
	// host keys appear, the nodes that collect them compile again.
	upload(func(i int) map[string]any { return nodes[i].Facts })
	first := settled("every node's first compile")
	compiles := f.FinishedCompiles()
	roles := map[string]bool{}
	for _, n := range nodes {
		roles[n.Role] = true
		if first[n.Certname].Catalog == nil || first[n.Certname].Catalog.ReadsDigest == "" {
			t.Fatalf("%s: no catalog with a read record: %+v", n.Certname, first[n.Certname].Catalog)
		}
	}
	t.Logf("%d nodes of %d roles: %v compiles for their first check-ins (collectors of exported host keys included)", len(nodes), len(roles), compiles)

	for run := 1; run <= 3; run++ {
		upload(func(i int) map[string]any { return corpus.Churn(nodes[i].Facts, run) })
		now := corpusNodes(t, f)
		for _, n := range nodes {
			if got, was := now[n.Certname].RequestSeq, first[n.Certname].RequestSeq; got != was {
				r := now[n.Certname].Requested
				t.Errorf("check-in %d with only volatile facts changed queued a compile of %s (role %s): %s %s",
					run, n.Certname, n.Role, r.Reason, describeChanges(r))
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	used := make([][]string, len(nodes))
	upload(func(i int) map[string]any {
		path, value := corpus.UsedChange(nodes[i])
		used[i] = path
		return corpus.With(corpus.Churn(nodes[i].Facts, 4), path, value)
	})
	after := settled("the compiles of a used fact's change")
	if got, want := f.FinishedCompiles()-compiles, float64(len(nodes)); got != want {
		t.Errorf("%v compiles after a used fact changed on each of %d nodes, want %v", got, len(nodes), want)
	}
	for i, n := range nodes {
		a, b := after[n.Certname], first[n.Certname]
		r := a.Requested
		switch {
		case a.RequestSeq != b.RequestSeq+1:
			t.Errorf("%s: %d compiles queued, want 1", n.Certname, a.RequestSeq-b.RequestSeq)
		case r.Reason != farm.ReasonFactsChanged || len(r.Changes) == 0 || !slices.Equal(r.Changes[0].Path, used[i]):
			t.Errorf("%s (role %s): queued for %s %s, want the change of %s", n.Certname, n.Role, r.Reason, describeChanges(r), strings.Join(used[i], "."))
		case a.Compile.Result != farm.ResultOK || a.Catalog.ContentDigest == b.Catalog.ContentDigest:
			t.Errorf("%s (role %s): changing %s compiled %s, content %s → %s; want a new catalog",
				n.Certname, n.Role, strings.Join(used[i], "."), a.Compile.Result, b.Catalog.ContentDigest, a.Catalog.ContentDigest)
		}
	}

	// The new catalogs' reads are as narrow: volatile facts compile nothing.
	current := func(i int, run int) map[string]any {
		path, value := corpus.UsedChange(nodes[i])
		return corpus.With(corpus.Churn(nodes[i].Facts, run), path, value)
	}
	compiles = f.FinishedCompiles()
	upload(func(i int) map[string]any { return current(i, 5) })
	for _, n := range corpusNodes(t, f) {
		if n.RequestSeq != after[n.Certname].RequestSeq {
			t.Errorf("%s: a volatile check-in after the change queued %s %s", n.Certname, n.Requested.Reason, describeChanges(n.Requested))
		}
	}
	if got := f.FinishedCompiles() - compiles; got != 0 {
		t.Errorf("%v compiles after volatile check-ins, want 0", got)
	}

	// A fact in an exported resource: the node's fqdn titles its exported
	// host keys, so its change compiles that node and, once each, every
	// node that collects them, as PuppetDB's collectors would see it.
	t.Run("fact in exported resources", func(t *testing.T) {
		const moved = 0
		newFQDN := strings.Replace(nodes[moved].Certname, ".example.test", ".dmz.example.test", 1)
		compiles := f.FinishedCompiles()
		synth[moved].PutFacts(t, f, corpus.With(current(moved, 6), []string{"fqdn"}, newFQDN))
		now := settled("the compiles of an exported fact's change")
		if got, want := f.FinishedCompiles()-compiles, float64(len(nodes)); got != want {
			t.Errorf("%v compiles after %s's fqdn changed, want %v (it and every collector of its host keys, once)", got, nodes[moved].Certname, want)
		}
		for i, n := range nodes {
			a, b := now[n.Certname], after[n.Certname]
			wantReason := farm.ReasonExports
			if i == moved {
				wantReason = farm.ReasonFactsChanged
			}
			if a.RequestSeq != b.RequestSeq+1 || a.Requested.Reason != wantReason {
				t.Errorf("%s: %d compiles, last for %s; want 1 for %s", n.Certname, a.RequestSeq-b.RequestSeq, a.Requested.Reason, wantReason)
			}
		}
		b, err := f.CLI("diff", nodes[len(nodes)-1].Certname)
		if err != nil || !strings.Contains(string(b), newFQDN) {
			t.Errorf("a collector's catalog does not show %s's new host keys (broker diff: %v):\n%s", newFQDN, err, b)
		}
	})
}

// corpusNodes lists the farm's node records by certname.
func corpusNodes(t *testing.T, f *e2e.Farm) map[string]farm.Node {
	t.Helper()
	resp, err := http.Get(f.Admin + "/admin/v1/nodes")
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	defer resp.Body.Close()
	var list []farm.Node
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatalf("decode nodes: %v", err)
	}
	out := make(map[string]farm.Node, len(list))
	for _, n := range list {
		out[n.Certname] = n
	}
	return out
}

// describeChanges renders what a compile request says changed.
func describeChanges(r *farm.CompileRequest) string {
	if r == nil {
		return ""
	}
	var parts []string
	for _, c := range r.Changes {
		parts = append(parts, strings.Join(c.Path, ".")+": "+string(c.Old)+" -> "+string(c.New))
	}
	if r.Cause != nil {
		parts = append(parts, r.Cause.Input+" "+r.Cause.Note)
	}
	return strings.Join(parts, "; ")
}
