package agent

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestCRLAfterRevocationBurst revokes a dozen certificates in a burst, so
// that several CRLs are signed within each second, and then drives real
// agents: a brand-new one bootstraps and runs (Puppet's agent refuses a CRL
// dated even a second ahead of its clock: "The CRL issued by … is not yet
// valid"), and one that last looked at its CRL during the burst refreshes
// it (crl_refresh_interval) and gets the last CRL, not a 304.
func TestCRLAfterRevocationBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	f := e2e.StartFarm(t, t.TempDir(), envs)
	existing := e2e.NewAgent(t, "existing.example.test")
	if code, out := existing.Run(t, f); code != 2 {
		t.Fatalf("existing agent's first run: exit %d, want 2\n%s", code, out)
	}

	const burst = 12
	names := make([]string, burst)
	for i := range names {
		names[i] = fmt.Sprintf("revoked%02d.example.test", i)
		e2e.Enrol(t, f, names[i])
	}
	var lastRevocation time.Time
	for i, name := range names {
		if i == burst-1 {
			lastRevocation = time.Now()
		}
		if out, err := f.CLI("ca", "revoke", name); err != nil {
			t.Fatalf("ca revoke %s: %v\n%s", name, err, out)
		}
	}
	// The existing agent last checked its CRL just before the last
	// revocation, in the same second: Puppet's agent sends its CRL file's
	// mtime as If-Modified-Since.
	crlFile := filepath.Join(existing.Dir, "ssl", "crl.pem")
	if err := os.Chtimes(crlFile, lastRevocation, lastRevocation); err != nil {
		t.Fatal(err)
	}

	t.Run("new agent bootstraps after the burst", func(t *testing.T) {
		fresh := e2e.NewAgent(t, "fresh.example.test")
		code, out := fresh.Run(t, f)
		if code != 2 {
			t.Fatalf("new agent's first run after the burst: exit %d, want 2\n%s", code, out)
		}
		checkAgentCRL(t, fresh, burst)
	})

	t.Run("existing agent refreshes its CRL", func(t *testing.T) {
		// The agent refreshes once its CRL is over crl_refresh_interval old, in whole seconds.
		time.Sleep(time.Until(lastRevocation.Add(2 * time.Second)))
		code, out := existing.Run(t, f, "--crl_refresh_interval", "1s")
		if code != 0 || !strings.Contains(out, "Refreshing CRL") || strings.Contains(out, "CRL is unmodified") {
			t.Fatalf("run with crl_refresh_interval after the burst: exit %d, want 0 and the new CRL\n%s", code, out)
		}
		checkAgentCRL(t, existing, burst)
	})
}

// checkAgentCRL checks that the agent's CRL lists revoked certificates and
// is valid by the agent's clock.
func checkAgentCRL(t *testing.T, a *e2e.Agent, revoked int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(a.Dir, "ssl", "crl.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s's crl.pem is not PEM", a.Certname)
	}
	crl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		t.Fatalf("%s's crl.pem: %v", a.Certname, err)
	}
	if len(crl.RevokedCertificateEntries) != revoked {
		t.Errorf("%s's CRL lists %d revocations, want %d", a.Certname, len(crl.RevokedCertificateEntries), revoked)
	}
	if crl.ThisUpdate.After(time.Now()) {
		t.Errorf("%s's CRL is dated in the future: thisUpdate %s", a.Certname, crl.ThisUpdate)
	}
}
