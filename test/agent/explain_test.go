package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestExplain: after a real agent run with a changed external fact that
// the example environment's manifests read (cf_role), `broker explain`
// names that fact with its old and new value, `broker nodes` shows it next
// to the reason, and an unknown node is an error.
func TestExplain(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: a real broker dev, Ruby Puppet and a puppet agent; skipped with -short")
	}
	f := e2e.StartFarm(t, t.TempDir(), e2e.CopyExampleEnvs(t))
	a := e2e.NewAgent(t, "explain1.example.test")
	a.SetFact(t, "cf_role", "base")
	if code, out := a.Run(t, f); code != 2 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	a.SetFact(t, "cf_role", "web")
	if code, out := a.Run(t, f); code != 2 {
		t.Fatalf("run with cf_role changed: exit %d\n%s", code, out)
	}

	out, err := f.CLI("explain", a.Certname)
	if err != nil {
		t.Fatalf("broker explain: %v\n%s", err, out)
	}
	t.Logf("broker explain %s:\n%s", a.Certname, out)
	for _, want := range []string{
		"environment  production\n",
		", facts-changed, urgent lane, at ",
		"): compiled\n",
		`  facts.cf_role: "base" -> "web"` + "\n",
		"reads        ",
		"cf_role (",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("broker explain lacks %q", want)
		}
	}

	js, err := f.CLI("explain", a.Certname, "--json")
	if err != nil {
		t.Fatalf("broker explain --json: %v\n%s", err, js)
	}
	var ex struct {
		CodeID  string `json:"code_id"`
		State   string `json:"state"`
		Request struct {
			Reason  string `json:"reason"`
			Changes []struct {
				Path     []string `json:"path"`
				Kind     string   `json:"kind"`
				Old, New string
			} `json:"changes"`
		} `json:"request"`
		Reads struct {
			Reads int `json:"reads"`
		} `json:"reads"`
	}
	if err := json.Unmarshal([]byte(js), &ex); err != nil {
		t.Fatalf("broker explain --json is not JSON: %v\n%s", err, js)
	}
	if ch := ex.Request.Changes; ex.Request.Reason != "facts-changed" || len(ch) != 1 ||
		strings.Join(ch[0].Path, ".") != "cf_role" || ch[0].Kind != "value" || ch[0].Old != "base" || ch[0].New != "web" {
		t.Errorf("broker explain --json request = %+v, want cf_role base -> web", ex.Request)
	}
	if ex.State != "compiled" || ex.CodeID == "" || ex.Reads.Reads == 0 {
		t.Errorf("broker explain --json: state %q, code_id %q, %d reads", ex.State, ex.CodeID, ex.Reads.Reads)
	}

	nodes, err := f.CLI("nodes")
	if err != nil || !strings.Contains(nodes, "facts-changed (cf_role)") {
		t.Errorf("broker nodes does not show the changed fact: %v\n%s", err, nodes)
	}
	t.Logf("broker nodes:\n%s", nodes)

	out, err = f.CLI("explain", "nobody.example.test")
	if err == nil || !strings.Contains(out, "node nobody.example.test is not known to the farm") {
		t.Errorf("broker explain of an unknown node: err %v, want an error saying so\n%s", err, out)
	}
}
