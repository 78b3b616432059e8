// Package e2e holds compilefarm's end-to-end tests: a real `broker dev`
// process and a real Debian `puppet agent`, talking TLS on loopback.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/procgroup"
)

// binDir holds the binaries the tests build: brokerBin, built by TestMain,
// and the compile function, built on first use (compileFunctionBin).
var binDir, brokerBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // no build, no facts script: every test here skips
	}
	for _, tool := range []string{"puppet", "ruby", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s is required and missing: run scripts/install-deps.sh (as root) first\n", tool)
			os.Exit(1)
		}
	}
	var err error
	binDir, err = os.MkdirTemp("", "compilefarm-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	brokerBin = filepath.Join(binDir, "broker")
	build := exec.Command("go", "build", "-o", brokerBin, "../broker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build broker:", err)
		os.Exit(1)
	}
	removeScript, err := installFactsScript()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: install the external facts script:", err)
		os.Exit(1)
	}
	code := m.Run()
	removeScript()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var compileFunction struct {
	once sync.Once
	bin  string
	err  error
}

// compileFunctionBin builds the compile Lambda's bootstrap
// (functions/compile) once for all the tests that run it.
func compileFunctionBin(t *testing.T) string {
	t.Helper()
	compileFunction.once.Do(func() {
		bin := filepath.Join(binDir, "bootstrap")
		if out, err := exec.Command("go", "build", "-o", bin, "../functions/compile").CombinedOutput(); err != nil {
			compileFunction.err = fmt.Errorf("build the compile function: %v\n%s", err, out)
			return
		}
		compileFunction.bin = bin
	})
	if compileFunction.err != nil {
		t.Fatal(compileFunction.err)
	}
	return compileFunction.bin
}

// farmProc is one running `broker dev`.
type farmProc struct {
	t       *testing.T
	proc    *procgroup.Group
	Data    string
	Envs    string
	Addr    string // host:port of the front door
	Metrics string // http://host:port of /metrics
	Admin   string // http://host:port of the operator API
	PCP     string // wss://host:port/pcp/ of the PCP broker, when it runs
	logPath string
}

// copyExampleEnvs copies examples/environments to a temp dir the test may change.
func copyExampleEnvs(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "environments")
	if out, err := exec.Command("cp", "-a", "../examples/environments", dst).CombinedOutput(); err != nil {
		t.Fatalf("copy example environments: %v: %s", err, out)
	}
	return dst
}

