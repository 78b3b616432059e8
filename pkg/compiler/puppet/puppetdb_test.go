package puppet

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// testCA is a CA of the test's own, to build PuppetDB options from.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a client certificate for cn and its key (PEM).
func (ca testCA) issue(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}

// TestPuppetDBOptions checks what New accepts as a PuppetDB (it fails on
// these before starting any worker, so no Ruby is needed).
func TestPuppetDBOptions(t *testing.T) {
	farmCA, otherCA := newTestCA(t, "Farm CA"), newTestCA(t, "PuppetDB CA")
	cert, key := farmCA.issue(t, "broker.example.test")
	upper, upperKey := farmCA.issue(t, "Broker")
	chain := slices.Concat(cert, farmCA.pem)
	tests := []struct {
		name    string
		pdb     *PuppetDB
		store   string
		wantErr string // "" when valid
		certn   string
	}{
		{name: "none", pdb: nil},
		{name: "plain http on loopback", pdb: &PuppetDB{URLs: []string{"http://127.0.0.1:8080", "http://localhost:8080/"}}},
		{name: "https with the farm's certificate", pdb: &PuppetDB{URLs: []string{"https://puppetdb.example.test:8081"}, CACert: farmCA.pem, Cert: cert, Key: key}, certn: "broker.example.test"},
		{name: "PuppetDB of another CA, client chain given", pdb: &PuppetDB{URLs: []string{"https://pdb:8081"}, CACert: otherCA.pem, Cert: chain, Key: key}, certn: "broker.example.test"},
		{name: "storeconfigs puppetdb", pdb: &PuppetDB{URLs: []string{"http://[::1]:8080"}}, store: StoreConfigsPuppetDB},
		{name: "no URL", pdb: &PuppetDB{}, wantErr: "no PuppetDB URL"},
		{name: "plain http elsewhere", pdb: &PuppetDB{URLs: []string{"http://puppetdb.example.test:8080"}}, wantErr: "only for a PuppetDB on loopback"},
		{name: "a path", pdb: &PuppetDB{URLs: []string{"http://127.0.0.1:8080/pdb"}}, wantErr: "nothing more"},
		{name: "two URLs in one", pdb: &PuppetDB{URLs: []string{"http://127.0.0.1:1,http://127.0.0.1:2"}}, wantErr: "127.0.0.1:1,http"},
		{name: "another scheme", pdb: &PuppetDB{URLs: []string{"ftp://127.0.0.1:8080"}}, wantErr: "must be https://"},
		{name: "https without certificates", pdb: &PuppetDB{URLs: []string{"https://pdb:8081"}}, wantErr: "needs the CA certificate"},
		{name: "https without a key", pdb: &PuppetDB{URLs: []string{"https://pdb:8081"}, CACert: farmCA.pem, Cert: cert}, wantErr: "all three"},
		{name: "key of another certificate", pdb: &PuppetDB{URLs: []string{"https://pdb:8081"}, CACert: farmCA.pem, Cert: cert, Key: upperKey}, wantErr: "client certificate and key"},
		{name: "client of another CA", pdb: &PuppetDB{URLs: []string{"https://pdb:8081"}, CACert: otherCA.pem, Cert: cert, Key: key}, wantErr: "does not chain"},
		{name: "common name not a certname", pdb: &PuppetDB{URLs: []string{"https://pdb:8081"}, CACert: farmCA.pem, Cert: upper, Key: upperKey}, wantErr: "certname"},
		{name: "storeconfigs puppetdb without PuppetDB", store: StoreConfigsPuppetDB, wantErr: "needs a PuppetDB"},
		{name: "unknown storeconfigs", store: "activerecord", wantErr: "is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := checkPuppetDB(tt.pdb)
			if err == nil && tt.wantErr != "" {
				// Storeconfigs are New's to check; it fails before starting Ruby.
				_, err = New(t.Context(), Options{WorkDir: t.TempDir(), PuppetDB: tt.pdb, StoreConfigs: tt.store, Ruby: "/nonexistent/ruby"})
				if err != nil && !errors.Is(err, farm.ErrInvalid) {
					t.Fatalf("New: %v, want an invalid-options error", err)
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.pdb == nil {
				if s != nil {
					t.Fatalf("setup %+v without PuppetDB", s)
				}
				return
			}
			if s.certname != tt.certn {
				t.Errorf("certname %q, want %q", s.certname, tt.certn)
			}
			dir := t.TempDir()
			if err := s.write(dir); err != nil {
				t.Fatal(err)
			}
			conf, err := os.ReadFile(filepath.Join(dir, "conf", "puppetdb.conf"))
			if err != nil {
				t.Fatal(err)
			}
			want := "server_urls = " + strings.Join(tt.pdb.URLs, ",") + "\nserver_url_timeout = 30\nsoft_write_failure = false\n"
			if !strings.Contains(string(conf), want) {
				t.Errorf("puppetdb.conf:\n%s\nwant it to hold:\n%s", conf, want)
			}
			_, err = os.Stat(filepath.Join(dir, "puppetdb-ssl", "key.pem"))
			if (err == nil) != (tt.certn != "") {
				t.Errorf("client key written: %v, want %v", err == nil, tt.certn != "")
			}
			if err := (*puppetdbSetup)(nil).write(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "conf", "puppetdb.conf")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("an engine without PuppetDB left puppetdb.conf: %v", err)
			}
		})
	}
}

