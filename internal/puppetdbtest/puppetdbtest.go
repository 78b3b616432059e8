// Package puppetdbtest gives tests the shared real PuppetDB that
// scripts/puppetdb.sh runs on loopback (one per test run: `make test`
// starts it; COMPILEFARM_PUPPETDB_DIR names its directory), with helpers
// to submit commands and to poll queries until PuppetDB has processed them.
// It is for tests only.
package puppetdbtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvDir is the environment variable naming the directory of a PuppetDB
// started with `scripts/puppetdb.sh start DIR`.
const EnvDir = "COMPILEFARM_PUPPETDB_DIR"

// How long Shared waits for PuppetDB (make test starts it while the test
// binaries build) and Eventually for a query to be satisfied.
const (
	startWait      = 5 * time.Minute
	eventuallyWait = 60 * time.Second
)

// PuppetDB is a running PuppetDB and what a client needs to reach it.
type PuppetDB struct {
	URL    string // http://127.0.0.1:PORT (plain, loopback)
	TLSURL string // https://127.0.0.1:PORT (client certificates from the CA below)
	// CADir is a Puppet CA directory in the layout `broker dev` keeps in
	// DATA/ca: copied into a broker's DATA/ca, that broker's CA is the one
	// PuppetDB's certificate comes from and whose client certificates it
	// trusts.
	CADir string
	// CACert is the path of that CA's certificate (PEM).
	CACert string
	// ClientCert and ClientKey are the paths of a client certificate and
	// its key from that CA, for tests' own requests over TLS.
	ClientCert, ClientKey string

	plainClient, tlsClient *http.Client
}

// shared is the outcome of the first Shared call: later calls (and tests)
// get the same PuppetDB, or the same failure without waiting again.
var shared struct {
	mu  sync.Mutex
	pdb *PuppetDB
	err error
}

// Shared returns the PuppetDB of this test run. It skips the test under
// -short, fails it with what to run when COMPILEFARM_PUPPETDB_DIR is not
// set, and waits (up to 5 minutes) for DIR/env to appear and PuppetDB to
// answer `running`.
func Shared(t testing.TB) *PuppetDB {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real PuppetDB (scripts/puppetdb.sh); skipped with -short")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pdb != nil {
		return shared.pdb
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	dir := os.Getenv(EnvDir)
	if dir == "" {
		t.Fatalf("%s is not set: this test needs a running PuppetDB. Start one and point the tests at it:\n"+
			"\tscripts/puppetdb.sh start DIR\n\texport %s=DIR\n"+
			"(make test does this; `make puppetdb` starts one in .data/puppetdb and prints the export line)", EnvDir, EnvDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	p, err := await(ctx, dir)
	if err != nil {
		shared.err = fmt.Errorf("PuppetDB in %s (%s): %w", dir, EnvDir, err)
		t.Fatal(shared.err)
	}
	shared.pdb = p
	return p
}

// await waits for dir/env and for PuppetDB to answer `running`, failing
// at once when start left dir/failed.
func await(ctx context.Context, dir string) (*PuppetDB, error) {
	var p *PuppetDB
	last := "no env file yet"
	for {
		if msg, err := os.ReadFile(filepath.Join(dir, "failed")); err == nil {
			return nil, fmt.Errorf("scripts/puppetdb.sh start %s failed: %s", dir, bytes.TrimSpace(msg))
		}
		if p == nil {
			data, err := os.ReadFile(filepath.Join(dir, "env"))
			switch {
			case err == nil:
				if p, err = fromEnv(data); err != nil {
					return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "env"), err)
				}
			case !errors.Is(err, fs.ErrNotExist):
				return nil, err
			}
		}
		if p != nil {
			st, err := p.status(ctx)
			if err == nil && st == "running" {
				return p, nil
			}
			last = fmt.Sprintf("status %q, %v", st, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not running after %s (%s); is `scripts/puppetdb.sh start %s` running? its logs are in %s",
				startWait, last, dir, filepath.Join(dir, "puppetdb", "log"))
		case <-time.After(time.Second):
		}
	}
}

// Keys of the env file scripts/puppetdb.sh writes.
const (
	keyURL        = "COMPILEFARM_PUPPETDB_URL"
	keyTLSURL     = "COMPILEFARM_PUPPETDB_TLS_URL"
	keyCADir      = "COMPILEFARM_PUPPETDB_CADIR"
	keyCACert     = "COMPILEFARM_PUPPETDB_CACERT"
	keyClientCert = "COMPILEFARM_PUPPETDB_CLIENT_CERT"
	keyClientKey  = "COMPILEFARM_PUPPETDB_CLIENT_KEY"
)

// parseEnv reads KEY=value lines; blank lines and # comments are skipped.
func parseEnv(data []byte) (map[string]string, error) {
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: %q is not KEY=value", n, line)
		}
		env[k] = v
	}
	return env, sc.Err()
}

