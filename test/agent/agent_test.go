package agent

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestRealAgent drives an unchanged Debian `puppet agent -t` against `broker
// dev`: CA bootstrap, pluginsync, a static catalog with module files (single
// and recursive), ERB and EPP content, reports, no compile for an unchanged
// second run, a recompile after a fact the manifests read changes, 403 for
// another node's catalog, a readable error for a manifest that fails, and
// CRL refreshes (304 while unchanged, the new CRL after a revocation).
func TestRealAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	f := e2e.StartFarm(t, t.TempDir(), envs)
	a := e2e.NewAgent(t, "agent1.example.test")

	code, out := a.Run(t, f)
	if code != 2 {
		t.Fatalf("first run: exit %d, want 2 (changes applied)\n%s", code, out)
	}
	e2e.CheckManaged(t, a, "base")
	if got := f.Nodes()[a.Certname]; got.Report == nil || got.Report.Status != "changed" {
		t.Errorf("first report: %+v, want status changed", got.Report)
	}

	okBefore := f.Metric(`compilefarm_compiles_total{result="ok"}`)
	freshBefore := f.Metric(`compilefarm_catalog_requests_total{outcome="fresh"}`)
	code, out = a.Run(t, f)
	if code != 0 {
		t.Fatalf("second run: exit %d, want 0 (nothing to change)\n%s", code, out)
	}
	if after := f.Metric(`compilefarm_compiles_total{result="ok"}`); after != okBefore {
		t.Errorf("second run caused %v compiles, want 0", after-okBefore)
	}
	if after := f.Metric(`compilefarm_catalog_requests_total{outcome="fresh"}`); after != freshBefore+1 {
		t.Errorf("fresh catalog requests went %v -> %v, want +1", freshBefore, after)
	}
	if got := f.Nodes()[a.Certname]; got.Report == nil || got.Report.Status != "unchanged" {
		t.Errorf("second report: %+v, want status unchanged", got.Report)
	}

	t.Run("used fact changes", func(t *testing.T) {
		before := f.Metric(`compilefarm_compiles_total{result="ok"}`)
		a.SetFact(t, "cf_role", "web")
		code, out := a.Run(t, f)
		if code != 2 {
			t.Fatalf("run after fact change: exit %d, want 2\n%s", code, out)
		}
		e2e.CheckManaged(t, a, "web")
		if after := f.Metric(`compilefarm_compiles_total{result="ok"}`); after != before+1 {
			t.Errorf("fact change caused %v compiles, want 1", after-before)
		}
	})

	t.Run("other node's catalog is forbidden", func(t *testing.T) {
		b := e2e.NewAgent(t, "agent2.example.test")
		if code, out := b.Run(t, f); code != 2 {
			t.Fatalf("agent2 first run: exit %d\n%s", code, out)
		}
		resp, err := b.TLSClient(t).Get("https://" + f.Addr + "/puppet/v3/catalog/agent1.example.test?environment=production")
		if err != nil {
			t.Fatal(err)
		}
		body := e2e.ReadAll(resp)
		if resp.StatusCode != 403 || !strings.Contains(body, "Forbidden request: /puppet/v3/catalog/agent1.example.test (method :get)") {
			t.Errorf("agent2 fetching agent1's catalog: %d %q, want 403 Forbidden request", resp.StatusCode, body)
		}
	})

	t.Run("code deploy recompiles and the agent applies it", func(t *testing.T) {
		before := f.Nodes()[a.Certname].Catalog.CodeID
		static := filepath.Join(envs, "production", "modules", "demo", "files", "static.txt")
		if err := os.WriteFile(static, []byte("deployed by the e2e test\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := f.CLI("code", "deploy", "production")
		if err != nil || !strings.Contains(out, "queued for recompile") {
			t.Fatalf("code deploy: %v\n%s", err, out)
		}
		e2e.WaitFor(t, "agent1's recompile for the new code", 2*time.Minute, func() bool {
			c := f.Nodes()[a.Certname].Catalog
			return c != nil && c.CodeID != before
		})
		if code, out := a.Run(t, f); code != 2 {
			t.Fatalf("run after deploy: exit %d, want 2\n%s", code, out)
		}
		if b, _ := os.ReadFile(filepath.Join(a.Root, "static.txt")); string(b) != "deployed by the e2e test\n" {
			t.Errorf("static.txt after deploy = %q", b)
		}
		out, err = f.CLI("code", "deploy", "production")
		if err != nil || !strings.Contains(out, "code unchanged") {
			t.Errorf("second deploy of the same code: %v\n%s", err, out)
		}
	})

	// Agents with crl_refresh_interval ask for the CRL with
	// If-Modified-Since: unchanged, the front door answers 304.
	refresh := []string{"--crl_refresh_interval", "1s"}
	t.Run("CRL refresh while unchanged", func(t *testing.T) {
		time.Sleep(2 * time.Second) // past the 1s interval since the CRL was fetched, in the agent's whole seconds
		code, out := a.Run(t, f, refresh...)
		if code != 0 || !strings.Contains(out, "Refreshing CRL") || !strings.Contains(out, "CRL is unmodified") {
			t.Fatalf("run with crl_refresh_interval: exit %d, want 0 and the CRL unmodified (304)\n%s", code, out)
		}
	})

	t.Run("revoked certificate is refused", func(t *testing.T) {
		r := e2e.NewAgent(t, "revoked.example.test")
		if code, out := r.Run(t, f); code != 2 {
			t.Fatalf("first run: exit %d\n%s", code, out)
		}
		if out, err := f.CLI("ca", "revoke", r.Certname); err != nil {
			t.Fatalf("ca revoke: %v\n%s", err, out)
		}
		if _, err := r.TLSClient(t).Get("https://" + f.Addr + "/puppet/v3/environments"); err == nil {
			t.Errorf("a revoked certificate still gets an answer")
		}
		code, out := r.Run(t, f)
		if code != 1 {
			t.Errorf("agent with a revoked certificate: exit %d, want 1\n%s", code, out)
		}
		list, _ := f.CLI("ca", "list")
		if !strings.Contains(list, "revoked.example.test") || !strings.Contains(list, "revoked") {
			t.Errorf("ca list does not show the revocation:\n%s", list)
		}
	})

	t.Run("CRL refresh after a revocation", func(t *testing.T) {
		time.Sleep(2 * time.Second)
		code, out := a.Run(t, f, refresh...)
		if code != 0 || !strings.Contains(out, "Refreshing CRL") || strings.Contains(out, "CRL is unmodified") {
			t.Fatalf("run after a revocation: exit %d, want 0 and a new CRL\n%s", code, out)
		}
		data, err := os.ReadFile(filepath.Join(a.Dir, "ssl", "crl.pem"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(data)
		if block == nil {
			t.Fatalf("agent's crl.pem is not PEM")
		}
		crl, err := x509.ParseRevocationList(block.Bytes)
		if err != nil || len(crl.RevokedCertificateEntries) != 1 {
			t.Fatalf("agent's CRL after refresh: %v, err %v; want the one revocation", crl, err)
		}
	})

	t.Run("compile error reaches agent and nodes", func(t *testing.T) {
		e2e.AddBrokenEnv(t, envs, "node default {\n  include role::web\n  file { '/x': ensure => \n}\n")
		if out, err := f.CLI("code", "deploy", "broken"); err != nil {
			t.Fatalf("deploy broken: %v\n%s", err, out)
		}
		c := e2e.NewAgent(t, "agent3.example.test")
		code, out := c.Run(t, f, "--environment", "broken")
		if code != 1 {
			t.Fatalf("agent on broken environment: exit %d, want 1\n%s", code, out)
		}
		if !strings.Contains(out, "Could not retrieve catalog from remote server") || !strings.Contains(out, "Syntax error") ||
			!strings.Contains(out, "site.pp") {
			t.Errorf("agent output lacks Puppet's compile error with its file:\n%s", out)
		}
		nodes, err := f.CLI("nodes")
		if err != nil {
			t.Fatalf("broker nodes: %v\n%s", err, nodes)
		}
		if !strings.Contains(nodes, "agent3.example.test") || !strings.Contains(nodes, "failed") || !strings.Contains(nodes, "Syntax error") {
			t.Errorf("broker nodes does not show agent3's failed compile:\n%s", nodes)
		}
		t.Logf("broker nodes:\n%s", nodes)
	})
}
