package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestStagedRelease holds an environment's code back, deploys new code,
// releases it to 10% of the nodes and checks with real agent runs that one
// node inside the 10% applies the new catalog while one outside keeps the
// old one; then releases it to all.
func TestStagedRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	f := e2e.StartFarm(t, t.TempDir(), envs)

	// Two real agents, one in the first 10% of buckets and one outside.
	var inName, outName string
	for i := 0; inName == "" || outName == ""; i++ {
		name := fmt.Sprintf("canary%d.example.test", i)
		if farm.ReleaseBucket(name) < 10 && inName == "" {
			inName = name
		} else if farm.ReleaseBucket(name) >= 10 && outName == "" {
			outName = name
		}
	}
	in, out := e2e.NewAgent(t, inName), e2e.NewAgent(t, outName)
	for _, a := range []*e2e.Agent{in, out} {
		if code, log := a.Run(t, f); code != 2 {
			t.Fatalf("%s first run: exit %d\n%s", a.Certname, code, log)
		}
	}
	// A fleet around them.
	e2e.PutFleetFacts(t, f, e2e.EnrolFleet(t, f, "fleet%02d.example.test", 30), 0)

	cli := func(args ...string) string {
		t.Helper()
		outp, err := f.CLI(args...)
		if err != nil {
			t.Fatalf("broker %s: %v\n%s", strings.Join(args, " "), err, outp)
		}
		t.Logf("broker %s:\n%s", strings.Join(args, " "), outp)
		return outp
	}
	cli("release", "production", "--hold")
	static := filepath.Join(envs, "production", "modules", "demo", "files", "static.txt")
	if err := os.WriteFile(static, []byte("release two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli("code", "deploy", "production") // follows the precompiles to the end

	// Held: nobody gets the new code yet.
	if code, log := in.Run(t, f); code != 0 {
		t.Fatalf("run under hold: exit %d, want 0 (old catalog)\n%s", code, log)
	}
	status := cli("release", "status", "production")
	if !strings.Contains(status, "holding (released to 0%") {
		t.Errorf("release status does not show the hold")
	}

	res := cli("release", "production", "--percent", "10")
	if !strings.Contains(res, "released to 10%") || !strings.Contains(res, "File") {
		t.Errorf("release output lacks the percentage or the summary of changes")
	}
	if code, log := in.Run(t, f); code != 2 {
		t.Fatalf("released node: exit %d, want 2 (new catalog)\n%s", code, log)
	}
	if b, _ := os.ReadFile(filepath.Join(in.Root, "static.txt")); string(b) != "release two\n" {
		t.Errorf("released node's static.txt = %q", b)
	}
	if code, log := out.Run(t, f); code != 0 {
		t.Fatalf("unreleased node: exit %d, want 0 (keeps the old catalog)\n%s", code, log)
	}
	if b, _ := os.ReadFile(filepath.Join(out.Root, "static.txt")); string(b) == "release two\n" {
		t.Errorf("unreleased node got the new static.txt")
	}
	status = cli("release", "status", "production")
	if fields := strings.Fields(e2e.LineOf(status, "new ")); len(fields) < 7 || fields[5] == "0" {
		t.Errorf("release status shows no node applying the new code:\n%s", status)
	}
	diff := cli("diff", inName)
	if !strings.Contains(diff, "~ File[") || !strings.Contains(diff, "static.txt]") || !strings.Contains(diff, "source content") {
		t.Errorf("diff of the released node does not show the static file's content change")
	}

	cli("release", "production", "--all")
	if code, log := out.Run(t, f); code != 2 {
		t.Fatalf("after --all: exit %d, want 2\n%s", code, log)
	}
	if b, _ := os.ReadFile(filepath.Join(out.Root, "static.txt")); string(b) != "release two\n" {
		t.Errorf("after --all static.txt = %q", b)
	}
}
