package release_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/release"
)

// served returns the code_id of the catalog each node is served.
func served(t *testing.T, r *flowtest.Rig, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range names {
		n, err := r.Store.GetNode(context.Background(), name)
		if err != nil || n.Catalog == nil {
			t.Fatalf("node %s: %v %+v", name, err, n.Catalog)
		}
		out[name] = n.Catalog.CodeID
	}
	return out
}

func TestStagedRelease(t *testing.T) {
	r := flowtest.New(t)
	r.Engine.CodeInCatalog = true
	ctx := context.Background()
	d := &release.Deployer{Content: r.Store, Envs: r.Store, Nodes: r.Store, Intake: r.Intake}
	var names []string
	for i := 0; i < 40; i++ {
		names = append(names, fmt.Sprintf("n%02d.example.test", i))
	}
	for _, n := range names {
		r.Submit(t, n, map[string]any{"cf_role": "web"})
	}
	r.Drain(t)

	hold := true
	if _, err := d.Release(ctx, "production", release.ReleaseChange{Hold: &hold}); err != nil {
		t.Fatal(err)
	}
	// A deploy under hold: "code2" is precompiled for everyone, served to no one.
	env, _ := r.Store.GetEnvironment(ctx, "production")
	env.CodeID = "code2"
	r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2", Release: &farm.Release{Hold: true, Stable: "code1"}})
	if _, err := r.Intake.Requeue(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	r.Drain(t)
	for name, code := range served(t, r, names) {
		if code != "code1" {
			t.Fatalf("%s is served %s before any release", name, code)
		}
	}
	st, _ := d.ReleaseStatus(ctx, "production")
	if st.Codes[0].CodeID != "code2" || st.Codes[0].Compiled != 40 || st.Codes[0].Released != 0 || st.Codes[1].Targeted != 40 {
		t.Fatalf("status after deploy under hold: %+v", st.Codes)
	}
	// A node's fact change while held recompiles both its served catalog
	// (stable code) and its candidate.
	before := r.Engine.Count()
	r.Submit(t, names[0], map[string]any{"cf_role": "db"})
	r.Drain(t)
	if got := r.Engine.Count() - before; got != 2 {
		t.Errorf("fact change under hold: %d compiles, want 2 (served and candidate)", got)
	}

	// Release to named nodes, then to 10%: promoted, not compiled.
	before = r.Engine.Count()
	res, err := d.Release(ctx, "production", release.ReleaseChange{Nodes: []string{names[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Released != 1 || res.Replan.Promoted != 1 || res.Changes["Notify"] != 1 {
		t.Errorf("release to one node: %+v", res)
	}
	pct := 10
	res, err = d.Release(ctx, "production", release.ReleaseChange{Percent: &pct})
	if err != nil {
		t.Fatal(err)
	}
	r.Drain(t)
	if r.Engine.Count() != before {
		t.Errorf("releasing compiled %d catalogs; precompiled ones should be promoted", r.Engine.Count()-before)
	}
	in := 0
	for name, code := range served(t, r, names) {
		released := name == names[1] || farm.ReleaseBucket(name) < 10
		if released != (code == "code2") {
			t.Errorf("%s served %s, released %v", name, code, released)
		}
		if released {
			in++
		}
	}
	st, _ = d.ReleaseStatus(ctx, "production")
	if st.Codes[0].Released != in {
		t.Errorf("status released = %d, want %d", st.Codes[0].Released, in)
	}
	// A canary's failed run shows before the release widens.
	canary, _ := r.Store.GetNode(ctx, names[1])
	r.Store.UpdateNode(ctx, names[1], func(n *farm.Node) error {
		n.Report = &farm.ReportSummary{Status: "failed", CatalogUUID: canary.Catalog.UUID, Digest: "r1"}
		return nil
	})
	st, _ = d.ReleaseStatus(ctx, "production")
	if st.Codes[0].Failed != 1 || len(st.Codes[0].Failures) != 1 || !strings.Contains(st.Codes[0].Failures[0], names[1]) {
		t.Errorf("a canary's failed report is not in the release status: %+v", st.Codes[0])
	}
	// Diff on a released node: its previous catalog against the current.
	diff, err := d.Diff(ctx, names[1], "", "")
	if err != nil || len(diff.Resources) != 1 || diff.Resources[0].Ref != "Notify[code]" {
		t.Errorf("diff after release: %+v %v", diff, err)
	}

	// All: everyone on code2, which becomes stable.
	if _, err := d.Release(ctx, "production", release.ReleaseChange{All: true}); err != nil {
		t.Fatal(err)
	}
	r.Drain(t)
	for name, code := range served(t, r, names) {
		if code != "code2" {
			t.Errorf("%s served %s after release --all", name, code)
		}
	}
	env, _ = r.Store.GetEnvironment(ctx, "production")
	if env.Release == nil || env.Release.Stable != "code2" || !env.Release.Hold {
		t.Errorf("release after --all: %+v", env.Release)
	}
	// Widening without hold is refused.
	off := false
	d.Release(ctx, "production", release.ReleaseChange{Hold: &off})
	if _, err := d.Release(ctx, "production", release.ReleaseChange{Percent: &pct}); err == nil {
		t.Error("a percentage release without hold was accepted")
	}
}

// TestDeployStatus counts an environment's nodes by where their compile for
// the current code stands; nodes of other environments do not count.
func TestDeployStatus(t *testing.T) {
	r := flowtest.New(t)
	ctx := context.Background()
	d := &release.Deployer{Content: r.Store, Envs: r.Store, Nodes: r.Store, Intake: r.Intake}
	r.Store.PutEnvironment(ctx, farm.Environment{Name: "staging", CodeID: "s1"})
	r.Submit(t, "n1", map[string]any{"cf_role": "web"})
	r.Submit(t, "n2", map[string]any{"cf_role": "db"})
	if _, err := r.Intake.Submit(ctx, intake.Upload{Certname: "s1", Environment: "staging",
		Facts: facts.JSONDocument(flowtest.FactsDoc("s1", map[string]any{"cf_role": "web"}))}); err != nil {
		t.Fatal(err)
	}
	r.Drain(t)

	r.Store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code2"})
	st, err := d.Status(ctx, "production")
	if err != nil || st.Nodes != 2 || st.Other != 2 || st.Done() {
		t.Fatalf("before requeue: %+v, %v; want 2 nodes on other code", st, err)
	}
	if _, err := r.Intake.Requeue(ctx, "production", farm.LaneBulk); err != nil {
		t.Fatal(err)
	}
	if st, _ = d.Status(ctx, "production"); st.Nodes != 2 || st.Queued != 2 || st.Done() {
		t.Fatalf("after requeue: %+v, want 2 queued", st)
	}
	r.Drain(t)
	if st, _ = d.Status(ctx, "production"); st.Nodes != 2 || st.Unchanged != 2 || !st.Done() {
		t.Fatalf("after compiles: %+v, want 2 unchanged", st)
	}
}
