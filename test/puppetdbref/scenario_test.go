package puppetdbref

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/compilefarm/compilefarm/internal/farmproc"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// environments is the code both sides serve (testdata/environments: one
// environment, production, with module reference).
func environments() string {
	return filepath.Join(farmproc.ModuleRoot(), "test", "puppetdbref", "testdata", "environments")
}

// step is one agent run of the scenario.
type step struct {
	name       string
	role       string // the cf_role fact
	fix        bool   // create <root>/fixed before the run: Exec[check-fixed] stops failing
	drift      bool   // change <root>/motd behind Puppet's back before the run
	noop       bool   // run with --noop
	wantExit   int    // puppet agent -t's detailed exit code
	wantStatus string // the run's report status
}

// scenario is the same five runs on each side: a first run with changes,
// a failure (Exec[check-fixed]), a resource skipped for it and a notify;
// a run after a fact change and the fix, with changes and refreshes only;
// a run with nothing to do; a --noop run after a managed file drifted
// (noop events, noop_pending); and the run that corrects the drift
// (corrective_change).
var scenario = []step{
	{name: "first", role: "web", wantExit: 6, wantStatus: "failed"},
	{name: "changed", role: "db", fix: true, wantExit: 2, wantStatus: "changed"},
	{name: "unchanged", role: "db", wantExit: 0, wantStatus: "unchanged"},
	{name: "noop", role: "db", drift: true, noop: true, wantExit: 0, wantStatus: "unchanged"},
	{name: "corrective", role: "db", wantExit: 2, wantStatus: "changed"},
}

// runScenario runs the scenario's agent runs for certname against s and
// returns the agent (its directory is what normalize replaces).
func runScenario(t *testing.T, s e2e.Server, certname string) *e2e.Agent {
	t.Helper()
	a := e2e.NewAgent(t, certname)
	for _, st := range scenario {
		writeFacts(t, a, st.role)
		if st.fix {
			if err := os.WriteFile(filepath.Join(a.Root, "fixed"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if st.drift {
			if err := os.WriteFile(filepath.Join(a.Root, "motd"), []byte("drifted\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		args := []string{"--facts_terminus", "yaml"}
		if st.noop {
			args = append(args, "--noop")
		}
		code, out := a.Run(t, s, args...)
		if code != st.wantExit {
			t.Fatalf("%s: %s run: exit %d, want %d\n%s", certname, st.name, code, st.wantExit, out)
		}
	}
	return a
}

// writeFacts gives the agent its facts for the next run: the agent reads
// them with --facts_terminus yaml from its clientyamldir, so both sides'
// agents send the same facts (Facter's would differ in uptime, memory
// and load between any two runs) and a recording made on one machine
// holds on another. They are of every JSON kind PuppetDB stores.
func writeFacts(t *testing.T, a *e2e.Agent, role string) {
	t.Helper()
	values := map[string]any{
		"clientcert":    a.Certname,
		"clientversion": "7.23.0",
		"clientnoop":    false,
		"puppetversion": "7.23.0",
		"cf_root":       a.Root,
		"cf_role":       role,
		"kernel":        "Linux",
		"os": map[string]any{
			"name": "Debian", "family": "Debian", "architecture": "amd64",
			"release": map[string]any{"full": "12.8", "major": "12", "minor": "8"},
			"selinux": map[string]any{"enabled": false},
		},
		"networking": map[string]any{
			"ip": "192.0.2.7", "mtu": 1500,
			"interfaces": map[string]any{"eth0": map[string]any{"ip": "192.0.2.7", "mac": "52:54:00:12:34:56"}},
		},
		"processors":      map[string]any{"count": 2, "models": []any{"Virtual CPU", "Virtual CPU"}, "speed": "2.40 GHz"},
		"memory":          map[string]any{"system": map[string]any{"total_bytes": 25269002240, "capacity": "0.27%"}},
		"load_average":    1.25,
		"negative":        -3.5,
		"is_virtual":      true,
		"zero_padded":     "007",
		"empty_hash":      map[string]any{},
		"empty_list":      []any{},
		"mixed_list":      []any{1, "two", 3.5, false, map[string]any{"four": 4}, []any{"five"}},
		"unicode":         "héllo wörld ✓",
		"dotted.name":     "a fact whose name holds a dot",
		"cf_multi_line":   "line one\nline two\n",
		"cf_quoted_value": `a "quoted" \ value`,
	}
	doc := map[string]any{"name": a.Certname, "values": values}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(a.Dir, "var", "client_yaml", "facts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// JSON is YAML: the tag makes Puppet's YAML terminus load it as facts.
	yaml := append([]byte("--- !ruby/object:Puppet::Node::Facts\n"), b...)
	if err := os.WriteFile(filepath.Join(dir, a.Certname+".yaml"), yaml, 0o644); err != nil {
		t.Fatal(err)
	}
}
