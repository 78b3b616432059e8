package puppet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

const installHint = "ruby and puppet are needed; run scripts/install-deps.sh"

// The engine most tests share: loading Puppet costs a second or more.
var shared struct {
	once sync.Once
	dir  string
	eng  *Engine
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.eng != nil {
		if err := shared.eng.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close shared engine:", err)
			code = 1
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// testLogger sends the workers' Puppet log to the test output only when
// tests run verbosely.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// sharedEngine is an engine with two workers, shared by the whole package.
func sharedEngine(t testing.TB) *Engine {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "puppet-engine-test-")
		if shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		shared.eng, shared.err = New(ctx, Options{Workers: 2, WorkDir: shared.dir, Logger: testLogger()})
	})
	if shared.err != nil {
		t.Fatalf("start puppet engine: %v (%s)", shared.err, installHint)
	}
	return shared.eng
}

// newEngine starts an engine of its own, closed when t ends.
func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	if testing.Short() { // also for a test that forgot its own guard
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	if opts.WorkDir == "" {
		opts.WorkDir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	e, err := New(t.Context(), opts)
	if err != nil {
		t.Fatalf("start puppet engine: %v (%s)", err, installHint)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e
}

// agentFacts are the facts the recorded agent (agent1) sent, numbers kept
// exactly as sent.
func agentFacts(t testing.TB) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../../testdata/puppet-protocol/facts-agent1.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Values map[string]any `json:"values"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decode agent facts: %v", err)
	}
	return doc.Values
}

// withFacts returns a copy of facts with extra set (nil values delete).
func withFacts(facts map[string]any, extra map[string]any) map[string]any {
	out := make(map[string]any, len(facts)+len(extra))
	for k, v := range facts {
		out[k] = v
	}
	for k, v := range extra {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// snapshot copies the environment directory src into a fresh
// environmentpath (as the farm does for a code_id) and returns that path.
func snapshot(t testing.TB, src, envName string) string {
	t.Helper()
	envpath := t.TempDir()
	if err := os.CopyFS(filepath.Join(envpath, envName), os.DirFS(src)); err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return envpath
}

// writeTree writes files (path → content) under dir.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func absPath(t testing.TB, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// catalog is the part of a catalog the tests look at.
type catalog struct {
	Name          string     `json:"name"`
	Environment   string     `json:"environment"`
	CodeID        *string    `json:"code_id"`
	CatalogFormat int        `json:"catalog_format"`
	Classes       []string   `json:"classes"`
	Resources     []resource `json:"resources"`
}

type resource struct {
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Exported   bool           `json:"exported"`
	Parameters map[string]any `json:"parameters"`
	Sensitive  []string       `json:"sensitive_parameters"`
}

func parseCatalog(t testing.TB, b []byte) catalog {
	t.Helper()
	var c catalog
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("catalog is not JSON: %v\n%s", err, b)
	}
	return c
}

// resource returns the resource Type[title], or nil.
func (c catalog) resource(typ, title string) *resource {
	for i := range c.Resources {
		if c.Resources[i].Type == typ && c.Resources[i].Title == title {
			return &c.Resources[i]
		}
	}
	return nil
}

func compileOK(t testing.TB, e *Engine, req compiler.Request) catalog {
	t.Helper()
	res, err := e.Compile(t.Context(), req)
	if err != nil {
		t.Fatalf("compile %s: %v", req.Certname, err)
	}
	return parseCatalog(t, res.Catalog)
}

// normalizeCatalog blanks what the golden comparison ignores: version,
// catalog_uuid, code_id and the directory the environment lives in.
func normalizeCatalog(b []byte, envDir string) []byte {
	b = regexp.MustCompile(`"version":\d+`).ReplaceAll(b, []byte(`"version":0`))
	b = regexp.MustCompile(`"catalog_uuid":"[^"]*"`).ReplaceAll(b, []byte(`"catalog_uuid":""`))
	b = regexp.MustCompile(`"code_id":(null|"[^"]*")`).ReplaceAll(b, []byte(`"code_id":null`))
	return bytes.ReplaceAll(b, []byte(`"file":"`+envDir+`/`), []byte(`"file":"ENV/`))
}