func TestQueryReads(t *testing.T) {
	got := queryReads([]queryAnswer{
		{Query: json.RawMessage(`"nodes {}"`), Result: json.RawMessage(`[{"certname":"a"}]`)},
		{Query: json.RawMessage(`["from", "nodes"]`), Result: json.RawMessage(`[]`)},
		{Query: json.RawMessage(`"nodes {}"`), Result: json.RawMessage(`[]`)}, // again: the first answer counts
	})
	want := []farm.QueryRead{
		farm.QueryReadOf([]byte(`"nodes {}"`), []byte(`[{"certname":"a"}]`)),
		farm.QueryReadOf([]byte(`["from","nodes"]`), []byte(`[]`)),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if queryReads(nil) != nil {
		t.Fatal("no answers must record nil")
	}
}

// pdbEnv writes an environment whose site.pp is site and returns its
// environmentpath.
func pdbEnv(t *testing.T, site string) string {
	t.Helper()
	envpath := t.TempDir()
	writeTree(t, envpath, map[string]string{"production/manifests/site.pp": site})
	return envpath
}

func pdbRequest(certname, envpath string) compiler.Request {
	return compiler.Request{Certname: certname, Environment: "production", CodeID: "c1", EnvironmentPath: envpath,
		Facts: map[string]any{"os": map[string]any{"family": "Debian"}}}
}

// TestPuppetDBQueryWithoutPuppetDB: a worker without PuppetDB fails a
// compile that calls puppetdb_query(), saying what is missing.
func TestPuppetDBQueryWithoutPuppetDB(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	envpath := pdbEnv(t, "notify { 'x': message => String(puppetdb_query('nodes {}')) }\n")
	_, err := e.Compile(t.Context(), pdbRequest("nopdb.example.test", envpath))
	var cerr *compiler.CompileError
	if !errors.As(err, &cerr) || !strings.Contains(cerr.Message, "puppetdb_query needs --puppetdb") {
		t.Fatalf("got %v, want a compile error saying puppetdb_query needs --puppetdb", err)
	}
}

// pdbFacts submits facts for certname to PuppetDB.
func pdbFacts(t *testing.T, p *puppetdbtest.PuppetDB, certname string, values map[string]any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"certname": certname, "environment": "production", "producer": "query.test",
		"producer_timestamp": time.Now().UTC().Format(time.RFC3339Nano), "values": values})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(t.Context(), "replace_facts", 5, certname, b); err != nil {
		t.Fatal(err)
	}
}

