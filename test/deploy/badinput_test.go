package deploy

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// csrPEM is a PEM certificate request for cn, with a key of its own.
func csrPEM(t *testing.T, cn string) []byte {
	csr, _ := farmtest.NewCSR(t, cn)
	return csr
}

// TestBadInput sends malformed requests: each gets a clear 4xx with a
// message, and none leaves anything behind (no node record, no certificate).
func TestBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	f := e2e.StartFarm(t, t.TempDir(), e2e.CopyExampleEnvs(t))
	n := e2e.Enrol(t, f, "bad1.example.test")
	base := "https://" + f.Addr
	anon := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	tests := []struct {
		name       string
		client     *http.Client
		method     string
		path       string
		body       []byte
		ctype      string
		wantStatus int
		wantBody   string
	}{
		{"catalog facts not JSON", n.Client, "POST", "/puppet/v3/catalog/bad1.example.test?environment=production",
			[]byte("facts_format=application%2Fjson&facts=%257Bnot-json"), "application/x-www-form-urlencoded", 400, "not a JSON facts object"},
		{"catalog facts bad encoding", n.Client, "POST", "/puppet/v3/catalog/bad1.example.test?environment=production",
			[]byte("facts=%zz"), "application/x-www-form-urlencoded", 400, "Bad Request"},
		{"facts without values", n.Client, "PUT", "/puppet/v3/facts/bad1.example.test?environment=production",
			[]byte(`{"name":"bad1.example.test"}`), "application/json", 400, `no \"values\" object`},
		{"facts name mismatch", n.Client, "PUT", "/puppet/v3/facts/bad1.example.test?environment=production",
			[]byte(`{"name":"other","values":{}}`), "application/json", 400, "does not match"},
		{"oversized facts", n.Client, "PUT", "/puppet/v3/facts/bad1.example.test?environment=production",
			bytes.Repeat([]byte("x"), 17<<20), "application/json", 413, "too large"},
		{"unknown environment", n.Client, "PUT", "/puppet/v3/facts/bad1.example.test?environment=nosuchenv",
			[]byte(`{"name":"bad1.example.test","values":{}}`), "application/json", 404, "Could not find environment 'nosuchenv'"},
		{"invalid environment name", n.Client, "PUT", "/puppet/v3/facts/bad1.example.test?environment=..%2Fetc",
			[]byte(`{"name":"bad1.example.test","values":{}}`), "application/json", 400, "environment"},
		{"report for another host", n.Client, "PUT", "/puppet/v3/report/bad1.example.test?environment=production",
			[]byte(`{"host":"other","status":"changed"}`), "application/json", 400, "does not match"},
		{"path traversal in module mount", n.Client, "GET", "/puppet/v3/file_content/modules/demo/../../../../etc/passwd?environment=production",
			nil, "", 400, ".."},
		{"encoded path traversal", n.Client, "GET", "/puppet/v3/file_content/modules/demo/%2e%2e/%2e%2e/etc/passwd?environment=production",
			nil, "", 400, ".."},
		{"traversal in static content", n.Client, "GET", "/puppet/v3/static_file_content/modules/demo/files/..%2f..%2fmanifests/init.pp?environment=production&code_id=x",
			nil, "", 400, ".."},
		{"static content without code_id", n.Client, "GET", "/puppet/v3/static_file_content/modules/demo/files/static.txt?environment=production",
			nil, "", 400, "requires an environment, a code-id, and a file-path"},
		{"invalid certname CSR", anon, "PUT", "/puppet-ca/v1/certificate_request/UPPER.example.test",
			csrPEM(t, "UPPER.example.test"), "text/plain", 400, "certname"},
		{"CSR CN mismatch", anon, "PUT", "/puppet-ca/v1/certificate_request/good.example.test",
			csrPEM(t, "evil.example.test"), "text/plain", 400, "evil.example.test"},
		{"CSR garbage", anon, "PUT", "/puppet-ca/v1/certificate_request/garbage.example.test",
			[]byte("not a csr"), "text/plain", 400, ""},
		{"no client certificate", anon, "GET", "/puppet/v3/node/bad1.example.test?environment=production",
			nil, "", 403, "Forbidden request: /puppet/v3/node/bad1.example.test (method :get)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, base+tt.path, bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			resp, err := tt.client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			body := e2e.ReadAll(resp)
			if resp.StatusCode != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s %s = %d %q, want %d containing %q", tt.method, tt.path, resp.StatusCode, trunc(body), tt.wantStatus, tt.wantBody)
			}
		})
	}

	// Nothing was stored by any of it.
	if _, ok := f.Nodes()["bad1.example.test"]; ok {
		t.Errorf("a node record exists for bad1.example.test after only bad requests")
	}
	certs, err := f.CLI("ca", "list")
	if err != nil {
		t.Fatalf("ca list: %v\n%s", err, certs)
	}
	for _, name := range []string{"upper.example.test", "UPPER.example.test", "good.example.test", "evil.example.test", "garbage.example.test"} {
		if strings.Contains(certs, name) {
			t.Errorf("CA has an entry for %s after a refused request:\n%s", name, certs)
		}
	}
}

