package puppet

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/compiler"
)

// exampleEnv is the product demo's environment.
const exampleEnv = "../../../examples/environments/production"

// TestExampleEnvironment compiles examples/environments/production and
// checks the resources each role gets, where they live, and that the
// cf_role fact changes the catalog.
func TestExampleEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	envpath := snapshot(t, exampleEnv, "production")
	base := agentFacts(t)
	root := t.TempDir()

	roleTxt := func(role, greeting string) string {
		return "role: " + role + "\ngreeting: " + greeting +
			"\nfeatures:\n  - static file\n  - recursive directory\n  - ERB template\n  - EPP template\n"
	}
	const (
		greetBase = "Hello from the compile farm"
		greetWeb  = "Hello from a compile farm web node"
	)
	tests := []struct {
		name        string
		facts       map[string]any // added to the agent's facts
		wantRoot    string
		wantRole    string
		wantRoleTxt string
		wantClasses []string
		wantWeb     bool
	}{
		{
			name:        "no cf_role, no cf_root",
			facts:       map[string]any{},
			wantRoot:    "/tmp/compilefarm-demo",
			wantRole:    "base",
			wantRoleTxt: roleTxt("base", greetBase),
			wantClasses: []string{"role", "role::base", "demo"},
		},
		{
			name:        "cf_root relocates everything",
			facts:       map[string]any{"cf_root": root + "/"},
			wantRoot:    root,
			wantRole:    "base",
			wantRoleTxt: roleTxt("base", greetBase),
			wantClasses: []string{"role", "role::base", "demo"},
		},
		{
			name:        "cf_role web",
			facts:       map[string]any{"cf_root": root, "cf_role": "web"},
			wantRoot:    root,
			wantRole:    "web",
			wantRoleTxt: roleTxt("web", greetWeb),
			wantClasses: []string{"role", "role::web", "demo", "demo::web"},
			wantWeb:     true,
		},
		{
			name:        "unknown cf_role falls back to base",
			facts:       map[string]any{"cf_root": root, "cf_role": "database"},
			wantRoot:    root,
			wantRole:    "base",
			wantRoleTxt: roleTxt("base", greetBase),
			wantClasses: []string{"role", "role::base", "demo"},
		},
		{
			name: "pluginsynced facts are shown",
			facts: map[string]any{"cf_root": root, "cf_demo_plugin": "pluginsynced",
				"cf_demo_external": "from-facts.d"},
			wantRoot:    root,
			wantRole:    "base",
			wantRoleTxt: roleTxt("base", greetBase),
			wantClasses: []string{"role", "role::base", "demo"},
		},
	}
	catalogs := map[string][]byte{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.Compile(t.Context(), compiler.Request{
				Certname: "demo1.example.test", Environment: "production", CodeID: "example",
				EnvironmentPath: envpath, Facts: withFacts(base, tt.facts),
			})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			catalogs[tt.name] = res.Catalog
			c := parseCatalog(t, res.Catalog)
			for _, class := range tt.wantClasses {
				if !slices.Contains(c.Classes, class) {
					t.Errorf("classes %v lack %s", c.Classes, class)
				}
			}
			r := tt.wantRoot
			want := map[string]map[string]any{
				r:                 {"ensure": "directory", "mode": "0755"},
				r + "/static.txt": {"ensure": "file", "mode": "0644", "source": "puppet:///modules/demo/static.txt"},
				r + "/tree":       {"ensure": "directory", "recurse": true, "source": "puppet:///modules/demo/tree"},
				r + "/role.txt":   {"ensure": "file", "mode": "0644", "content": tt.wantRoleTxt},
			}
			for title, params := range want {
				res := c.resource("File", title)
				if res == nil {
					t.Errorf("File[%s] missing", title)
					continue
				}
				if !reflect.DeepEqual(res.Parameters, params) {
					t.Errorf("File[%s] parameters = %v, want %v", title, res.Parameters, params)
				}
			}
			motd := c.resource("File", r+"/motd.txt")
			wantMotd := "This is vm (Debian 12.11), role " + tt.wantRole + ".\nManaged by Puppet from the compile farm; files live under " + r + ".\n"
			if motd == nil || !strings.HasSuffix(motd.Parameters["content"].(string), wantMotd) {
				t.Errorf("File[%s/motd.txt] = %+v, want content ending %q", r, motd, wantMotd)
			}
			factsTxt := c.resource("File", r+"/facts.txt")
			plugin, external := "absent", "absent"
			if v, ok := tt.facts["cf_demo_plugin"]; ok {
				plugin, external = v.(string), tt.facts["cf_demo_external"].(string)
			}
			wantFacts := "custom fact cf_demo_plugin: " + plugin + "\nexternal fact cf_demo_external: " + external + "\n"
			if factsTxt == nil || factsTxt.Parameters["content"] != wantFacts {
				t.Errorf("File[%s/facts.txt] = %+v, want content %q", r, factsTxt, wantFacts)
			}
			index := c.resource("File", r+"/www/index.html")
			if tt.wantWeb != (index != nil) {
				t.Errorf("File[%s/www/index.html] present = %v, want %v", r, index != nil, tt.wantWeb)
			}
			if index != nil && !strings.Contains(index.Parameters["content"].(string), "(port 8080)") {
				t.Errorf("index.html lacks the Hiera port: %v", index.Parameters["content"])
			}
		})
	}
	if string(catalogs["cf_root relocates everything"]) == "" || string(catalogs["cf_role web"]) == "" {
		t.Fatal("missing catalogs")
	}
	a := normalizeCatalog(catalogs["cf_root relocates everything"], "")
	b := normalizeCatalog(catalogs["cf_role web"], "")
	if string(a) == string(b) {
		t.Error("changing cf_role did not change the catalog")
	}
}

