//go:build puppetserver

// The live side-by-side run needs a second JVM (Puppet Server: a minute to
// start on two cores, 700 MB), more than make test's budget has left: it
// is built only with the tag puppetserver, which make puppetdb-reference
// sets (go test -tags puppetserver); make test compares the farm with its
// recording instead (TestFarmMatchesRecording).

package puppetdbref

import (
	"flag"
	"os"
	"testing"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/internal/puppetserver"
)

var record = flag.Bool("record", false,
	"write what Puppet Server's runs left in PuppetDB, normalized, to "+recording)

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

// TestSideBySide runs the scenario through a real Puppet Server 7 with
// the puppetdb termini and through the farm, both feeding the shared
// PuppetDB, and compares what PuppetDB holds for the two nodes. It runs
// with the build tag puppetserver (make puppetdb-reference); with -record
// it also writes Puppet Server's side to testdata/puppetserver.json.
func TestSideBySide(t *testing.T) {
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