// addBrokenEnv adds an environment named broken to envs: a copy of
// production whose site.pp is site, which does not compile.
func addBrokenEnv(t *testing.T, envs, site string) {
	t.Helper()
	broken := filepath.Join(envs, "broken")
	if out, err := exec.Command("cp", "-a", filepath.Join(envs, "production"), broken).CombinedOutput(); err != nil {
		t.Fatalf("copy production to broken: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(broken, "manifests", "site.pp"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startFarm starts broker dev on free loopback ports and waits until it is up.
func startFarm(t *testing.T, data, envs string, extra ...string) *farmProc {
	t.Helper()
	args := append([]string{"dev", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--pcp-listen", "127.0.0.1:0",
		"--environments", envs, "--data", data, "--workers", "2"}, extra...)
	f := startBroker(t, nil, args...)
	f.Data, f.Envs = data, envs
	return f
}

// startBroker runs the broker with args (and env added) and waits for its
// "is up" log line, which names the front door and metrics addresses.
func startBroker(t *testing.T, env []string, args ...string) *farmProc {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("end-to-end: real brokers, Ruby Puppet and a puppet agent; skipped with -short")
	}
	logf, err := os.CreateTemp(t.TempDir(), "broker-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(brokerBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logf
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := procgroup.Start(cmd, 0) // output goes to the log file
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	f := &farmProc{t: t, proc: proc, logPath: logf.Name()}
	up := make(chan [4]string, 1)
	upRE := regexp.MustCompile(`front_door=https://(\S+) metrics=(http://\S+)/metrics admin=(http://\S+)(?: pcp=(wss://\S+))?`)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if m := upRE.FindStringSubmatch(line); m != nil {
				select {
				case up <- [4]string{m[1], m[2], m[3], m[4]}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		f.stop()
		if t.Failed() {
			b, _ := os.ReadFile(f.logPath)
			t.Logf("broker log (%s):\n%s", f.logPath, tail(string(b), 60))
		}
	})
	select {
	case a := <-up:
		f.Addr, f.Metrics, f.Admin, f.PCP = a[0], a[1], a[2], a[3]
	case <-f.proc.Done():
		b, _ := os.ReadFile(f.logPath)
		t.Fatalf("broker %s exited before it was up:\n%s", args[0], tail(string(b), 40))
	case <-time.After(3 * time.Minute):
		t.Fatalf("broker %s did not come up in 3 minutes", args[0])
	}
	return f
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop ends the broker with SIGTERM (then SIGKILL) and waits for it.
func (f *farmProc) stop() { f.proc.Stop(20 * time.Second) }

// kill9 kills the broker and its Ruby workers at once, as a crash would.
func (f *farmProc) kill9() { f.proc.Kill() }

func (f *farmProc) port() string {
	_, p, _ := strings.Cut(f.Addr, ":")
	return p
}

// metric returns the value of one Prometheus sample, e.g.
// compilefarm_compiles_total{result="ok"}; 0 when absent.
func (f *farmProc) metric(sample string) float64 {
	f.t.Helper()
	resp, err := http.Get(f.Metrics + "/metrics")
	if err != nil {
		f.t.Fatalf("scrape metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, " "); ok && name == sample {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				f.t.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// finishedCompiles counts the compiles that finished, whether they changed
// a catalog or not.
func (f *farmProc) finishedCompiles() float64 {
	f.t.Helper()
	return f.metric(`compilefarm_compiles_total{result="ok"}`) + f.metric(`compilefarm_compiles_total{result="unchanged"}`)
}

// brokerCLI runs an operator verb against this farm.
func (f *farmProc) brokerCLI(args ...string) (string, error) {
	const limit = 5 * time.Minute // a deploy that never finishes must not hang the suite
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, brokerBin, append(args, "--admin", f.Admin)...).CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("broker %s did not finish within %s: %w", strings.Join(args, " "), limit, ctx.Err())
	}
	return string(out), err
}

type nodeRecord struct {
	Certname string `json:"certname"`
	Catalog  *struct {
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

func (f *farmProc) nodes() map[string]nodeRecord {
	f.t.Helper()
	resp, err := http.Get(f.Admin + "/admin/v1/nodes")
	if err != nil {
		f.t.Fatalf("list nodes: %v", err)
	}
	defer resp.Body.Close()
	var list []nodeRecord
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		f.t.Fatalf("decode nodes: %v", err)
	}
	out := map[string]nodeRecord{}
	for _, n := range list {
		out[n.Certname] = n
	}
	return out
}

// agent is one real puppet agent with its own confdir, ssldir and vardir.
type agent struct {
	Certname string
	Dir      string
	Root     string // where the example environment manages files (fact cf_root)
}

func newAgent(t *testing.T, certname string) *agent {
	dir := t.TempDir()
	a := &agent{Certname: certname, Dir: dir, Root: filepath.Join(dir, "managed")}
	for _, d := range []string{"conf", "managed"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	return a
}

// factsScript is an executable external fact that prints the facts file
// named by $CF_E2E_FACTS: each agent run points it at its own agent's
// facts, so agents on one machine do not share them.
const factsScript = `#!/bin/sh
# compilefarm e2e tests: per-agent external facts (removed when the tests end)
[ -n "$CF_E2E_FACTS" ] && [ -r "$CF_E2E_FACTS" ] && cat "$CF_E2E_FACTS"
exit 0
`

// installFactsScript puts factsScript where Facter looks for external
// facts by default (/etc/facter/facts.d for root on Debian,
// ~/.facter/facts.d otherwise: the agent's own pluginfactdest is purged by
// pluginsync) and returns a function that removes it and any directory it
// created.
func installFactsScript() (func(), error) {
	dir := "/etc/facter/facts.d"
	if os.Geteuid() != 0 {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("no home directory for external facts: %w", err)
		}
		dir = filepath.Join(home, ".facter", "facts.d")
	}
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create external facts directory: %w", err)
	}
	p := filepath.Join(dir, fmt.Sprintf("compilefarm-e2e-%d.sh", os.Getpid()))
	if err := os.WriteFile(p, []byte(factsScript), 0o755); err != nil {
		return nil, err
	}
	return func() {
		os.Remove(p)
		for _, d := range created {
			os.Remove(d)
		}
	}, nil
}

// setFact gives the agent an external fact (kept for its later runs).
func (a *agent) setFact(t *testing.T, name, value string) {
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

// run runs `puppet agent -t` against the farm and returns its exit code and output.
func (a *agent) run(t *testing.T, f *farmProc, extra ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string{"agent", "-t"}, a.settings(f)...), extra...)
	cmd := exec.CommandContext(ctx, "puppet", args...)
	cmd.Env = append(os.Environ(), a.env()...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run puppet agent: %v\n%s", err, out.String())
	}
	return code, out.String()
}

// settings are the Puppet settings of the agent's runs against f: its own
// directories, certname and server.
func (a *agent) settings(f *farmProc) []string {
	return []string{
		"--certname", a.Certname, "--server", "localhost", "--serverport", f.port(),
		"--confdir", filepath.Join(a.Dir, "conf"), "--vardir", filepath.Join(a.Dir, "var"),
		"--logdir", filepath.Join(a.Dir, "log"), "--rundir", filepath.Join(a.Dir, "run"),
		"--publicdir", filepath.Join(a.Dir, "public"), "--codedir", filepath.Join(a.Dir, "code"),
		"--ssldir", filepath.Join(a.Dir, "ssl"),
		"--http_read_timeout", "120",
	}
}

// env is the environment of the agent's runs: its managed root and its
// external facts (factsScript).
func (a *agent) env() []string {
	return []string{"FACTER_cf_root=" + a.Root, "CF_E2E_FACTS=" + filepath.Join(a.Dir, "facts.txt")}
}

// tlsClient returns an HTTPS client presenting the agent's certificate
// (after a first agent run has fetched it) and trusting the farm's CA.
func (a *agent) tlsClient(t *testing.T) *http.Client {
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

// syntheticNode is a node that talks to the farm from Go (for load and
// bad-input tests): its own key and a certificate signed by the farm's CA.
type syntheticNode struct {
	Certname string
	Client   *http.Client
}

// enrol makes a key and CSR for certname, submits it (the farm autosigns),
// and fetches the certificate. Call it from the test's goroutine; other
// goroutines use tryEnrol.
func enrol(t *testing.T, f *farmProc, certname string) *syntheticNode {
	t.Helper()
	n, err := tryEnrol(f, certname)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// tryEnrol is enrol returning its error, for use from any goroutine.
func tryEnrol(f *farmProc, certname string) (*syntheticNode, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: certname}}, key)
	if err != nil {
		return nil, err
	}
	insecure := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://" + f.Addr
	req, _ := http.NewRequest(http.MethodPut, base+"/puppet-ca/v1/certificate_request/"+certname,
		bytes.NewReader(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := insecure.Do(req)
	if err != nil {
		return nil, fmt.Errorf("submit CSR for %s: %w", certname, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("submit CSR for %s: %s: %s", certname, resp.Status, body)
	}
	get := func(path string) ([]byte, error) {
		resp, err := insecure.Get(base + path)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
		}
		return b, nil
	}
	certPEM, err := get("/puppet-ca/v1/certificate/" + certname)
	if err != nil {
		return nil, err
	}
	caPEM, err := get("/puppet-ca/v1/certificate/ca")
	if err != nil {
		return nil, err
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, fmt.Errorf("certificate for %s: %w", certname, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &syntheticNode{Certname: certname, Client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "localhost"},
	}}}, nil
}

// putFacts uploads a facts document for the node (from the test's
// goroutine; others use tryPutFacts).
func (n *syntheticNode) putFacts(t *testing.T, f *farmProc, values map[string]any) {
	t.Helper()
	if err := n.tryPutFacts(f, values); err != nil {
		t.Fatal(err)
	}
}

// tryPutFacts is putFacts returning its error, for use from any goroutine.
func (n *syntheticNode) tryPutFacts(f *farmProc, values map[string]any) error {
	doc, _ := json.Marshal(map[string]any{"name": n.Certname, "values": values})
	req, _ := http.NewRequest(http.MethodPut, "https://"+f.Addr+"/puppet/v3/facts/"+n.Certname+"?environment=production", bytes.NewReader(doc))
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.Client.Do(req)
	if err != nil {
		return fmt.Errorf("put facts for %s: %w", n.Certname, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("put facts for %s: %s: %s", n.Certname, resp.Status, b)
	}
	return nil
}

// enrolFleet enrols count synthetic nodes named by nameFormat (given the
// node's index).
func enrolFleet(t *testing.T, f *farmProc, nameFormat string, count int) []*syntheticNode {
	t.Helper()
	nodes := make([]*syntheticNode, count)
	for i := range nodes {
		nodes[i] = enrol(t, f, fmt.Sprintf(nameFormat, i))
	}
	return nodes
}

// putFleetFacts uploads syntheticFacts for every node (node i gets index
// i), at most parallel at once (0: all at once), and waits for all.
func putFleetFacts(t *testing.T, f *farmProc, nodes []*syntheticNode, parallel int) {
	t.Helper()
	if parallel <= 0 {
		parallel = len(nodes)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for i, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := n.tryPutFacts(f, syntheticFacts(n.Certname, i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