// pdbExport submits a catalog for certname that exports Cf::Svc[title]
// (exportsDefine).
func pdbExport(t *testing.T, p *puppetdbtest.PuppetDB, certname, title string, port int, tag string) {
	t.Helper()
	res := []map[string]any{
		{"type": "Class", "title": "Main", "exported": false, "tags": []string{"class"}, "parameters": map[string]any{}},
		{"type": "Cf::Svc", "title": title, "exported": true, "file": "/etc/site.pp", "line": 3,
			"tags": []string{"cf::svc", "cf", "svc", tag, "class"}, "parameters": map[string]any{"port": port, "role": tag, "tag": tag}},
	}
	b, err := json.Marshal(map[string]any{"certname": certname, "version": "1", "environment": "production",
		"transaction_uuid": nil, "catalog_uuid": "6a6d6b0e-0000-4000-8000-000000000001", "code_id": nil,
		"producer_timestamp": time.Now().UTC().Format(time.RFC3339Nano), "producer": "query.test",
		"resources": res, "edges": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(t.Context(), "replace_catalog", 9, certname, b); err != nil {
		t.Fatal(err)
	}
}

// rootQuery asks PuppetDB query as the farm's refresh does (POST
// /pdb/query/v4 {"query": QUERY}) and returns the answer's digest.
func rootQuery(t *testing.T, base string, query json.RawMessage) farm.Digest {
	t.Helper()
	body, _ := json.Marshal(map[string]json.RawMessage{"query": query})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/pdb/query/v4", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("query %s: %s %s %v", query, resp.Status, b, err)
	}
	return farm.QueryResultDigest(b)
}

// wantQueries checks that res recorded exactly queries (their JSON), and
// returns the records by query.
func wantQueries(res compiler.Result, queries ...string) (map[string]farm.QueryRead, error) {
	if res.Reads == nil {
		return nil, errors.New("no read record")
	}
	got := map[string]farm.QueryRead{}
	for _, q := range res.Reads.Queries {
		got[string(q.Query)] = q
	}
	out := map[string]farm.QueryRead{}
	var missing []string
	for _, q := range queries {
		r, ok := got[string(farm.QueryReadOf([]byte(q), nil).Query)]
		if !ok {
			missing = append(missing, q)
			continue
		}
		out[q] = r
	}
	if len(missing) > 0 || len(res.Reads.Queries) != len(queries) {
		return nil, fmt.Errorf("recorded queries %+v; want exactly %v (missing %v)", res.Reads.Queries, queries, missing)
	}
	return out, nil
}

// TestPuppetDBQuery compiles manifests that call puppetdb_query() (PQL and
// AST) against the real PuppetDB, over http and https, and checks the
// catalogs and the recorded queries: their result digests are those the
// farm's refresh computes, change when PuppetDB's answer changes, and are
// not recorded with the "queries" hook off.
func TestPuppetDBQuery(t *testing.T) {
	p := puppetdbtest.Shared(t)
	group := strings.TrimSuffix(puppetdbtest.Certname(t, "group"), ".test")
	a, b := puppetdbtest.Certname(t, "query-a"), puppetdbtest.Certname(t, "query-b")
	for _, n := range []string{a, b} {
		pdbFacts(t, p, n, map[string]any{"cf_query_group": group})
	}
	pql := fmt.Sprintf(`facts[certname] { name = 'cf_query_group' and value = '%s' order by certname }`, group)
	ast := fmt.Sprintf(`["from","facts",["extract",["certname"],["and",["=","name","cf_query_group"],["=","value",%q]]],["order_by",["certname"]]]`, group)
	p.Eventually(t, "facts", fmt.Sprintf(`["and",["=","name","cf_query_group"],["=","value",%q]]`, group),
		func(rows []map[string]any) bool { return len(rows) == 2 })

	pqlJSON, _ := json.Marshal(pql)
	envpath := pdbEnv(t, fmt.Sprintf(`
$pql = puppetdb_query(%s)
$ast = puppetdb_query(%s)
notify { 'pql': message => $pql.map |$r| { $r['certname'] }.join(',') }
notify { 'ast': message => $ast.map |$r| { $r['certname'] }.join(',') }
# The same query again is one record.
notify { 'again': message => String(puppetdb_query(%s).length) }
`, pqlJSON, ast, pqlJSON))
	ca, err := os.ReadFile(p.CACert)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(p.ClientCert)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	plain := newEngine(t, Options{PuppetDB: &PuppetDB{URLs: []string{p.URL}}})
	secure := newEngine(t, Options{PuppetDB: &PuppetDB{URLs: []string{p.TLSURL}, CACert: ca, Cert: cert, Key: key}})

	compileQueries := func(t *testing.T, e *Engine, disable ...string) (catalog, compiler.Result) {
		t.Helper()
		res, err := e.compile(t.Context(), pdbRequest("querier.example.test", envpath), disable)
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		return parseCatalog(t, res.Catalog), res
	}
	for _, tc := range []struct {
		name string
		e    *Engine
	}{{"http", plain}, {"https", secure}} {
		t.Run(tc.name, func(t *testing.T) {
			cat, res := compileQueries(t, tc.e)
			for _, title := range []string{"pql", "ast"} {
				if r := cat.resource("Notify", title); r == nil || r.Parameters["message"] != a+","+b {
					t.Errorf("Notify[%s] = %+v, want message %s,%s", title, r, a, b)
				}
			}
			recs, err := wantQueries(res, string(pqlJSON), ast)
			if err != nil {
				t.Fatal(err)
			}
			for q, r := range recs {
				if want := rootQuery(t, p.URL, r.Query); r.ResultDigest != want {
					t.Errorf("query %s: recorded result digest %s, the refresh's %s", q, r.ResultDigest, want)
				}
			}
		})
	}

	t.Run("result change changes the digest", func(t *testing.T) {
		_, before := compileQueries(t, plain)
		c := puppetdbtest.Certname(t, "query-c")
		pdbFacts(t, p, c, map[string]any{"cf_query_group": group})
		p.Eventually(t, "facts", fmt.Sprintf(`["and",["=","name","cf_query_group"],["=","value",%q]]`, group),
			func(rows []map[string]any) bool { return len(rows) == 3 })
		cat, after := compileQueries(t, plain)
		if r := cat.resource("Notify", "pql"); r == nil || !strings.Contains(fmt.Sprint(r.Parameters["message"]), c) {
			t.Errorf("Notify[pql] = %+v, want %s in it", r, c)
		}
		for i := range before.Reads.Queries {
			x, y := before.Reads.Queries[i], after.Reads.Queries[i]
			if x.QueryDigest != y.QueryDigest || x.ResultDigest == y.ResultDigest {
				t.Errorf("query %s: digests before %+v, after %+v: want the same query, another result", x.Query, x, y)
			}
		}
	})

	// The recording is proved like the fact reads': with its hook off,
	// the check above fails.
	t.Run("hook off records nothing", func(t *testing.T) {
		_, res := compileQueries(t, plain, "queries")
		if _, err := wantQueries(res, string(pqlJSON), ast); err == nil {
			t.Fatal("queries recorded with the queries hook off: the check cannot tell recording from none")
		}
		if len(res.Reads.Reads) == 0 {
			t.Fatal("the queries hook switched fact-read recording off too")
		}
	})

	t.Run("a refused query fails the compile with PuppetDB's message", func(t *testing.T) {
		env := pdbEnv(t, "notify { 'x': message => String(puppetdb_query('nodes[certname] { certname ~~~ 1 }')) }\n")
		_, err := plain.Compile(t.Context(), pdbRequest("querier.example.test", env))
		var cerr *compiler.CompileError
		if !errors.As(err, &cerr) || !strings.Contains(cerr.Message, "PuppetDB refused the query: 400") || cerr.Line != 1 {
			t.Fatalf("got %v, want a compile error at line 1 with PuppetDB's 400 answer", err)
		}
		// The worker is fine: the next compile works.
		if _, res := compileQueries(t, plain); res.Reads == nil {
			t.Fatal("no read record")
		}
	})
}

// TestPuppetDBUnreachable: a compile whose query no PuppetDB answers fails
// as an engine failure (retried, then recorded), the worker kept.
func TestPuppetDBUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	e := newEngine(t, Options{PuppetDB: &PuppetDB{URLs: []string{url}, Timeout: 2 * time.Second}})
	envpath := pdbEnv(t, "notify { 'x': message => String(puppetdb_query('nodes {}')) }\n")
	for range 2 {
		_, err := e.Compile(t.Context(), pdbRequest("querier.example.test", envpath))
		var cerr *compiler.CompileError
		if !errors.Is(err, farm.ErrTransient) || errors.As(err, &cerr) || !strings.Contains(err.Error(), url) {
			t.Fatalf("got %v, want a transient error naming %s", err, url)
		}
	}
	if _, err := e.Compile(context.WithoutCancel(t.Context()), pdbRequest("other.example.test", pdbEnv(t, "notify { 'y': }\n"))); err != nil {
		t.Fatalf("the worker did not survive: %v", err)
	}
}