// TestCompileGolden compiles the environment a real Puppet Server 7.9.5
// compiled, with the same agent's facts, and compares the catalogs byte for
// byte (bar version, catalog_uuid, code_id and the environment's directory).
func TestCompileGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	envpath := snapshot(t, "../../../testdata/puppet-protocol/production", "production")
	want, err := os.ReadFile("../../../testdata/puppet-protocol/catalog-agent1.body")
	if err != nil {
		t.Fatal(err)
	}
	want = normalizeCatalog(bytes.TrimSpace(want), "/etc/puppet/code/environments/production")
	req := compiler.Request{
		Certname:        "agent1.example.test",
		Environment:     "production",
		CodeID:          "golden-1",
		EnvironmentPath: envpath,
		Facts:           agentFacts(t),
	}
	// Twice: cold (parses the code) and warm (reuses it).
	for _, run := range []string{"cold", "warm"} {
		t.Run(run, func(t *testing.T) {
			res, err := e.Compile(t.Context(), req)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got := normalizeCatalog(res.Catalog, filepath.Join(envpath, "production"))
			if !bytes.Equal(got, want) {
				t.Errorf("catalog differs from Puppet Server's\n got: %s\nwant: %s", got, want)
			}
			c := parseCatalog(t, res.Catalog)
			if c.CodeID == nil || *c.CodeID != req.CodeID {
				t.Errorf("code_id = %v, want %q", c.CodeID, req.CodeID)
			}
			// Recording is on, and sees the manifest's and the ERB
			// template's reads (the catalog above is unchanged by it).
			if res.Reads == nil {
				t.Fatal("no fact reads recorded")
			}
			var reads []string
			for _, r := range res.Reads.Reads {
				reads = append(reads, describe(r))
			}
			wantReads := []string{"present name=false", "present title=false", "value networking.fqdn", "value os.name", "value pupdemo_fact"}
			slices.Sort(reads)
			if !slices.Equal(reads, wantReads) || res.Reads.AlwaysRecompile {
				t.Errorf("reads = %q (always %v), want %q", reads, res.Reads.AlwaysRecompile, wantReads)
			}
		})
	}
}

// TestCompileErrors checks that failures of the code come back as
// *compiler.CompileError with Puppet Server's message and location.
func TestCompileErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	behaviours := absPath(t, "testdata/envs/behaviours")
	syntax := absPath(t, "testdata/envs/syntax")
	site := func(envpath string) string { return filepath.Join(envpath, "production/manifests/site.pp") }
	tests := []struct {
		name        string
		certname    string
		envpath     string
		environment string
		wantMessage string // exact
		wantFile    string
		wantLine    int
		wantColumn  int
	}{
		{
			name:        "syntax error",
			certname:    "n1.example.test",
			envpath:     syntax,
			wantMessage: "Could not parse for environment production: Syntax error at end of input (file: " + site(syntax) + ") on node n1.example.test",
			wantFile:    site(syntax),
		},
		{
			name:        "fail()",
			certname:    "fail.example.test",
			envpath:     behaviours,
			wantMessage: "Evaluation Error: Error while evaluating a Function Call, deliberate failure (file: " + site(behaviours) + ", line: 6, column: 3) on node fail.example.test",
			wantFile:    site(behaviours),
			wantLine:    6,
			wantColumn:  3,
		},
		{
			name:        "unknown class",
			certname:    "unknown-class.example.test",
			envpath:     behaviours,
			wantMessage: "Evaluation Error: Error while evaluating a Function Call, Could not find class ::no_such_class for unknown-class.example.test (file: " + site(behaviours) + ", line: 9, column: 3) on node unknown-class.example.test",
			wantFile:    site(behaviours),
			wantLine:    9,
			wantColumn:  3,
		},
		{
			name:        "ruby function raises",
			certname:    "ruby-error.example.test",
			envpath:     behaviours,
			wantMessage: "Evaluation Error: Error while evaluating a Function Call, from a ruby function (file: " + site(behaviours) + ", line: 12, column: 8) on node ruby-error.example.test",
			wantFile:    site(behaviours),
			wantLine:    12,
			wantColumn:  8,
		},
		{
			name:        "no such environment",
			certname:    "n1.example.test",
			envpath:     behaviours,
			environment: "nosuchenv",
			wantMessage: "Could not find a directory environment named 'nosuchenv' anywhere in the path: " + behaviours + ". Does the directory exist?",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.environment
			if env == "" {
				env = "production"
			}
			_, err := e.Compile(t.Context(), compiler.Request{
				Certname:        tt.certname,
				Environment:     env,
				CodeID:          "errors",
				EnvironmentPath: tt.envpath,
				Facts:           map[string]any{"networking": map[string]any{"fqdn": tt.certname}},
			})
			var ce *compiler.CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v (%T), want a *compiler.CompileError", err, err)
			}
			if errors.Is(err, farm.ErrTransient) {
				t.Errorf("a compile error must not be transient: %v", err)
			}
			if ce.Message != tt.wantMessage {
				t.Errorf("message\n got: %s\nwant: %s", ce.Message, tt.wantMessage)
			}
			if ce.File != tt.wantFile || ce.Line != tt.wantLine || ce.Column != tt.wantColumn {
				t.Errorf("location = %s:%d:%d, want %s:%d:%d", ce.File, ce.Line, ce.Column, tt.wantFile, tt.wantLine, tt.wantColumn)
			}
		})
	}

	// The engine keeps working after errors.
	c := compileOK(t, e, compiler.Request{Certname: "ok.example.test", Environment: "production", CodeID: "errors", EnvironmentPath: behaviours})
	if r := c.resource("Notify", "ok"); r == nil || r.Parameters["message"] != "hello ok.example.test from production" {
		t.Errorf("Notify[ok] = %+v, want trusted certname and server_facts environment", r)
	}
}

