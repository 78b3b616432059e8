package deploy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// postCatalog asks for the node's catalog as an agent does, with its facts.
func postCatalog(t *testing.T, n *e2e.SyntheticNode, f *e2e.Farm, values map[string]any) (int, string) {
	t.Helper()
	doc, _ := json.Marshal(map[string]any{"name": n.Certname, "values": values})
	form := url.Values{"facts_format": {"application/json"}, "facts": {url.QueryEscape(string(doc))},
		"environment": {"production"}, "static_catalog": {"true"}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+f.Addr+"/puppet/v3/catalog/"+n.Certname+"?environment=production",
		bytes.NewReader([]byte(form.Encode())))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/vnd.puppet.rich+json, application/json")
	resp, err := n.Client.Do(req)
	if err != nil {
		t.Fatalf("catalog request for %s: %v", n.Certname, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type deployStatus struct {
	Nodes, Queued, Compiled, Unchanged, Failed, Other int
	CodeID                                            string `json:"code_id"`
}

func getDeployStatus(t *testing.T, f *e2e.Farm) deployStatus {
	t.Helper()
	resp, err := http.Get(f.Admin + "/admin/v1/code/status/production")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st deployStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCodeDeployWave deploys new code to 200 nodes (real compiles on the
// bulk lane) and, during the wave, brings up a new node: its first compile
// goes on the urgent lane and is served while the wave still has work
// queued. The CLI shows progress until the wave is done.
func TestCodeDeployWave(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	f := e2e.StartFarm(t, t.TempDir(), envs)
	const count = 200
	e2e.PutFleetFacts(t, f, e2e.EnrolFleet(t, f, "wave%03d.example.test", count), 8)
	e2e.WaitFor(t, "the first compile of all 200 nodes", 5*time.Minute, func() bool {
		st := getDeployStatus(t, f)
		return st.Nodes == count && st.Queued == 0 && st.Compiled == count
	})
	newcomer := e2e.Enrol(t, f, "newcomer.example.test")

	// New code: a changed static file changes every catalog (its checksum).
	static := filepath.Join(envs, "production", "modules", "demo", "files", "static.txt")
	if err := os.WriteFile(static, []byte("wave two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deploy := exec.Command(e2e.BrokerBin(t), "code", "deploy", "production", "--admin", f.Admin)
	var out bytes.Buffer
	deploy.Stdout, deploy.Stderr = &out, &out
	if err := deploy.Start(); err != nil {
		t.Fatal(err)
	}
	e2e.WaitFor(t, "the deploy to queue the wave", time.Minute, func() bool {
		st := getDeployStatus(t, f)
		return st.Queued > count/2
	})
	start := time.Now()
	code, body := postCatalog(t, newcomer, f, e2e.SyntheticFacts(newcomer.Certname, count))
	wait := time.Since(start)
	during := getDeployStatus(t, f)
	if code != http.StatusOK || !strings.Contains(body, `"name":"newcomer.example.test"`) {
		t.Fatalf("newcomer's first catalog: %d %s", code, trunc(body))
	}
	t.Logf("new node's first catalog during the wave: %s (wave then: %d of %d still queued)",
		wait.Round(time.Millisecond), during.Queued, count)
	if during.Queued == 0 {
		t.Errorf("the wave had finished before the new node got its catalog: it may have waited behind the wave")
	}

	if err := deploy.Wait(); err != nil {
		t.Fatalf("broker code deploy: %v\n%s", err, out.String())
	}
	progress := out.String()
	t.Logf("broker code deploy output:\n%s", progress)
	if !strings.Contains(progress, "queued for recompile on the bulk lane") ||
		!strings.Contains(progress, "ETA done") || !strings.Contains(progress, "/s, ETA") ||
		strings.Count(progress, "done:") < 2 {
		t.Errorf("deploy output lacks progress lines")
	}
	final := getDeployStatus(t, f)
	if final.Compiled != count+1 || final.Failed != 0 || final.Queued != 0 {
		t.Errorf("after the wave: %+v, want %d compiled (the wave and the newcomer)", final, count+1)
	}
}
