package release_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/flowtest"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/release"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// deployRig is a rig whose release.Deployer reads an environments directory with
// two environments beside a global module directory: "uses" has the
// default modulepath (modules:$basemodulepath), "own" sets modulepath =
// modules. Each has one node with a catalog of its first deploy.
func deployRig(t *testing.T) (*flowtest.Rig, *release.Deployer, string, string) {
	t.Helper()
	r := flowtest.New(t)
	r.Engine.CodeInCatalog = true
	code := t.TempDir()
	envs, global := filepath.Join(code, "environments"), filepath.Join(code, "modules")
	writeFile(t, filepath.Join(global, "motd", "manifests", "init.pp"), "class motd { notify { 'v1': } }\n")
	for _, env := range []string{"uses", "own"} {
		writeFile(t, filepath.Join(envs, env, "manifests", "site.pp"), "include motd\n")
	}
	writeFile(t, filepath.Join(envs, "own", "environment.conf"), "modulepath = modules\n")
	writeFile(t, filepath.Join(envs, "own", "modules", "motd", "manifests", "init.pp"), "class motd { }\n")
	d := &release.Deployer{Content: r.Store, Envs: r.Store, Nodes: r.Store, Intake: r.Intake, Root: envs, BaseModulepath: []string{global}}
	ctx := context.Background()
	if err := d.DeployAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"uses", "own"} {
		doc := flowtest.FactsDoc(env+".example.test", map[string]any{"cf_role": "web"})
		if _, err := r.Intake.Submit(ctx, intake.Upload{Certname: env + ".example.test", Environment: env,
			Facts: facts.JSONDocument(doc)}); err != nil {
			t.Fatal(err)
		}
	}
	r.Drain(t)
	return r, d, envs, global
}

func codeOf(t *testing.T, r *flowtest.Rig, env string) string {
	t.Helper()
	e, err := r.Store.GetEnvironment(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	return e.CodeID
}

// TestDeployEnvironmentsAfterGlobalChange: a change in the global module directory
// gives new code to the environment whose modulepath uses it, and only its
// node is recompiled.
func TestDeployEnvironmentsAfterGlobalChange(t *testing.T) {
	r, d, _, global := deployRig(t)
	ctx := context.Background()
	usesBefore, ownBefore := codeOf(t, r, "uses"), codeOf(t, r, "own")

	// Unchanged: a no-op.
	res, err := d.DeployEnvironments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if x.Changed || x.Queued != 0 {
			t.Errorf("deploy of unchanged code: %+v", x)
		}
	}

	writeFile(t, filepath.Join(global, "motd", "manifests", "init.pp"), "class motd { notify { 'v2': } }\n")
	before := r.Engine.Count()
	res, err = d.DeployEnvironments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Environment != "own" || res[1].Environment != "uses" {
		t.Fatalf("DeployEnvironments results = %+v, want own and uses in name order", res)
	}
	if own := res[0]; own.Changed || own.Queued != 0 || own.CodeID != ownBefore {
		t.Errorf("environment without $basemodulepath: %+v, want unchanged and nothing queued", own)
	}
	if uses := res[1]; !uses.Changed || uses.Queued != 1 || uses.Previous != usesBefore || uses.CodeID == usesBefore {
		t.Errorf("environment using $basemodulepath: %+v, want new code and its node queued", uses)
	}
	r.Drain(t)
	if got := r.Engine.Count() - before; got != 1 {
		t.Errorf("%d compiles after the global change, want 1 (the node of uses)", got)
	}
	n, err := r.Store.GetNode(ctx, "uses.example.test")
	if err != nil || n.Catalog == nil || n.Catalog.CodeID != res[1].CodeID {
		t.Errorf("uses.example.test after the deploy: %+v, %v; want a catalog of the new code", n.Catalog, err)
	}
	st, err := d.Status(ctx, "uses")
	if err != nil || !st.Done() || st.Nodes != 1 {
		t.Errorf("Status(uses) = %+v, %v; want done with 1 node", st, err)
	}

	// Deploying one environment still works, with the global directory.
	one, err := d.Deploy(ctx, "uses", "")
	if err != nil || one.Changed || one.CodeID != res[1].CodeID {
		t.Errorf("Deploy(uses) = %+v, %v; want the same code as DeployEnvironments", one, err)
	}
}

// TestDeployEnvironmentsRefusesBadInput: one environment that cannot be snapshotted
// fails the whole call and no environment changes.
func TestDeployEnvironmentsRefusesBadInput(t *testing.T) {
	r, d, envs, global := deployRig(t)
	ctx := context.Background()
	usesBefore, ownBefore := codeOf(t, r, "uses"), codeOf(t, r, "own")

	writeFile(t, filepath.Join(global, "motd", "manifests", "init.pp"), "class motd { notify { 'v2': } }\n")
	if err := os.Symlink("/etc/passwd", filepath.Join(envs, "own", "passwd")); err != nil {
		t.Fatal(err)
	}
	_, err := d.DeployEnvironments(ctx)
	if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "own") || !strings.Contains(err.Error(), "no environment was deployed") {
		t.Fatalf("DeployEnvironments with a bad link: err = %v, want ErrInvalid naming the environment", err)
	}
	if codeOf(t, r, "uses") != usesBefore || codeOf(t, r, "own") != ownBefore {
		t.Errorf("a failed DeployEnvironments changed an environment's code")
	}

	for _, tt := range []struct {
		name string
		d    *release.Deployer
	}{
		{"no environments directory", &release.Deployer{}},
		{"empty environments directory", &release.Deployer{Root: t.TempDir()}},
	} {
		if _, err := tt.d.DeployEnvironments(ctx); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tt.name, err)
		}
	}
}
