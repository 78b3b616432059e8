package site

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// setCSRAttributes writes the agent's csr_attributes.yaml: the extension
// requests its next certificate request carries.
func setCSRAttributes(t *testing.T, a *e2e.Agent, exts map[string]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("---\nextension_requests:\n")
	for k, v := range exts {
		b.WriteString("  \"" + k + "\": \"" + v + "\"\n")
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "conf", "csr_attributes.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// reissue has the agent's certificate replaced, as an operator does to
// change what a node's certificate says: revoke it on the farm, drop the
// agent's SSL directory; its next run asks for a new one.
func reissue(t *testing.T, a *e2e.Agent, f *e2e.Farm) {
	t.Helper()
	if out, err := f.CLI("ca", "revoke", a.Certname); err != nil {
		t.Fatalf("ca revoke %s: %v\n%s", a.Certname, err, out)
	}
	if err := os.RemoveAll(filepath.Join(a.Dir, "ssl")); err != nil {
		t.Fatal(err)
	}
}

// TestTrustedFacts: a node classified by the pp_role extension of its
// certificate (csr_attributes.yaml, as sites provision nodes) gets the
// catalog of that role, Hiera data included through
// %{trusted.extensions.pp_role}; an unchanged run compiles nothing; a
// certificate re-issued with another role recompiles the node once.
func TestTrustedFacts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs broker dev and the puppet agent; skipped with -short")
	}
	f := e2e.StartFarm(t, t.TempDir(), e2e.CopyExampleEnvs(t))
	a := e2e.NewAgent(t, "trusted1.example.test")
	setCSRAttributes(t, a, map[string]string{"pp_role": "web", "pp_environment": "production", "1.3.6.1.4.1.34380.1.2.1": "rack-42"})

	if code, out := a.Run(t, f); code != 2 {
		t.Fatalf("first run: exit %d, want 2\n%s", code, out)
	}
	// role.txt says web (pp_role picked role::web) and the web node's
	// greeting comes from Hiera's roles/web.yaml, found only through the
	// trusted.extensions.pp_role level (the node has no cf_role fact).
	e2e.CheckManaged(t, a, "web")
	if b, _ := os.ReadFile(filepath.Join(a.Root, "role.txt")); !strings.Contains(string(b), "greeting: Hello from a compile farm web node") {
		t.Errorf("role.txt = %q: want the web role's Hiera greeting", b)
	}

	compiles := f.FinishedCompiles()
	if code, out := a.Run(t, f); code != 0 {
		t.Fatalf("second run: exit %d, want 0\n%s", code, out)
	}
	if got := f.FinishedCompiles(); got != compiles {
		t.Errorf("an unchanged run compiled %v times", got-compiles)
	}

	// The operator gives the node another role in a new certificate.
	reissue(t, a, f)
	setCSRAttributes(t, a, map[string]string{"pp_role": "base", "pp_environment": "production"})
	ok := f.Metric(`compilefarm_compiles_total{result="ok"}`)
	code, out := a.Run(t, f)
	if code != 2 {
		t.Fatalf("run with the re-issued certificate: exit %d, want 2\n%s", code, out)
	}
	e2e.CheckManaged(t, a, "base")
	if got := f.Metric(`compilefarm_compiles_total{result="ok"}`); got != ok+1 {
		t.Errorf("the re-issued certificate caused %v compiles, want 1", got-ok)
	}
}

// encScript is an external node classifier for the tests: it answers
// with ANSWERS/<certname>.yaml, or, when ANSWERS/<certname>.fail exists,
// prints that file to stderr and exits 1.
const encScript = `#!/bin/sh
answers=%s
echo "$1" >> "$answers/calls.log"
if [ -e "$answers/$1.fail" ]; then cat "$answers/$1.fail" >&2; exit 1; fi
exec cat "$answers/$1.yaml"
`