// TestCompileFiltersVirtual checks that, as in Puppet Server, virtual and
// exported resources are not in the catalog an agent receives.
func TestCompileFiltersVirtual(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	c := compileOK(t, e, compiler.Request{
		Certname: "exported.example.test", Environment: "production", CodeID: "errors",
		EnvironmentPath: absPath(t, "testdata/envs/behaviours"),
	})
	if c.resource("Notify", "real") == nil {
		t.Error("Notify[real] missing")
	}
	for _, title := range []string{"exported", "virtual"} {
		if c.resource("Notify", title) != nil {
			t.Errorf("Notify[%s] is in the catalog", title)
		}
	}
}

// TestCompileInvalidRequest checks requests that never reach a worker.
func TestCompileInvalidRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	good := compiler.Request{Certname: "n1.example.test", Environment: "production", EnvironmentPath: "/tmp/x"}
	tests := []struct {
		name   string
		change func(*compiler.Request)
	}{
		{"empty certname", func(r *compiler.Request) { r.Certname = "" }},
		{"uppercase certname", func(r *compiler.Request) { r.Certname = "N1" }},
		{"bad environment", func(r *compiler.Request) { r.Environment = "prod-uction" }},
		{"relative environmentpath", func(r *compiler.Request) { r.EnvironmentPath = "envs" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := good
			tt.change(&req)
			_, err := e.Compile(t.Context(), req)
			if !errors.Is(err, farm.ErrInvalid) {
				t.Errorf("err = %v, want farm.ErrInvalid", err)
			}
		})
	}
}

// TestCodeSnapshots checks that a compile uses exactly its code_id's
// snapshot: two snapshots of one environment name, with different manifests,
// Hiera data, Ruby functions and templates, compiled in turns.
func TestCodeSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	mk := func(v string) string {
		envpath := t.TempDir()
		writeTree(t, filepath.Join(envpath, "production"), map[string]string{
			"manifests/site.pp": "node default {\n  include iso\n  notify { 'site-" + v + "': }\n}\n",
			"hiera.yaml":        "---\nversion: 5\nhierarchy:\n  - name: common\n    path: common.yaml\n",
			"data/common.yaml":  "---\niso::msg: hiera-" + v + "\n",
			"modules/iso/manifests/init.pp": "class iso (String $msg) {\n" +
				"  notify { 'iso': message => \"${msg} ${iso::fn()} ${template('iso/t.erb')}\" }\n}\n",
			"modules/iso/templates/t.erb": "tpl-" + v,
			"modules/iso/lib/puppet/functions/iso/fn.rb": "Puppet::Functions.create_function(:'iso::fn') do\n" +
				"  def fn\n    'fn-" + v + "'\n  end\nend\n",
		})
		return envpath
	}
	paths := map[string]string{"A": mk("A"), "B": mk("B")}
	for i, v := range []string{"A", "B", "A", "B", "A", "B"} {
		t.Run(fmt.Sprintf("%d-%s", i, v), func(t *testing.T) {
			c := compileOK(t, e, compiler.Request{
				Certname: "iso.example.test", Environment: "production", CodeID: "code-" + v,
				EnvironmentPath: paths[v], Facts: map[string]any{},
			})
			want := fmt.Sprintf("hiera-%s fn-%s tpl-%s", v, v, v)
			if r := c.resource("Notify", "iso"); r == nil || r.Parameters["message"] != want {
				t.Errorf("Notify[iso] = %+v, want message %q", r, want)
			}
			other := map[string]string{"A": "B", "B": "A"}[v]
			if c.resource("Notify", "site-"+v) == nil || c.resource("Notify", "site-"+other) != nil {
				t.Errorf("catalog has the wrong site.pp: %+v", c.Resources)
			}
		})
	}
}

// TestCompileConcurrent runs more compiles than workers at once.
func TestCompileConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	envpath := snapshot(t, "../../../testdata/puppet-protocol/production", "production")
	facts := agentFacts(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			res, err := e.Compile(t.Context(), compiler.Request{
				Certname: "agent1.example.test", Environment: "production", CodeID: "concurrent",
				EnvironmentPath: envpath, Facts: facts,
			})
			if err == nil && !bytes.Contains(res.Catalog, []byte(`HELLO FROM PUPDEMO`)) {
				err = fmt.Errorf("catalog lacks the Ruby function's output: %.300s", res.Catalog)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("compile %d: %v", i, err)
		}
	}
}

// TestNewErrors checks start-up failures.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
		wantIs  error
	}{
		{name: "no workdir", opts: Options{}, wantIs: farm.ErrInvalid},
		{name: "no ruby", opts: Options{Ruby: "/nonexistent/ruby", WorkDir: t.TempDir()}, wantErr: "/nonexistent/ruby"},
		{name: "not ruby", opts: Options{Ruby: "/bin/false", WorkDir: t.TempDir()}, wantErr: "exited before it was ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Logger = testLogger()
			e, err := New(t.Context(), tt.opts)
			if err == nil {
				e.Close()
				t.Fatal("New succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want %v", err, tt.wantIs)
			}
			if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}