// fromEnv makes the PuppetDB an env file describes, with its clients.
func fromEnv(data []byte) (*PuppetDB, error) {
	env, err := parseEnv(data)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{keyURL, keyTLSURL, keyCADir, keyCACert, keyClientCert, keyClientKey} {
		if env[k] == "" {
			return nil, fmt.Errorf("%s is missing", k)
		}
	}
	p := &PuppetDB{
		URL: env[keyURL], TLSURL: env[keyTLSURL], CADir: env[keyCADir], CACert: env[keyCACert],
		ClientCert: env[keyClientCert], ClientKey: env[keyClientKey],
		plainClient: &http.Client{Timeout: 30 * time.Second},
	}
	conf, err := p.clientTLS()
	if err != nil {
		return nil, err
	}
	p.tlsClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
	return p, nil
}

// clientTLS trusts the CA and presents the client certificate.
func (p *PuppetDB) clientTLS() (*tls.Config, error) {
	caPEM, err := os.ReadFile(p.CACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", p.CACert)
	}
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// endpoint is where requests go: the plain or the TLS port.
type endpoint struct {
	base   string
	client *http.Client
}

func (p *PuppetDB) plain() endpoint  { return endpoint{p.URL, p.plainClient} }
func (p *PuppetDB) secure() endpoint { return endpoint{p.TLSURL, p.tlsClient} }

func (p *PuppetDB) status(ctx context.Context) (string, error) {
	body, err := p.plain().do(ctx, http.MethodGet, "/status/v1/simple", nil, nil)
	return strings.TrimSpace(string(body)), err
}

// Query runs a PuppetDB query (AST as JSON, or PQL) against
// /pdb/query/v4/<entity> over plain http; entity "" is the root endpoint,
// which takes PQL naming the entity, and query "" asks for every row.
func (p *PuppetDB) Query(ctx context.Context, entity, query string) ([]map[string]any, error) {
	return p.plain().query(ctx, entity, query)
}

func (e endpoint) query(ctx context.Context, entity, query string) ([]map[string]any, error) {
	path := "/pdb/query/v4"
	if entity != "" {
		path += "/" + entity
	}
	var params url.Values
	if query != "" {
		params = url.Values{"query": {query}}
	}
	body, err := e.do(ctx, http.MethodGet, path, params, nil)
	if err != nil {
		return nil, fmt.Errorf("query %s %s: %w", entity, query, err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(body, &rows); err != nil {
		return nil, fmt.Errorf("query %s %s: decode answer: %w", entity, query, err)
	}
	return rows, nil
}

// Eventually runs the query (as Query) until ok accepts its rows, for up to
// 60 s (PuppetDB processes commands asynchronously), and returns them; it
// fails the test with the last rows or error when ok never does.
func (p *PuppetDB) Eventually(t testing.TB, entity, query string, ok func([]map[string]any) bool) []map[string]any {
	t.Helper()
	return p.plain().eventually(t, entity, query, ok)
}

func (e endpoint) eventually(t testing.TB, entity, query string, ok func([]map[string]any) bool) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventuallyWait)
	defer cancel()
	var (
		rows []map[string]any
		err  error
	)
	for {
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		rows, err = e.query(qctx, entity, query)
		qcancel()
		if err == nil && ok(rows) {
			return rows
		}
		select {
		case <-ctx.Done():
			if err != nil {
				t.Fatalf("PuppetDB %s: %v (still after %s)", e.base, err, eventuallyWait)
			}
			t.Fatalf("PuppetDB %s: query %s %s did not give what the test waits for in %s; last answer: %s",
				e.base, entity, query, eventuallyWait, abbrev(rows))
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// abbrev renders rows as JSON, cut to a readable length.
func abbrev(rows []map[string]any) string {
	b, _ := json.Marshal(rows)
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

// Submit posts a command (such as replace_facts version 5 with its JSON
// payload) to /pdb/cmd/v1 over plain http, as the farm's sink or a Puppet
// Server terminus would. PuppetDB only queues it: use Eventually to see
// its effect.
func (p *PuppetDB) Submit(ctx context.Context, command string, version int, certname string, payload []byte) error {
	return p.plain().submit(ctx, command, version, certname, payload)
}

func (e endpoint) submit(ctx context.Context, command string, version int, certname string, payload []byte) error {
	params := url.Values{
		"command": {command}, "version": {strconv.Itoa(version)}, "certname": {certname},
		"producer-timestamp": {time.Now().UTC().Format(time.RFC3339Nano)},
	}
	if _, err := e.do(ctx, http.MethodPost, "/pdb/cmd/v1", params, payload); err != nil {
		return fmt.Errorf("submit %s v%d for %s: %w", command, version, certname, err)
	}
	return nil
}

// do makes a request and returns the body of a 200 answer; any other
// status is an error carrying the start of the body.
func (e endpoint) do(ctx context.Context, method, path string, params url.Values, body []byte) ([]byte, error) {
	u := e.base + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		if len(out) > 500 {
			out = out[:500]
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(out))
	}
	return out, nil
}

// Certname returns a certname unique to this run: "<base>-<random>.test",
// so that tests sharing one PuppetDB never see each other's nodes.
func Certname(t testing.TB, base string) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(base) + "-" + hex.EncodeToString(b) + ".test"
}
