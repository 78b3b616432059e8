package frontdoor

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/intake"
	"github.com/compilefarm/compilefarm/pkg/memstore"
	"github.com/compilefarm/compilefarm/pkg/metrics"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// rig is a front door on real TLS, with the built-in CA, in-memory stores,
// and the recorded fixture environment deployed; compiles are done by the
// test writing catalogs.
type rig struct {
	t      *testing.T
	fd     *Server
	srv    *httptest.Server
	store  *memstore.Store
	codeID string
	anon   *http.Client
	certs  map[string]tls.Certificate
	pool   *x509.CertPool
	ca     *ca.CA
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	authority, err := cadir.OpenCA(ctx, t.TempDir(), ca.Options{Name: "test", KeyBits: 2048, Autosign: true})
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := authority.IssueServerCert(ctx, "server.test", []string{"localhost", "127.0.0.1"}, pki.KeyECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	queue := memstore.NewQueue(memstore.QueueOptions{})
	m, err := code.Snapshot(ctx, store, "production", "../../testdata/puppet-protocol/production")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: m.CodeID()}); err != nil {
		t.Fatal(err)
	}
	filter, _ := facts.NewFilter(facts.DefaultVolatile)
	fd := &Server{
		CA: authority, Revocations: authority, Peers: authority,
		Intake: &intake.Intake{Content: store, Nodes: store, Envs: store, Queue: queue, Filter: filter},
		Nodes:  store, Envs: store, Content: store, Files: code.NewLibrary(store, t.TempDir()), Bucket: store,
		Metrics: metrics.New(queue), FirstCompileWait: 300 * time.Millisecond, ChangedCompileWait: 200 * time.Millisecond,
		Operator: operatorAPI(authority),
	}
	srv := httptest.NewUnstartedServer(fd.Handler())
	srv.TLS = authority.ServerTLSConfig(serverCert)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	r := &rig{t: t, fd: fd, srv: srv, store: store, codeID: m.CodeID(), certs: map[string]tls.Certificate{}, pool: authority.Pool(), ca: authority}
	r.anon = r.client("")
	for _, name := range []string{"agent1.example.test", "agent2.example.test"} {
		csr, key := farmtest.NewCSR(t, name)
		if err := authority.SubmitCSR(ctx, name, csr); err != nil {
			t.Fatal(err)
		}
		certPEM, err := authority.Certificate(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		der, _ := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
		c, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
		if err != nil {
			t.Fatal(err)
		}
		r.certs[name] = c
	}
	return r
}