// TestPuppetDBStoreConfigs: with storeconfigs puppetdb, exported
// collectors collect from PuppetDB, and the collector's query is recorded
// as puppetdb_query's are.
func TestPuppetDBStoreConfigs(t *testing.T) {
	p := puppetdbtest.Shared(t)
	tag := strings.ReplaceAll(strings.TrimSuffix(puppetdbtest.Certname(t, "tag"), ".test"), "-", "_")
	exporter := puppetdbtest.Certname(t, "query-exporter")
	pdbExport(t, p, exporter, exporter, 8443, tag)
	p.Eventually(t, "resources", fmt.Sprintf(`["and",["=","exported",true],["=","tag",%q]]`, tag),
		func(rows []map[string]any) bool { return len(rows) == 1 })
	e := newEngine(t, Options{PuppetDB: &PuppetDB{URLs: []string{p.URL}}, StoreConfigs: StoreConfigsPuppetDB})
	envpath := pdbEnv(t, exportsDefine+fmt.Sprintf("Cf::Svc <<| tag == '%s' |>>\n@@cf::svc { $trusted['certname']: port => 9, tag => '%s' }\n", tag, tag))
	req := pdbRequest("collector.example.test", envpath)
	req.Exported = []compiler.ExportedResource{svcExport("farm-only.example.test", "farm-only", tag, `{"tag":"`+tag+`"}`)}
	res, err := e.Compile(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	cat := parseCatalog(t, res.Catalog)
	if r := cat.resource("Notify", "svc "+exporter); r == nil || r.Parameters["message"] != exporter+":8443 "+tag+" " {
		t.Errorf("Notify[svc %s] = %+v, want Cf::Svc[%s] collected from PuppetDB, port 8443", exporter, r, exporter)
	}
	if cat.resource("Notify", "svc farm-only") != nil {
		t.Error("collected from the request's exported list, not PuppetDB")
	}
	if len(res.Exports) != 1 || res.Exports[0].Title != "collector.example.test" {
		t.Errorf("exports %+v, want the node's own Cf::Svc", res.Exports)
	}
	if len(res.Collects) != 0 {
		t.Errorf("collects %+v: a collector that reads PuppetDB is tracked by its query", res.Collects)
	}
	want := fmt.Sprintf(`["from","resources",["and",["=","type","Cf::Svc"],["=","exported",true],["not",["=","certname","collector.example.test"]],["=","tag",%q]]]`, tag)
	recs, err := wantQueries(res, want)
	if err != nil {
		t.Fatal(err)
	}
	if r := recs[want]; r.ResultDigest != rootQuery(t, p.URL, r.Query) {
		t.Errorf("collector's result digest %s is not the refresh's %s", r.ResultDigest, rootQuery(t, p.URL, r.Query))
	}
}
