package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/compilefarm/compilefarm/internal/farmproc"
)

// Farm is one running broker (dev or serve) of a test.
type Farm struct {
	*farmproc.Proc
	t    *testing.T
	Data string // broker dev's --data
	Work string // broker serve's --work, when StartFleet started it
	Envs string // its --environments
}

// BrokerBin is the broker binary Main built.
func BrokerBin(t *testing.T) string { return farmproc.Binary(t, "broker") }

// CompileFunctionBin is the compile Lambda's bootstrap (functions/compile),
// built once for all the tests of the package that run it.
func CompileFunctionBin(t *testing.T) string { return farmproc.Binary(t, "functions/compile") }

// CopyExampleEnvs copies examples/environments to a temp dir the test may change.
func CopyExampleEnvs(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "environments")
	src := filepath.Join(farmproc.ModuleRoot(), "examples", "environments")
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("copy example environments: %v: %s", err, out)
	}
	return dst
}

// AddBrokenEnv adds an environment named broken to envs: a copy of
// production whose site.pp is site, which does not compile.
func AddBrokenEnv(t *testing.T, envs, site string) {
	t.Helper()
	broken := filepath.Join(envs, "broken")
	if out, err := exec.Command("cp", "-a", filepath.Join(envs, "production"), broken).CombinedOutput(); err != nil {
		t.Fatalf("copy production to broken: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(broken, "manifests", "site.pp"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
}

// StartFarm starts broker dev on free loopback ports (two compile
// workers) and waits until it is up.
func StartFarm(t *testing.T, data, envs string, extra ...string) *Farm {
	t.Helper()
	f := StartBroker(t, nil, farmproc.DevArgs(envs, data, append([]string{"--workers", "2"}, extra...)...)...)
	f.Data, f.Envs = data, envs
	return f
}

// StartBroker runs the broker with args (and env added) and waits for its
// "is up" line, which names its addresses.
func StartBroker(t *testing.T, env []string, args ...string) *Farm {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	return &Farm{Proc: farmproc.Start(t, BrokerBin(t), env, args...), t: t}
}

// FinishedCompiles counts the compiles that finished, whether they changed
// a catalog or not.
func (f *Farm) FinishedCompiles() float64 {
	f.t.Helper()
	return f.Metric(`compilefarm_compiles_total{result="ok"}`) + f.Metric(`compilefarm_compiles_total{result="unchanged"}`)
}

// CLI runs an operator verb against this farm's operator API.
func (f *Farm) CLI(args ...string) (string, error) { return f.Proc.CLI(BrokerBin(f.t), args...) }

// NodeRecord is what the operator API lists of a node.
type NodeRecord struct {
	Certname    string `json:"certname"`
	Environment string `json:"environment"`
	Catalog     *struct {
		Seq    uint64 `json:"seq"`
		CodeID string `json:"code_id"`
	} `json:"catalog"`
	Compile *struct {
		Result string `json:"result"`
		Error  string `json:"error"`
	} `json:"compile"`
	Report *struct {
		Status string `json:"status"`
	} `json:"report"`
}

// Nodes lists the farm's nodes by certname through the operator API.
func (f *Farm) Nodes() map[string]NodeRecord {
	f.t.Helper()
	resp, err := http.Get(f.Admin + "/admin/v1/nodes")
	if err != nil {
		f.t.Fatalf("list nodes: %v", err)
	}
	defer resp.Body.Close()
	var list []NodeRecord
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		f.t.Fatalf("decode nodes: %v", err)
	}
	out := map[string]NodeRecord{}
	for _, n := range list {
		out[n.Certname] = n
	}
	return out
}