// classifierEnv adds to envs an environment named name whose code is
// production's with a site.pp that declares nothing itself: the classifier
// gives the classes, and a file shows a classifier parameter and the
// environment the node compiled in.
func classifierEnv(t *testing.T, envs, name string) {
	t.Helper()
	e2e.AddBrokenEnv(t, envs, "")
	if err := os.Rename(filepath.Join(envs, "broken"), filepath.Join(envs, name)); err != nil {
		t.Fatal(err)
	}
	site := `node default {
  file { "${facts['cf_root']}/classified.txt":
    ensure  => file,
    content => "environment ${server_facts['environment']}\nmessage ${enc_message}\n",
  }
}
`
	if err := os.WriteFile(filepath.Join(envs, name, "manifests", "site.pp"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newClassifier writes encScript to a temporary directory and returns its
// path and the directory of its answers.
func newClassifier(t *testing.T) (script, answers string) {
	t.Helper()
	dir := t.TempDir()
	answers = filepath.Join(dir, "answers")
	if err := os.Mkdir(answers, 0o755); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "enc")
	if err := os.WriteFile(script, []byte(strings.Replace(encScript, "%s", answers, 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, answers
}

// classifierCalls counts the classifier's runs so far.
func classifierCalls(t *testing.T, answers string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(answers, "calls.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func writeText(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestExternalNodeClassifier drives a real agent against `broker dev
// --external-nodes`: the classifier's environment wins over the agent's
// (the agent switches to it), its classes and parameters make the
// catalog, an unchanged answer compiles nothing and a changed one compiles
// once; a failing classifier (non-zero exit, bad YAML) gives the agent
// Puppet Server's error with the classifier's stderr, stores nothing, and
// shows in `broker nodes` until it answers again.
func TestExternalNodeClassifier(t *testing.T) {
	if testing.Short() {
		t.Skip("runs broker dev and the puppet agent; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	classifierEnv(t, envs, "classified")
	script, answers := newClassifier(t)
	f := e2e.StartFarm(t, t.TempDir(), envs, "--external-nodes", script)
	a := e2e.NewAgent(t, "enc1.example.test")
	answer := filepath.Join(answers, a.Certname+".yaml")
	writeText(t, answer, "---\nenvironment: classified\nclasses:\n  role::web:\nparameters:\n  enc_message: hello\n")

	code, out := a.Run(t, f)
	if code != 2 {
		t.Fatalf("first run: exit %d, want 2\n%s", code, out)
	}
	if !strings.Contains(out, "switching agent to 'classified'") {
		t.Errorf("the agent did not switch to the classifier's environment:\n%s", out)
	}
	// The classifier's class role::web made the node a web node (Hiera's
	// per-role data needs pp_role or cf_role, which this node has neither of).
	if b, _ := os.ReadFile(filepath.Join(a.Root, "role.txt")); !strings.Contains(string(b), "role: web") {
		t.Errorf("role.txt = %q, want role web from the classifier's class", b)
	}
	classified := filepath.Join(a.Root, "classified.txt")
	if b, _ := os.ReadFile(classified); string(b) != "environment classified\nmessage hello\n" {
		t.Errorf("classified.txt = %q", b)
	}
	if env := f.Nodes()[a.Certname].Environment; env != "classified" {
		t.Errorf("node environment %q, want classified", env)
	}

	compiles := f.FinishedCompiles()
	calls := classifierCalls(t, answers)
	if code, out := a.Run(t, f); code != 0 {
		t.Fatalf("second run: exit %d, want 0\n%s", code, out)
	}
	if got := f.FinishedCompiles(); got != compiles {
		t.Errorf("an unchanged classification compiled %v times", got-compiles)
	}
	// What the README promises: one classifier run per later agent run
	// (its catalog request; the agent skips the node request it made on
	// its first run, knowing its environment from that run).
	if got := classifierCalls(t, answers) - calls; got != 1 {
		t.Errorf("an agent run with nothing changed ran the classifier %d times, want 1", got)
	}

	// A changed answer: the next check-in compiles once.
	writeText(t, answer, "---\nenvironment: classified\nclasses:\n  role::web:\nparameters:\n  enc_message: changed\n")
	ok := f.Metric(`compilefarm_compiles_total{result="ok"}`)
	if code, out := a.Run(t, f); code != 2 {
		t.Fatalf("run after the classification changed: exit %d, want 2\n%s", code, out)
	}
	if b, _ := os.ReadFile(classified); string(b) != "environment classified\nmessage changed\n" {
		t.Errorf("classified.txt after the change = %q", b)
	}
	if got := f.Metric(`compilefarm_compiles_total{result="ok"}`); got != ok+1 {
		t.Errorf("the changed classification caused %v compiles, want 1", got-ok)
	}

	// Failures: nothing is compiled or stored, the agent sees the error.
	failures := []struct{ name, setup, want string }{
		{"non-zero exit", "fail", "Server Error: Failed when searching for node enc1.example.test: Failed to find enc1.example.test via exec: " +
			"Execution of '" + script + " enc1.example.test' returned 1: the CMDB does not know this node"},
		{"bad YAML", "yaml", "Server Error: Failed when searching for node enc1.example.test: Could not load external node results for enc1.example.test"},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			failFile := filepath.Join(answers, a.Certname+".fail")
			switch tt.setup {
			case "fail":
				writeText(t, failFile, "the CMDB does not know this node\n")
				defer os.Remove(failFile)
			case "yaml":
				writeText(t, answer, "classes: [role::web\n")
			}
			before := f.Nodes()[a.Certname]
			compiles := f.FinishedCompiles()
			code, out := a.Run(t, f)
			if code == 0 || code == 2 || !strings.Contains(out, tt.want) {
				t.Errorf("run with a failing classifier: exit %d, want a failure showing %q\n%s", code, tt.want, out)
			}
			if got := f.FinishedCompiles(); got != compiles {
				t.Errorf("a failing classifier caused %v compiles", got-compiles)
			}
			if after := f.Nodes()[a.Certname]; after.Catalog == nil || before.Catalog == nil || after.Catalog.Seq != before.Catalog.Seq {
				t.Errorf("the node's catalog changed: %+v -> %+v", before.Catalog, after.Catalog)
			}
			list, err := f.CLI("nodes")
			if err != nil || !strings.Contains(list, "external node classifier errors") || !strings.Contains(list, strings.TrimPrefix(tt.want, "Server Error: ")) {
				t.Errorf("broker nodes does not show the classifier's error: %v\n%s", err, list)
			}
		})
	}

	// The classifier answers again: the node runs as before, the error is gone.
	writeText(t, answer, "---\nenvironment: classified\nclasses:\n  role::web:\nparameters:\n  enc_message: changed\n")
	if code, out := a.Run(t, f); code != 0 {
		t.Fatalf("run after the classifier recovered: exit %d, want 0\n%s", code, out)
	}
	if list, _ := f.CLI("nodes"); strings.Contains(list, "classifier errors") {
		t.Errorf("broker nodes still shows a classifier error after it recovered:\n%s", list)
	}
}

// TestNodeInfoOnAWS: trusted extensions and the classifier on the AWS
// backends: `broker serve --external-nodes` classifies at check-in, the
// compile function (COMPILEFARM_EXTERNAL_NODES) classifies again for each
// compile, and a node provisioned with pp_role gets that role's catalog.
func TestNodeInfoOnAWS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the AWS emulators, broker serve, the compile function and the puppet agent; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	envs := e2e.CopyExampleEnvs(t)
	script, answers := newClassifier(t)
	a.LambdaEnv = []string{"COMPILEFARM_EXTERNAL_NODES=" + script}
	doors, _ := a.StartFleet(t, ctx, envs, []string{"--external-nodes", script})
	door := doors[0]

	web := e2e.NewAgent(t, "awsweb.example.test")
	setCSRAttributes(t, web, map[string]string{"pp_role": "web"})
	writeText(t, filepath.Join(answers, web.Certname+".yaml"), "---\nparameters:\n  tier: gold\n")
	if code, out := web.Run(t, door); code != 2 {
		t.Fatalf("first run: exit %d, want 2\n%s", code, out)
	}
	e2e.CheckManaged(t, web, "web")

	// A classifier class on top: the compile function compiles it in.
	writeText(t, filepath.Join(answers, web.Certname+".yaml"), "---\nclasses:\n  - demo::web\nparameters:\n  tier: gold\n")
	n0, err := a.State.GetNode(ctx, web.Certname)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := web.Run(t, door); code != 0 && code != 2 {
		t.Fatalf("run after the classification changed: exit %d\n%s", code, out)
	}
	n1, err := a.State.GetNode(ctx, web.Certname)
	if err != nil {
		t.Fatal(err)
	}
	if n1.Catalog == nil || n1.Catalog.Seq <= n0.Catalog.Seq || n1.Catalog.NodeInfo == n0.Catalog.NodeInfo || n1.Requested.Reason != "node-changed" {
		t.Errorf("the changed classification was not compiled: before %+v, after %+v (request %+v)", n0.Catalog, n1.Catalog, n1.Requested)
	}

	writeText(t, filepath.Join(answers, web.Certname+".fail"), "CMDB unreachable\n")
	code, out := web.Run(t, door)
	if code == 0 || code == 2 || !strings.Contains(out, "Failed when searching for node awsweb.example.test") || !strings.Contains(out, "CMDB unreachable") {
		t.Errorf("run with a failing classifier: exit %d\n%s", code, out)
	}
	if n, _ := a.State.GetNode(ctx, web.Certname); n.ClassifierFailure == nil || n.Catalog.Seq != n1.Catalog.Seq {
		t.Errorf("node after a failed classification: failure %+v, catalog %+v", n.ClassifierFailure, n.Catalog)
	}
}