// TestExampleEnvironmentApply applies the example environment twice with
// `puppet apply` into a temporary cf_root: the second run must change
// nothing, as a second agent run must report no changes.
func TestExampleEnvironmentApply(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	puppet, err := exec.LookPath("puppet")
	if err != nil {
		t.Fatalf("puppet not found: %v (%s)", err, installHint)
	}
	envs := t.TempDir()
	if err := os.CopyFS(filepath.Join(envs, "production"), os.DirFS(exampleEnv)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	apply := func() int {
		cmd := exec.CommandContext(t.Context(), puppet, "apply", "--detailed-exitcodes", "--color=false",
			"--confdir", filepath.Join(dir, "conf"), "--vardir", filepath.Join(dir, "var"),
			"--codedir", filepath.Join(dir, "code"), "--logdir", filepath.Join(dir, "log"),
			"--rundir", filepath.Join(dir, "run"), "--publicdir", filepath.Join(dir, "public"),
			"--environmentpath", envs, "--environment", "production",
			filepath.Join(envs, "production/manifests/site.pp"))
		cmd.Env = append(os.Environ(), "FACTER_cf_root="+root, "FACTER_cf_role=web")
		out, err := cmd.CombinedOutput()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code != 2 {
			t.Fatalf("puppet apply: %v\n%s", err, out)
		}
		t.Logf("puppet apply exit %d\n%s", code, out)
		return code
	}
	if code := apply(); code != 2 {
		t.Errorf("first apply: exit %d, want 2 (changes)", code)
	}
	if code := apply(); code != 0 {
		t.Errorf("second apply: exit %d, want 0 (no changes)", code)
	}
	for _, f := range []string{"static.txt", "tree/one.txt", "tree/sub/two.txt", "motd.txt", "role.txt", "facts.txt", "www/index.html"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("after apply: %v", err)
		}
	}
}

// BenchmarkCompileWarm compiles the example environment again and again on
// one warm worker (environment already parsed), recording the facts read.
func BenchmarkCompileWarm(b *testing.B) { benchmarkCompileWarm(b, nil) }

// BenchmarkCompileWarmNoRecording is BenchmarkCompileWarm with fact-read
// recording off (no hooks installed): the difference is its overhead.
func BenchmarkCompileWarmNoRecording(b *testing.B) { benchmarkCompileWarm(b, []string{"all"}) }

func benchmarkCompileWarm(b *testing.B, disableHooks []string) {
	e := newEngine(b, Options{Workers: 1, DisableHooks: disableHooks})
	envpath := snapshot(b, exampleEnv, "production")
	req := compiler.Request{
		Certname: "demo1.example.test", Environment: "production", CodeID: "bench",
		EnvironmentPath: envpath, Facts: withFacts(agentFacts(b), map[string]any{"cf_role": "web", "cf_root": b.TempDir()}),
	}
	if _, err := e.Compile(b.Context(), req); err != nil {
		b.Fatalf("warm-up compile: %v", err)
	}
	for b.Loop() {
		if _, err := e.Compile(b.Context(), req); err != nil {
			b.Fatalf("compile: %v", err)
		}
	}
}
