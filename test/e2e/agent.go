package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Agent is one real puppet agent with its own confdir, ssldir and vardir.
type Agent struct {
	Certname string
	Dir      string
	Root     string // where the example environment manages files (fact cf_root)
}

// NewAgent makes an agent's directories; it has no certificate until its
// first run.
func NewAgent(t *testing.T, certname string) *Agent {
	dir := t.TempDir()
	a := &Agent{Certname: certname, Dir: dir, Root: filepath.Join(dir, "managed")}
	for _, d := range []string{"conf", "managed"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	return a
}

// SetFact gives the agent an external fact (kept for its later runs).
func (a *Agent) SetFact(t *testing.T, name, value string) {
	t.Helper()
	p := filepath.Join(a.Dir, "facts.txt")
	old, _ := os.ReadFile(p)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(old)), "\n") {
		if l != "" && !strings.HasPrefix(l, name+"=") {
			lines = append(lines, l)
		}
	}
	lines = append(lines, name+"="+value)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Server is what an agent runs against: a farm (*Farm) or a Puppet
// Server (internal/puppetserver), on loopback with a certificate that
// names localhost.
type Server interface {
	Port() string // the port of its front door
}

// Run runs `puppet agent -t` against s and returns its exit code and output.
func (a *Agent) Run(t *testing.T, s Server, extra ...string) (int, string) {
	t.Helper()
	return a.puppet(t, append(append([]string{"agent", "-t"}, a.Settings(s)...), extra...))
}

// Bootstrap runs `puppet ssl bootstrap` against s: the agent enrols (its
// key, request and certificate, the CA certificate and CRL in its ssldir)
// without asking for a catalog. It returns the exit code and output.
func (a *Agent) Bootstrap(t *testing.T, s Server) (int, string) {
	t.Helper()
	return a.puppet(t, append([]string{"ssl", "bootstrap", "--waitforcert", "0"}, a.Settings(s)...))
}

// puppet runs puppet with args and the agent's environment.
func (a *Agent) puppet(t *testing.T, args []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "puppet", args...)
	cmd.Env = append(os.Environ(), a.Env()...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run puppet %s: %v\n%s", args[0], err, out.String())
	}
	return code, out.String()
}

// Settings are the Puppet settings of the agent's runs against s: its own
// directories, certname and server.
func (a *Agent) Settings(s Server) []string {
	return []string{
		"--certname", a.Certname, "--server", "localhost", "--serverport", s.Port(),
		"--confdir", filepath.Join(a.Dir, "conf"), "--vardir", filepath.Join(a.Dir, "var"),
		"--logdir", filepath.Join(a.Dir, "log"), "--rundir", filepath.Join(a.Dir, "run"),
		"--publicdir", filepath.Join(a.Dir, "public"), "--codedir", filepath.Join(a.Dir, "code"),
		"--ssldir", filepath.Join(a.Dir, "ssl"),
		"--http_read_timeout", "120",
	}
}

// Env is the environment of the agent's runs: its managed root and its
// external facts (factsScript).
func (a *Agent) Env() []string {
	return []string{"FACTER_cf_root=" + a.Root, "CF_E2E_FACTS=" + filepath.Join(a.Dir, "facts.txt")}
}

// TLSClient returns an HTTPS client presenting the agent's certificate
// (after a first agent run has fetched it) and trusting the farm's CA.
func (a *Agent) TLSClient(t *testing.T) *http.Client {
	t.Helper()
	ssl := filepath.Join(a.Dir, "ssl")
	cert, err := tls.LoadX509KeyPair(filepath.Join(ssl, "certs", a.Certname+".pem"), filepath.Join(ssl, "private_keys", a.Certname+".pem"))
	if err != nil {
		t.Fatalf("load agent %s cert: %v", a.Certname, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(ssl, "certs", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "localhost"},
	}}
}

// CheckManaged checks the files the example environment manages for a node
// with the given cf_role.
func CheckManaged(t *testing.T, a *Agent, role string) {
	t.Helper()
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(a.Root, rel))
		if err != nil {
			t.Errorf("managed file: %v", err)
		}
		return string(b)
	}
	for rel, want := range exampleFiles(role) {
		if got := read(rel); !strings.Contains(got, want) {
			t.Errorf("%s = %q, want it to contain %q", rel, got, want)
		}
	}
}

// exampleFiles is what examples/environments/production manages for a role:
// path under the node's cf_root -> text the file must contain.
func exampleFiles(role string) map[string]string {
	files := map[string]string{
		"static.txt":       "served from puppet:///modules/demo/static.txt", // puppet:/// source
		"tree/one.txt":     "",                                              // recursive source
		"tree/sub/two.txt": "",
		"motd.txt":         "role " + role,  // ERB
		"role.txt":         "role: " + role, // EPP
		"facts.txt":        "custom fact cf_demo_plugin: pluginsynced\nexternal fact cf_demo_external: from-facts.d",
	}
	if role == "web" {
		files["www/index.html"] = "Hello from a compile farm web node (port 8080)" // Hiera per role
	}
	return files
}