func trunc(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// TestRestartKeepsQueuedJobs kills broker dev with compiles still queued and
// checks that a restart on the same --data compiles them all.
func TestRestartKeepsQueuedJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	data, envs := t.TempDir(), e2e.CopyExampleEnvs(t)
	f := e2e.StartFarm(t, data, envs, "--workers", "1")
	nodes := e2e.EnrolFleet(t, f, "restart%02d.example.test", 60)
	// Upload every node's facts in one burst, so that compiles queue up
	// behind the single worker.
	e2e.PutFleetFacts(t, f, nodes, 0)
	depth := f.Metric(`compilefarm_queue_depth{lane="urgent"}`) + f.Metric(`compilefarm_queue_in_flight{lane="urgent"}`)
	if depth == 0 {
		t.Fatalf("no compile job was queued when the broker was killed; the test cannot show anything")
	}
	oldCode := currentCode(t, f, nodes[0])
	t.Logf("killing broker -9 with %v jobs queued or in flight", depth)
	f.Kill()
	// The code changes while the farm is down: the restart must notice.
	static := filepath.Join(envs, "production", "modules", "demo", "files", "static.txt")
	if err := os.WriteFile(static, []byte("changed while the farm was down\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	g := e2e.StartFarm(t, data, envs)
	newCode := currentCode(t, g, nodes[0])
	if newCode == oldCode {
		t.Fatalf("code changed on disk while down, but the restarted farm still runs code_id %s", oldCode)
	}
	e2e.WaitFor(t, "every node to have a catalog of the new code after restart", 5*time.Minute, func() bool {
		records := g.Nodes()
		for _, n := range nodes {
			if c := records[n.Certname].Catalog; c == nil || c.CodeID != newCode {
				return false
			}
		}
		return true
	})
	if got := g.Metric(`compilefarm_compiles_total{result="ok"}`); got == 0 {
		t.Errorf("the restarted broker compiled nothing")
	}
}

// currentCode returns the code_id the farm runs for production, as the
// environments endpoint reports it.
func currentCode(t *testing.T, f *e2e.Farm, n *e2e.SyntheticNode) string {
	t.Helper()
	resp, err := n.Client.Get("https://" + f.Addr + "/puppet/v3/environments")
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Environments map[string]struct {
			Settings struct {
				ConfigVersion string `json:"config_version"`
			} `json:"settings"`
		} `json:"environments"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decode environments: %v", err)
	}
	resp.Body.Close()
	id := body.Environments["production"].Settings.ConfigVersion
	if id == "" {
		t.Fatalf("no code_id for production in /puppet/v3/environments")
	}
	return id
}
