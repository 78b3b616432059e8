package aws

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/test/e2e"
)

// TestOperatorAccessAWS: an operator reaches a stage on AWS (the
// emulators) without a listener of the broker's, with `--backend aws` and
// the caller's credentials: code deploy, code status, nodes, ca generate
// --operator and ca list. The operator certificate then works through a
// `broker serve` front door (mTLS), an agent's does not, and its loopback
// listeners serve /metrics and the operator API apart. The stage's CA took
// over a Puppet Server's key, imported into a Secrets Manager secret
// (`broker ca init --import-key ca_key.pem --ca-key-secret`): a real agent
// enrols with a certificate that key signed.
func TestOperatorAccessAWS(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: emulators and real brokers; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := e2e.StartAWS(t, ctx)
	envs := e2e.CopyExampleEnvs(t)
	caKey, caKeyFile := puppetServerCAKey(t)
	a.CAKeyArgs = []string{"--ca-key-secret", e2e.CASecret}
	a.InitCA(t, "--import-key", caKeyFile)
	serve := a.ServeArgs(t, envs, t.TempDir(), "--certname", "door1.example.test")
	// The stage's resources, as the operator names them: broker serve's
	// flags without the listeners, the work directory and the serving
	// choices.
	stage := []string{"--backend", "aws", "--bucket", "farm", "--nodes-table", "nodes", "--node-index-table", "node-index",
		"--environments-table", "environments", "--urgent-queue-url", a.Queues.UrgentURL, "--bulk-queue-url", a.Queues.BulkURL}
	stage = append(stage, a.CAArgs()...)
	run := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, e2e.BrokerBin(t), args...)
		cmd.Env = append(os.Environ(), a.Env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if _, err := a.State.UpdateNode(ctx, "web01.example.test", func(n *farm.Node) error {
		n.Environment = "production"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	opsDir := filepath.Join(t.TempDir(), "ops")
	steps := []struct {
		name string
		args []string
		want string
	}{
		{"code deploy", append([]string{"code", "deploy", "production", "--environments", envs, "--detach"}, stage...), "production: code_id"},
		{"code status", append([]string{"code", "status", "production"}, stage...), "production "},
		{"nodes", append([]string{"nodes"}, stage...), "web01.example.test"},
		{"ca generate --operator", append([]string{"ca", "generate", "ops.example.test", "--operator", "--out", opsDir}, stage...), "operator certificate for ops.example.test"},
		{"ca list", append([]string{"ca", "list"}, stage...), "ops.example.test"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			out, err := run(t, s.args...)
			if err != nil || !strings.Contains(out, s.want) {
				t.Fatalf("broker %s: %v, want output with %q:\n%s", strings.Join(s.args[:3], " "), err, s.want, out)
			}
		})
	}
	if out, err := run(t, append([]string{"code", "deploy", "production"}, stage...)...); err == nil || !strings.Contains(out, "--environments DIR") {
		t.Errorf("code deploy --backend aws without --environments: %v\n%s", err, out)
	}

	// The operator certificate through a front door.
	door := e2e.StartBroker(t, a.Env, serve...)
	mtls := []string{"--admin", "https://" + door.Addr, "--cert", filepath.Join(opsDir, "ops.example.test.cert.pem"),
		"--key", filepath.Join(opsDir, "ops.example.test.key.pem"), "--ca-cert", filepath.Join(opsDir, "ca.pem")}
	if out, err := run(t, append([]string{"nodes"}, mtls...)...); err != nil || !strings.Contains(out, "web01.example.test") {
		t.Fatalf("nodes through the front door with the operator certificate: %v\n%s", err, out)
	}
	if out, err := run(t, "nodes", "--admin", "https://"+door.Addr); err == nil || !strings.Contains(out, "--cert FILE --key FILE --ca-cert FILE") {
		t.Fatalf("nodes through the front door without a certificate: %v\n%s", err, out)
	}
	agent := e2e.NewAgent(t, "agent1.example.test")
	if code, out := agent.Bootstrap(t, door); code != 0 {
		t.Fatalf("puppet ssl bootstrap: exit %d\n%s", code, out)
	}
	checkEnrolled(t, agent, caKey.Public())
	ssl := filepath.Join(agent.Dir, "ssl")
	if out, err := run(t, "nodes", "--admin", "https://"+door.Addr, "--cert", filepath.Join(ssl, "certs", agent.Certname+".pem"),
		"--key", filepath.Join(ssl, "private_keys", agent.Certname+".pem"), "--ca-cert", filepath.Join(ssl, "certs", "ca.pem")); err == nil {
		t.Fatalf("nodes through the front door with an agent's certificate: want refused\n%s", out)
	}
	if out, err := run(t, append([]string{"ca", "revoke", "ops.example.test"}, stage...)...); err != nil {
		t.Fatalf("ca revoke --backend aws: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second) // the front door reads the CRL again within a second or so
	for {
		out, err := run(t, append([]string{"nodes"}, mtls...)...)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked operator certificate still works through the front door:\n%s", out)
		}
		time.Sleep(time.Second)
	}
	// The loopback listeners serve one thing each.
	for _, c := range []struct {
		url  string
		want int
	}{{door.Metrics + "/metrics", 200}, {door.Metrics + "/admin/v1/nodes", 404}, {door.Admin + "/admin/v1/nodes", 200}, {door.Admin + "/metrics", 404}} {
		if got := httpStatus(t, c.url); got != c.want {
			t.Errorf("GET %s = %d, want %d", c.url, got, c.want)
		}
	}
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// puppetServerCAKey writes a CA key as Puppet Server keeps it (ca_key.pem:
// PKCS #1 RSA) and returns the key and the file.
func puppetServerCAKey(t *testing.T) (*rsa.PrivateKey, string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca_key.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	return key, file
}
