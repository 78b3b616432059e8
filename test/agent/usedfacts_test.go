package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestUsedFacts drives a real agent through fact changes and counts the
// compiles each causes: facts no manifest reads (the agent's own uptime,
// an external fact nobody reads) cause none; a fact read only by an ERB
// template causes exactly one, and so does a fact the manifests read.
func TestUsedFacts(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	f := e2e.StartFarm(t, t.TempDir(), e2e.CopyExampleEnvs(t))
	a := e2e.NewAgent(t, "facts1.example.test")
	if code, out := a.Run(t, f); code != 2 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	steps := []struct {
		name         string
		fact, value  string
		wantExit     int
		wantCompiles float64
		check        func(t *testing.T)
	}{
		// Every run also changes the agent's uptime and memory facts.
		{"unread facts change", "cf_unread", "one", 0, 0, nil},
		{"another unread fact value", "cf_unread", "two", 0, 0, nil},
		{"fact read by a template", "cf_note", "read by motd.erb", 2, 1, func(t *testing.T) {
			if b, _ := os.ReadFile(filepath.Join(a.Root, "motd.txt")); !strings.Contains(string(b), "Note: read by motd.erb") {
				t.Errorf("motd.txt = %q", b)
			}
		}},
		{"fact read by the manifests", "cf_role", "web", 2, 1, func(t *testing.T) { e2e.CheckManaged(t, a, "web") }},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := f.FinishedCompiles()
			a.SetFact(t, st.fact, st.value)
			code, out := a.Run(t, f)
			if code != st.wantExit {
				t.Fatalf("exit %d, want %d\n%s", code, st.wantExit, out)
			}
			if got := f.FinishedCompiles() - before; got != st.wantCompiles {
				t.Errorf("%v compiles, want %v", got, st.wantCompiles)
			}
			if st.check != nil {
				st.check(t)
			}
		})
	}
}