func (r *rig) client(certname string) *http.Client {
	conf := &tls.Config{RootCAs: r.pool, ServerName: "localhost"}
	if certname != "" {
		conf.Certificates = []tls.Certificate{r.certs[certname]}
	}
	// No transparent gzip: the tests look at what is sent.
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf, DisableCompression: true}}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (r *rig) do(c *http.Client, method, path string, body []byte, header map[string]string) response {
	r.t.Helper()
	req, err := http.NewRequest(method, r.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func golden(t *testing.T, name string) string {
	b, err := os.ReadFile("../../testdata/puppet-protocol/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(string(b), "\n")
}

// TestRecordedAnswers compares answers with what Puppet Server 7.9.5 said
// to the same requests (shared/puppet-protocol).
func TestRecordedAnswers(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	tests := []struct {
		name       string
		client     *http.Client
		method     string
		path       string
		wantStatus int
		wantType   string // "-" means no Content-Type header at all
		wantBody   string
	}{
		{"status simple", r.anon, "GET", "/status/v1/simple", 200, "text/plain;charset=utf-8", golden(t, "status-simple.body")},
		{"bad environment", a1, "GET", "/puppet/v3/node/agent1.example.test?environment=nosuchenv", 404,
			"application/json;charset=utf-8", golden(t, "node-badenv.body")},
		{"missing file metadata", a1, "GET", "/puppet/v3/file_metadata/modules/pupdemo/missing.txt?environment=production", 404,
			"application/json;charset=utf-8", golden(t, "file_metadata-404.body")},
		{"static content without code_id", a1, "GET", "/puppet/v3/static_file_content/modules/pupdemo/files/static.txt?environment=production", 400,
			"text/plain", golden(t, "static_file_content-400-no-code_id.body")},
		{"other node's catalog", a1, "POST", "/puppet/v3/catalog/agent2.example.test?environment=production", 403,
			"-", golden(t, "catalog-403-other-node.body")},
		{"node without client cert", r.anon, "GET", "/puppet/v3/node/agent1.example.test?environment=production", 403,
			"-", "Forbidden request: /puppet/v3/node/agent1.example.test (method :get). Please see the server logs for details."},
		{"unknown certificate", r.anon, "GET", "/puppet-ca/v1/certificate/not-signed-yet.example.test", 404,
			"text/plain", "Could not find certificate not-signed-yet.example.test"},
		{"unknown CSR", r.anon, "GET", "/puppet-ca/v1/certificate_request/not-submitted.example.test", 404,
			"text/plain", "Could not find certificate_request not-submitted.example.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := r.do(tt.client, tt.method, tt.path, nil, nil)
			if resp.status != tt.wantStatus || strings.TrimRight(resp.body, "\n") != tt.wantBody {
				t.Errorf("got %d %q\nwant %d %q", resp.status, resp.body, tt.wantStatus, tt.wantBody)
			}
			gotType := resp.header.Get("Content-Type")
			if tt.wantType == "-" {
				if _, ok := resp.header["Content-Type"]; ok {
					t.Errorf("Content-Type = %q, want none", gotType)
				}
			} else if gotType != tt.wantType {
				t.Errorf("Content-Type = %q, want %q", gotType, tt.wantType)
			}
			if resp.header.Get("X-Puppet-Version") == "" {
				t.Error("no X-Puppet-Version header")
			}
		})
	}
}

func TestFileMetadataMatchesRecording(t *testing.T) {
	r := newRig(t)
	resp := r.do(r.client("agent1.example.test"), "GET",
		"/puppet/v3/file_metadata/modules/pupdemo/static.txt?links=manage&checksum_type=sha256&source_permissions=ignore&environment=production", nil, nil)
	if resp.status != 200 {
		t.Fatalf("file_metadata: %d %s", resp.status, resp.body)
	}
	var got, want map[string]any
	json.Unmarshal([]byte(resp.body), &got)
	json.Unmarshal([]byte(golden(t, "file_metadata-static.body")), &want)
	for _, k := range []string{"relative_path", "links", "mode", "checksum", "type", "destination"} {
		if g, w := jsonOf(got[k]), jsonOf(want[k]); g != w {
			t.Errorf("%s = %s, want %s", k, g, w)
		}
	}
	if !strings.HasSuffix(got["path"].(string), "/production/modules/pupdemo/files/static.txt") {
		t.Errorf("path = %v", got["path"])
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// catalogForm is a catalog request body as the agent sends it.
func catalogForm(certname, role string) []byte {
	doc, _ := json.Marshal(map[string]any{"name": certname, "values": map[string]any{"cf_role": role, "uptime_seconds": time.Now().UnixNano()}})
	v := url.Values{"facts_format": {"application/json"}, "facts": {url.QueryEscape(string(doc))},
		"environment": {"production"}, "static_catalog": {"true"}}
	return []byte(v.Encode())
}

var agentHeaders = map[string]string{
	"Content-Type":    "application/x-www-form-urlencoded",
	"Accept":          "application/vnd.puppet.rich+json, application/json, text/pson",
	"Accept-Encoding": "gzip;q=1.0,deflate;q=0.6,identity;q=0.3",
}

// compile stands in for a compile worker: it stores a catalog for the
// node's latest request, or a failure.
func (r *rig) compile(certname string, fail string) {
	r.t.Helper()
	ctx := context.Background()
	cat := []byte(`{"name":"` + certname + `","version":1,"resources":[]}`)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(cat)
	zw.Close()
	d, _ := r.store.Put(ctx, farm.SpaceCatalogs, cat)
	gd, _ := r.store.Put(ctx, farm.SpaceCatalogs, gz.Bytes())
	_, err := r.store.UpdateNode(ctx, certname, func(n *farm.Node) error {
		seq := n.Requested.Seq
		if fail != "" {
			n.Compile = &farm.CompileStatus{Result: farm.ResultFailed, Error: fail, Seq: seq, At: time.Now()}
			return nil
		}
		n.Catalog = &farm.CatalogRef{Digest: d, GzipDigest: gd, Seq: seq, CodeID: r.codeID}
		n.Compile = &farm.CompileStatus{Result: farm.ResultOK, Seq: seq, At: time.Now()}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

func TestServingRule(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	post := func(role string, hdr map[string]string) response {
		return r.do(a1, "POST", "/puppet/v3/catalog/agent1.example.test?environment=production", catalogForm("agent1.example.test", role), hdr)
	}

	// First compile not done within the bound: 503 with Retry-After.
	resp := post("web", agentHeaders)
	if resp.status != 503 || resp.header.Get("Retry-After") == "" || !strings.Contains(resp.body, "still compiling") {
		t.Fatalf("first request before any compile: %d %v %s", resp.status, resp.header, resp.body)
	}
	// Compiled: the gzipped catalog as stored, rich JSON content type.
	r.compile("agent1.example.test", "")
	resp = post("web", agentHeaders)
	if resp.status != 200 || resp.header.Get("Content-Encoding") != "gzip" ||
		resp.header.Get("Content-Type") != "application/vnd.puppet.rich+json; charset=utf-8" {
		t.Fatalf("current catalog: %d %v", resp.status, resp.header)
	}
	zr, err := gzip.NewReader(strings.NewReader(resp.body))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !strings.Contains(string(plain), `"name":"agent1.example.test"`) {
		t.Errorf("catalog body = %s", plain)
	}
	// A JSON-only agent without gzip gets plain JSON.
	resp = post("web", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"})
	if resp.status != 200 || resp.header.Get("Content-Encoding") != "" || resp.header.Get("Content-Type") != "application/json;charset=utf-8" {
		t.Errorf("json-only agent: %d %v", resp.status, resp.header)
	}
	// A used fact changes and the recompile is still running: last good catalog.
	resp = post("db", agentHeaders)
	if resp.status != 200 {
		t.Errorf("stale catalog while recompiling: %d %s", resp.status, resp.body)
	}
	// That recompile fails: still the last good catalog.
	r.compile("agent1.example.test", "Evaluation Error: boom (file: /x/site.pp, line: 2, column: 3) on node agent1.example.test")
	if resp := post("db", agentHeaders); resp.status != 200 {
		t.Errorf("after a failed recompile with a good catalog: %d %s", resp.status, resp.body)
	}

	// A node whose only compile failed gets Puppet's 500 with the message.
	a2 := r.client("agent2.example.test")
	r.do(a2, "POST", "/puppet/v3/catalog/agent2.example.test?environment=production", catalogForm("agent2.example.test", "web"), agentHeaders)
	r.compile("agent2.example.test", "Syntax error at '}' (file: /x/site.pp, line: 4, column: 1) on node agent2.example.test")
	resp = r.do(a2, "POST", "/puppet/v3/catalog/agent2.example.test?environment=production", catalogForm("agent2.example.test", "web"), agentHeaders)
	want := `{"message":"Server Error: Syntax error at '}' (file: /x/site.pp, line: 4, column: 1) on node agent2.example.test","issue_kind":"RUNTIME_ERROR"}`
	if resp.status != 500 || strings.TrimSpace(resp.body) != want {
		t.Errorf("failed compile: %d %s\nwant 500 %s", resp.status, resp.body, want)
	}
}

func TestReportsAndFiles(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	resp := r.do(a1, "PUT", "/puppet/v3/report/agent1.example.test?environment=production",
		[]byte(`{"host":"agent1.example.test","status":"changed","time":"2026-11-21T22:28:30.337368966+00:00","configuration_version":12}`),
		map[string]string{"Content-Type": "application/json"})
	if resp.status != 200 || resp.body != `["store"]` {
		t.Fatalf("report: %d %s", resp.status, resp.body)
	}
	n, err := r.store.GetNode(context.Background(), "agent1.example.test")
	if err != nil || n.Report == nil || n.Report.Status != "changed" || n.Report.ConfigVersion != "12" {
		t.Errorf("report summary: %+v %v", n.Report, err)
	}

	tests := []struct {
		path, want string
	}{
		{"/puppet/v3/file_content/modules/pupdemo/static.txt?environment=production", "static"},
		{"/puppet/v3/file_content/pluginfacts/ext.txt?environment=production", "pupdemo_external=from-facts.d"},
		{"/puppet/v3/file_content/plugins/facter/pupdemo_fact.rb?environment=production", "Facter.add(:pupdemo_fact)"},
		{"/puppet/v3/static_file_content/modules/pupdemo/files/tree/one.txt?environment=production&code_id=" + r.codeID, "one"},
	}
	for _, tt := range tests {
		resp := r.do(a1, "GET", tt.path, nil, nil)
		if resp.status != 200 || !strings.Contains(resp.body, tt.want) || resp.header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("GET %s = %d %q %v", tt.path, resp.status, resp.body, resp.header.Get("Content-Type"))
		}
	}
	resp = r.do(a1, "GET", "/puppet/v3/file_metadatas/modules/pupdemo/tree?recurse=true&links=manage&checksum_type=sha256&source_permissions=ignore&environment=production", nil, nil)
	var list []map[string]any
	if err := json.Unmarshal([]byte(resp.body), &list); err != nil || len(list) != 4 {
		t.Errorf("file_metadatas tree: %d entries (%v): %s", len(list), err, resp.body)
	}
}

// A refused certificate request answers with the CA's message alone, as
// Puppet Server does, not with the context the error gathered.
func TestCSRRefusalBody(t *testing.T) {
	r := newRig(t)
	tests := []struct {
		name, certname, cn, want string
	}{
		{"already signed", "agent1.example.test", "agent1.example.test",
			"agent1.example.test already has a signed certificate; ignoring certificate request"},
		{"CN is not the certname", "agent3.example.test", "other.example.test",
			"Instance name \"other.example.test\" does not match requested key \"agent3.example.test\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csr, _ := farmtest.NewCSR(t, tt.cn)
			resp := r.do(r.anon, "PUT", "/puppet-ca/v1/certificate_request/"+tt.certname, csr, map[string]string{"Content-Type": "text/plain"})
			if resp.status != 400 || resp.body != tt.want {
				t.Errorf("got %d %q\nwant 400 %q", resp.status, resp.body, tt.want)
			}
		})
	}
}

// The CRL carries Last-Modified; an agent refreshing it
// (crl_refresh_interval) with If-Modified-Since gets 304 while it is
// unchanged and the new CRL after a revocation, even within the second.
func TestCRLIfModifiedSince(t *testing.T) {
	r := newRig(t)
	const path = "/puppet-ca/v1/certificate_revocation_list/ca"
	first := r.do(r.anon, "GET", path, nil, nil)
	lm := first.header.Get("Last-Modified")
	if first.status != 200 || lm == "" || !strings.HasPrefix(first.body, "-----BEGIN X509 CRL-----") {
		t.Fatalf("GET CRL: %d, Last-Modified %q, body %.30q", first.status, lm, first.body)
	}
	if again := r.do(r.anon, "GET", path, nil, map[string]string{"If-Modified-Since": lm}); again.status != 304 || again.body != "" {
		t.Fatalf("unchanged CRL with If-Modified-Since: %d %.30q, want 304 and no body", again.status, again.body)
	}
	if err := r.ca.Revoke(t.Context(), "agent2.example.test"); err != nil {
		t.Fatal(err)
	}
	after := r.do(r.anon, "GET", path, nil, map[string]string{"If-Modified-Since": lm})
	if after.status != 200 || after.body == first.body {
		t.Fatalf("CRL after a revocation with the old If-Modified-Since: %d, changed %v; want 200 and the new CRL", after.status, after.body != first.body)
	}
}

// TestRevokedOnAnOpenConnection: the front door's TLS configuration
// verifies a client certificate once per connection, through the CA's
// cache of verified certificates; a revocation between two requests on one
// keep-alive connection refuses the second, and the agent's next
// connection too.
func TestRevokedOnAnOpenConnection(t *testing.T) {
	r := newRig(t)
	a1 := r.client("agent1.example.test")
	const path = "/puppet/v3/file_metadata/modules/pupdemo/static.txt?links=manage&checksum_type=sha256&source_permissions=ignore&environment=production"
	conns := 0
	trace := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			conns++
		}
	}})
	get := func() int {
		req, _ := http.NewRequestWithContext(trace, "GET", r.srv.URL+path, nil)
		resp, err := a1.Do(req)
		if err != nil {
			if conns > 1 {
				return 0 // the handshake was refused
			}
			t.Fatalf("GET: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(); got != http.StatusOK {
		t.Fatalf("before the revocation: %d, want 200", got)
	}
	if got := get(); got != http.StatusOK || conns != 1 {
		t.Fatalf("again on the same connection: %d over %d connections, want 200 over 1", got, conns)
	}
	if err := r.ca.Revoke(t.Context(), "agent1.example.test"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != http.StatusForbidden || conns != 1 {
		t.Fatalf("after the revocation, same connection: %d over %d connections, want 403 over 1", got, conns)
	}
	a1.CloseIdleConnections()
	if got := get(); got != 0 || conns != 2 {
		t.Fatalf("after the revocation, a new connection: status %d over %d connections, want a refused handshake", got, conns)
	}
}
