package puppetdbref

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/internal/puppetserver"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/test/e2e"
)

var (
	withPuppetServer = flag.Bool("puppetserver", false,
		"run TestSideBySide: the scenario through a real Puppet Server too (a JVM: about a minute to start and 800 MB); make puppetdb-reference sets it")
	record = flag.Bool("record", false,
		"with -puppetserver: write what Puppet Server's runs left in PuppetDB, normalized, to "+recording)
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

// referenceSide runs the scenario through a real Puppet Server with the
// puppetdb termini and returns what PuppetDB then holds, normalized.
func referenceSide(t *testing.T, pdb *puppetdbtest.PuppetDB) map[string]any {
	t.Helper()
	envs := copyEnvironments(t)
	ps := puppetserver.Start(t, puppetserver.Options{Environments: envs, PuppetDB: pdb.TLSURL, CADir: pdb.CADir})
	certname := puppetdbtest.Certname(t, "reference-ref")
	a := runScenario(t, ps, certname)
	r := fetch(t, pdb, certname)
	for _, bad := range checkLinks(r) {
		t.Errorf("Puppet Server's side: %s", bad)
	}
	return normalize(identity{Certname: certname, AgentDir: a.Dir, Environments: envs}, r)
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

// TestSideBySide runs the scenario through a real Puppet Server 7 with
// the puppetdb termini and through the farm, both feeding the shared
// PuppetDB, and compares what PuppetDB holds for the two nodes. It runs
// with -puppetserver (make puppetdb-reference); with -record it also
// writes Puppet Server's side to testdata/puppetserver.json.
func TestSideBySide(t *testing.T) {
	if !*withPuppetServer {
		t.Skip("runs a real Puppet Server (a JVM): make puppetdb-reference runs it (go test -puppetserver); make test compares the farm with its recording (TestFarmMatchesRecording)")
	}
	pdb := puppetdbtest.Shared(t)
	ref := referenceSide(t, pdb)
	switch {
	case t.Failed():
		t.Fatalf("Puppet Server's side is not as expected: %s left as it was", recording)
	case *record:
		if err := os.WriteFile(recording, canonical(ref), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded Puppet Server's side in %s", recording)
	default:
		if d := diff("", readRecording(t), ref); len(d) != 0 {
			t.Errorf("%s is out of date (make puppetdb-reference re-records it): %d differences from this run, the first: %v", recording, len(d), d[0])
		}
	}
	report(t, ref, farmSide(t, pdb))
}

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
