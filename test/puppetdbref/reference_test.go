package puppetdbref

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// recording is Puppet Server's side of the scenario, normalized: what
// TestFarmMatchesRecording compares the farm with.
const recording = "testdata/puppetserver.json"

// copyEnvironments copies testdata/environments for one side: neither
// server ever writes into the checkout.
func copyEnvironments(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "environments")
	if out, err := exec.Command("cp", "-a", environments(), dst).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v: %s", environments(), err, out)
	}
	return dst
}

// farmSide runs the scenario through broker dev feeding PuppetDB over
// plain http and returns what PuppetDB then holds, normalized.
func farmSide(t *testing.T, pdb *puppetdbtest.PuppetDB) map[string]any {
	t.Helper()
	envs := copyEnvironments(t)
	f := e2e.StartFarm(t, t.TempDir(), envs, "--puppetdb", pdb.URL)
	certname := puppetdbtest.Certname(t, "reference-farm")
	a := runScenario(t, f, certname)
	r := fetch(t, pdb, certname)
	for _, bad := range checkLinks(r) {
		t.Errorf("the farm's side: %s", bad)
	}
	return normalize(identity{Certname: certname, AgentDir: a.Dir, Environments: farmEnvironments}, r)
}

// farmEnvironments is where the farm says its environments' code is, in
// catalogs and reports, whatever checkout a compile read: the parent of
// code.PublicDir, as Puppet Server's is its environmentpath.
var farmEnvironments = path.Dir(code.PublicDir("production"))

// readRecording reads testdata/puppetserver.json.
func readRecording(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(recording)
	if err != nil {
		t.Fatalf("read the recording of Puppet Server's side: %v (make puppetdb-reference writes it)", err)
	}
	var ref map[string]any
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatalf("%s: %v", recording, err)
	}
	return ref
}

// TestFarmMatchesRecording runs the scenario through the farm and
// compares what PuppetDB then holds with the recording of Puppet Server's
// side (testdata/puppetserver.json, made by make puppetdb-reference).
func TestFarmMatchesRecording(t *testing.T) {
	pdb := puppetdbtest.Shared(t)
	report(t, readRecording(t), farmSide(t, pdb))
}

// report fails the test with every difference between the two sides.
func report(t *testing.T, ref, farm map[string]any) {
	t.Helper()
	diffs := diff("", ref, farm)
	if len(diffs) == 0 {
		return
	}
	lines := make([]string, len(diffs))
	for i, d := range diffs {
		lines[i] = d.String()
	}
	t.Errorf("PuppetDB holds %d things differently for the farm's node than for Puppet Server's (normalized: see normalize):\n%s",
		len(diffs), strings.Join(lines, "\n"))
}
