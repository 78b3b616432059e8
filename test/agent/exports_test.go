package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestExportedResources: node A exports a host entry (@@host), node B
// collects it (Host <<| |>>); both are real agents. Changing A's fact that
// its export reads recompiles B exactly once, and B's next run applies the
// new entry.
func TestExportedResources(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	f := e2e.StartFarm(t, t.TempDir(), e2e.CopyExampleEnvs(t))
	a, b := e2e.NewAgent(t, "exporter.example.test"), e2e.NewAgent(t, "collector.example.test")
	a.SetFact(t, "cf_export_ip", "192.0.2.10")
	if code, out := a.Run(t, f); code != 2 {
		t.Fatalf("exporter first run: exit %d\n%s", code, out)
	}
	b.SetFact(t, "cf_collect_hosts", "true")
	if code, out := b.Run(t, f); code != 2 {
		t.Fatalf("collector first run: exit %d\n%s", code, out)
	}
	hosts := func() string {
		data, _ := os.ReadFile(filepath.Join(b.Root, "hosts"))
		return string(data)
	}
	if !strings.Contains(hosts(), "192.0.2.10") || !strings.Contains(hosts(), "exporter.example.test") {
		t.Fatalf("collector's hosts file lacks the exported entry:\n%s", hosts())
	}

	before := f.FinishedCompiles()
	a.SetFact(t, "cf_export_ip", "192.0.2.20")
	if code, out := a.Run(t, f); code != 0 {
		// The exporter's own catalog does not change: exports are not in it.
		t.Errorf("exporter run after its fact changed: exit %d, want 0\n%s", code, out)
	}
	e2e.WaitFor(t, "the collector's recompile", time.Minute, func() bool { return f.FinishedCompiles() >= before+2 })
	if got := f.FinishedCompiles() - before; got != 2 {
		t.Errorf("the export change caused %v compiles, want 2 (the exporter, then the collector once)", got)
	}
	if code, out := b.Run(t, f); code != 2 {
		t.Fatalf("collector run after the export changed: exit %d\n%s", code, out)
	}
	if !strings.Contains(hosts(), "192.0.2.20") || strings.Contains(hosts(), "192.0.2.10") {
		t.Errorf("collector's hosts file after the change:\n%s", hosts())
	}
}
