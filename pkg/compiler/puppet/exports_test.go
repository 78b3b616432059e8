package puppet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// exportsDefine is the defined type the collection cases collect: a
// collected Cf::Svc is evaluated like any other, into a notify.
const exportsDefine = `define cf::svc (
  Integer $port = 80,
  String $role = 'none',
  Array[String] $aliases = [],
) {
  notify { "svc ${title}": message => "${title}:${port} ${role} ${aliases.join(',')}" }
}
`

// svcExport is a Cf::Svc resource certname exports.
func svcExport(certname, title, tag, params string) compiler.ExportedResource {
	return compiler.ExportedResource{
		Certname: certname, Type: "Cf::Svc", Title: title,
		Tags:       []string{tag, "cf::svc", "cf", "svc", title, "class"},
		Parameters: json.RawMessage(params), File: "/other/site.pp", Line: 3,
	}
}

// otherExports are what the other nodes of the environment export.
var otherExports = []compiler.ExportedResource{
	svcExport("web1.example.test", "web1", "web", `{"port":80,"role":"web","aliases":["www","w1"],"tag":"web"}`),
	svcExport("web2.example.test", "web2", "web", `{"port":8080,"role":"web","tag":"web"}`),
	svcExport("db1.example.test", "db1", "db", `{"port":5432,"role":"db","tag":"DB"}`),
	{Certname: "db1.example.test", Type: "Notify", Title: "db1 notice", Tags: []string{"db", "notify", "class"},
		Parameters: json.RawMessage(`{"message":"from db1"}`)},
}

type collectCase struct {
	name  string
	code  string         // the body of the case's node definition
	facts map[string]any // the node's facts (none when nil)
	extra []compiler.ExportedResource
	want  []string   // Cf::Svc titles in the catalog
	wantC [][]string // per exported collector, in evaluation order: "Type" then the matched certnames
	// wantExports are the node's exports: "Type[title]" -> parameters JSON.
	wantExports map[string]string
	wantReads   []string // besides baselineReads
	wantErr     string   // a compile error containing this
	errAt       bool     // located at the collector
	check       func(t *testing.T, c catalog)
}

var (
	web1, web2, db1 = "web1.example.test", "web2.example.test", "db1.example.test"
	allSvc          = []string{"Cf::Svc", db1, web1, web2}
)

var collectCases = []collectCase{
	{name: "every resource of the type", code: `Cf::Svc <<| |>>`,
		want: []string{"db1", "web1", "web2"}, wantC: [][]string{allSvc},
		check: func(t *testing.T, c catalog) {
			for _, title := range []string{"db1", "web1", "web2"} {
				if r := c.resource("Cf::Svc", title); r == nil || r.Exported {
					t.Errorf("collected Cf::Svc[%s] is still exported", title)
				}
			}
			if r := c.resource("Notify", "svc web1"); r == nil || r.Parameters["message"] != "web1:80 web www,w1" {
				t.Errorf("collected Cf::Svc[web1] was not evaluated with its parameters: %+v", r)
			}
			if c.resource("Notify", "db1 notice") != nil {
				t.Error("a Cf::Svc collector collected a Notify")
			}
		}},
	{name: "tag", code: `Cf::Svc <<| tag == 'web' |>>`,
		want: []string{"web1", "web2"}, wantC: [][]string{{"Cf::Svc", web1, web2}}},
	{name: "tag is case-insensitive", code: `Cf::Svc <<| tag == 'DB' |>>`,
		want: []string{"db1"}, wantC: [][]string{{"Cf::Svc", db1}}},
	{name: "title", code: `Cf::Svc <<| title == 'web2' |>>`,
		want: []string{"web2"}, wantC: [][]string{{"Cf::Svc", web2}}},
	{name: "string parameter", code: `Cf::Svc <<| role == 'db' |>>`,
		want: []string{"db1"}, wantC: [][]string{{"Cf::Svc", db1}}},
	{name: "number parameter", code: `Cf::Svc <<| port == 8080 |>>`,
		want: []string{"web2"}, wantC: [][]string{{"Cf::Svc", web2}}},
	{name: "no coercion between strings and numbers", code: `Cf::Svc <<| port == '8080' |>>`,
		wantC: [][]string{{"Cf::Svc"}}},
	{name: "string parameters compare exactly", code: `Cf::Svc <<| role == 'DB' |>>`,
		wantC: [][]string{{"Cf::Svc"}}},
	{name: "an array parameter matches an element", code: `Cf::Svc <<| aliases == 'www' |>>`,
		want: []string{"web1"}, wantC: [][]string{{"Cf::Svc", web1}}},
	{name: "not equal", code: `Cf::Svc <<| port != 80 |>>`,
		want: []string{"db1", "web2"}, wantC: [][]string{{"Cf::Svc", db1, web2}}},
	{name: "a missing parameter is not equal", code: `Cf::Svc <<| aliases != 'www' |>>`,
		want: []string{"db1", "web2"}, wantC: [][]string{{"Cf::Svc", db1, web2}}},
	{name: "tag not equal", code: `Cf::Svc <<| tag != 'web' |>>`,
		want: []string{"db1"}, wantC: [][]string{{"Cf::Svc", db1}}},
	{name: "and", code: `Cf::Svc <<| role == 'web' and port != 80 |>>`,
		want: []string{"web2"}, wantC: [][]string{{"Cf::Svc", web2}}},
	{name: "or and nested parentheses",
		code: `Cf::Svc <<| (role == 'web' and (port == 80 or title == 'nothing')) or tag == 'db' |>>`,
		want: []string{"db1", "web1"}, wantC: [][]string{{"Cf::Svc", db1, web1}}},
	{name: "nothing matches", code: `Cf::Svc <<| tag == 'nothing' |>>`,
		wantC: [][]string{{"Cf::Svc"}}},
	{name: "query value from a fact is a read; the exported resources are not",
		code: `Cf::Svc <<| tag == $facts['want'] |>>`, facts: map[string]any{"want": "db", "unused": "x"},
		want: []string{"db1"}, wantC: [][]string{{"Cf::Svc", db1}}, wantReads: []string{"value want"}},
	{name: "overrides", code: `Cf::Svc <<| role == 'web' |>> { port => 9000 }`,
		want: []string{"web1", "web2"}, wantC: [][]string{{"Cf::Svc", web1, web2}},
		check: func(t *testing.T, c catalog) {
			if r := c.resource("Notify", "svc web1"); r == nil || r.Parameters["message"] != "web1:9000 web www,w1" {
				t.Errorf("Notify[svc web1] = %+v, want the overridden port", r)
			}
		}},
	{name: "chained", code: "notify { 'first': } -> Cf::Svc <<| title == 'web1' |>> -> notify { 'last': }",
		want: []string{"web1"}, wantC: [][]string{{"Cf::Svc", web1}},
		check: func(t *testing.T, c catalog) {
			if r := c.resource("Notify", "first"); r == nil || !reflect.DeepEqual(r.Parameters["before"], []any{"Cf::Svc[web1]"}) {
				t.Errorf("Notify[first] = %+v, want before Cf::Svc[web1]", r)
			}
			if r := c.resource("Cf::Svc", "web1"); r == nil || !reflect.DeepEqual(r.Parameters["before"], []any{"Notify[last]"}) {
				t.Errorf("Cf::Svc[web1] = %+v, want before Notify[last]", r)
			}
		}},
	{name: "own exports come from the catalog, not the exported list",
		code: "@@cf::svc { 'mine': role => 'self', tag => 'web' }\nCf::Svc <<| tag == 'web' |>>",
		want: []string{"mine", "web1", "web2"}, wantC: [][]string{{"Cf::Svc", web1, web2}},
		// Collected, the defined resource was evaluated: its exported
		// parameters include the defaults, as PuppetDB would store them.
		wantExports: map[string]string{"Cf::Svc[mine]": `{"role":"self","tag":"web","port":80,"aliases":[]}`},
		check: func(t *testing.T, c catalog) {
			// As with PuppetDB: a node's own exported resources it
			// collects stay marked exported.
			if r := c.resource("Cf::Svc", "mine"); r == nil || !r.Exported {
				t.Errorf("Cf::Svc[mine] = %+v, want exported", r)
			}
		}},
	{name: "exports are captured though the agent's catalog leaves them out",
		code: "@@cf::svc { 'e1': port => 81, role => 'x', tag => 'Web' }\n" +
			"@@notify { 'secret': message => Sensitive('s3cret') }\n@cf::svc { 'virtual': }\nnotify { 'real': }",
		wantExports: map[string]string{
			"Cf::Svc[e1]":    `{"port":81,"role":"x","tag":"Web"}`,
			"Notify[secret]": `{"message":{"__ptype":"Sensitive","__pvalue":"s3cret"}}`,
		},
		check: func(t *testing.T, c catalog) {
			if c.resource("Notify", "secret") != nil || c.resource("Notify", "real") == nil {
				t.Error("exported resources reached the agent's catalog")
			}
		}},
	{name: "two collectors", code: "Cf::Svc <<| tag == 'web' |>>\nNotify <<| |>>",
		want: []string{"web1", "web2"}, wantC: [][]string{{"Cf::Svc", web1, web2}, {"Notify", db1}},
		check: func(t *testing.T, c catalog) {
			if r := c.resource("Notify", "db1 notice"); r == nil || r.Parameters["message"] != "from db1" {
				t.Errorf("Notify[db1 notice] = %+v", r)
			}
		}},
	{name: "rich data parameters: a Sensitive stays sensitive", code: `Notify <<| title == 'rich' |>>`,
		extra: []compiler.ExportedResource{{Certname: db1, Type: "Notify", Title: "rich", Tags: []string{"notify"},
			Parameters: json.RawMessage(`{"message":{"__ptype":"Sensitive","__pvalue":"s3cret"}}`)}},
		wantC: [][]string{{"Notify", db1}},
		check: func(t *testing.T, c catalog) {
			r := c.resource("Notify", "rich")
			if r == nil || r.Parameters["message"] != "s3cret" || !slices.Equal(r.Sensitive, []string{"message"}) {
				t.Errorf("Notify[rich] = %+v, want a sensitive message", r)
			}
		}},
	{name: "two nodes export one resource", code: `Cf::Svc <<| title == 'dup' |>>`,
		extra:   []compiler.ExportedResource{svcExport(web1, "dup", "web", `{}`), svcExport(web2, "dup", "web", `{}`)},
		wantErr: "A duplicate resource was found while collecting exported resources, with the type and title Cf::Svc[dup]"},
	{name: "refused: a parameter compared with undef", code: "$u = undef\nCf::Svc <<| port == $u |>>",
		wantErr: "Exported resource query: parameter port cannot be compared with undef", errAt: true},
	{name: "refused: a title compared with a number", code: `Cf::Svc <<| title == 5 |>>`,
		wantErr: "Exported resource query: title must be compared with a string, not 5", errAt: true},
	{name: "refused: a tag compared with a list", code: "$t = ['web']\nCf::Svc <<| tag == $t |>>",
		wantErr: `Exported resource query: a tag must be compared with a string, not ["web"]`, errAt: true},
}

// TestExportedCollectors compiles exported collectors against the other
// nodes' exports, as the farm hands them to a compile in place of PuppetDB.
func TestExportedCollectors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	envpath := t.TempDir()
	var site strings.Builder
	for i, tc := range collectCases {
		fmt.Fprintf(&site, "node 'case%d.example.test' {\n%s\n}\n", i, tc.code)
	}
	writeTree(t, filepath.Join(envpath, "production"), map[string]string{
		"manifests/site.pp":           site.String(),
		"modules/cf/manifests/svc.pp": exportsDefine,
	})
	sitePath := filepath.Join(envpath, "production/manifests/site.pp")
	for i, tc := range collectCases {
		t.Run(tc.name, func(t *testing.T) {
			certname := fmt.Sprintf("case%d.example.test", i)
			exported := slices.Concat(otherExports, tc.extra,
				// The node's own resource in the list: never collected
				// through it (the farm does not send it; the worker
				// ignores it as PuppetDB does).
				[]compiler.ExportedResource{svcExport(certname, "ghost", "web", `{"role":"ghost"}`)})
			res, err := e.Compile(t.Context(), compiler.Request{
				Certname: certname, Environment: "production", CodeID: "exports",
				EnvironmentPath: envpath, Facts: tc.facts, Exported: exported,
			})
			if tc.wantErr != "" {
				var ce *compiler.CompileError
				if !errors.As(err, &ce) || !strings.Contains(ce.Message, tc.wantErr) {
					t.Fatalf("err = %v, want a compile error containing %q", err, tc.wantErr)
				}
				if tc.errAt && (ce.File != sitePath || ce.Line <= 0 || ce.Column <= 0) {
					t.Errorf("error at %s:%d:%d, want at the collector in %s", ce.File, ce.Line, ce.Column, sitePath)
				}
				return
			}
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			c := parseCatalog(t, res.Catalog)
			var got []string
			for _, r := range c.Resources {
				if r.Type == "Cf::Svc" {
					got = append(got, r.Title)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Cf::Svc in the catalog = %q, want %q", got, tc.want)
			}
			var collects [][]string
			for _, col := range res.Collects {
				collects = append(collects, append([]string{col.Type}, col.Matched...))
			}
			if !reflect.DeepEqual(collects, tc.wantC) {
				t.Errorf("collects = %q, want %q", collects, tc.wantC)
			}
			checkExports(t, res.Exports, certname, sitePath, tc.wantExports)
			if res.Reads == nil {
				t.Fatal("no reads recorded")
			}
			var reads []string
			for _, r := range res.Reads.Reads {
				reads = append(reads, describe(r))
			}
			wantReads := slices.Sorted(slices.Values(slices.Concat(baselineReads, tc.wantReads)))
			if slices.Sort(reads); !slices.Equal(reads, wantReads) {
				t.Errorf("reads = %q, want %q", reads, wantReads)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// checkExports compares a compile's exports with want ("Type[title]" ->
// parameters JSON): certname, file and line filled, tags lower-case and
// including the explicit tag.
func checkExports(t *testing.T, got []compiler.ExportedResource, certname, file string, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("exports = %+v, want %d", got, len(want))
	}
	for _, x := range got {
		ref := x.Type + "[" + x.Title + "]"
		params, ok := want[ref]
		if !ok {
			t.Errorf("unexpected export %s", ref)
			continue
		}
		var gotP, wantP any
		if err := json.Unmarshal(x.Parameters, &gotP); err != nil {
			t.Errorf("export %s parameters %s: %v", ref, x.Parameters, err)
		}
		if err := json.Unmarshal([]byte(params), &wantP); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotP, wantP) {
			t.Errorf("export %s parameters = %s, want %s", ref, x.Parameters, params)
		}
		if x.Certname != certname || x.File != file || x.Line <= 0 {
			t.Errorf("export %s = certname %q file %q line %d, want %q %q", ref, x.Certname, x.File, x.Line, certname, file)
		}
		if p, _ := gotP.(map[string]any); p != nil && p["tag"] != nil {
			if tag := strings.ToLower(p["tag"].(string)); !slices.Contains(x.Tags, tag) {
				t.Errorf("export %s tags = %q, want %q among them", ref, x.Tags, tag)
			}
		}
	}
}

// TestExportedRequestInvalid checks that a malformed exported list is the
// request's fault.
func TestExportedRequestInvalid(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	_, err := e.Compile(t.Context(), compiler.Request{
		Certname: "n1.example.test", Environment: "production", CodeID: "exports",
		EnvironmentPath: absPath(t, "testdata/envs/behaviours"),
		Exported:        []compiler.ExportedResource{{Certname: "n2.example.test", Type: "Host"}},
	})
	if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "exported[0].title must be a non-empty string") {
		t.Errorf("err = %v, want the worker to reject the untitled resource", err)
	}
}

// TestExampleExports compiles the example environment's exported host
// entries and their collector, then applies the collector's catalog twice
// with Puppet's own agent code (puppet apply --catalog): the host entries
// land in the node's hosts file under cf_root, and the second run changes
// nothing.
func TestExampleExports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	envpath := snapshot(t, exampleEnv, "production")
	base := agentFacts(t)
	root := filepath.Join(t.TempDir(), "root")
	compile := func(certname string, facts map[string]any, exported []compiler.ExportedResource) (compiler.Result, catalog) {
		t.Helper()
		res, err := e.Compile(t.Context(), compiler.Request{
			Certname: certname, Environment: "production", CodeID: "example-exports",
			EnvironmentPath: envpath, Facts: withFacts(base, facts), Exported: exported,
		})
		if err != nil {
			t.Fatalf("compile %s: %v", certname, err)
		}
		return res, parseCatalog(t, res.Catalog)
	}
	hosts := func(c catalog) (titles []string) {
		for _, r := range c.Resources {
			if r.Type == "Host" {
				titles = append(titles, r.Title)
			}
		}
		slices.Sort(titles)
		return titles
	}

	// Without the facts: nothing exported or collected.
	res, c := compile("plain.example.test", map[string]any{"cf_root": root, "cf_collect_hosts": "false"}, nil)
	if len(res.Exports) != 0 || len(res.Collects) != 0 || len(hosts(c)) != 0 || c.resource("File", root+"/hosts") != nil {
		t.Errorf("a node without the facts exports %v, collects %v, has hosts %v", res.Exports, res.Collects, hosts(c))
	}

	// The exporter: its host entry is exported, not in its own catalog.
	web, c := compile(web1, map[string]any{"cf_root": root, "cf_export_ip": "192.0.2.10"}, nil)
	if len(web.Exports) != 1 || len(web.Collects) != 0 || len(hosts(c)) != 0 {
		t.Fatalf("exporter: exports %+v, collects %+v, hosts %v", web.Exports, web.Collects, hosts(c))
	}
	if x := web.Exports[0]; x.Certname != web1 || x.Type != "Host" || x.Title != web1 ||
		string(x.Parameters) != `{"ip":"192.0.2.10","tag":"cf_demo"}` || !slices.Contains(x.Tags, "cf_demo") {
		t.Errorf("exporter's export = %+v", x)
	}

	// The collector gets the exporter's entry, its own, and not a host
	// exported without the demo's tag.
	other := compiler.ExportedResource{Certname: "other.example.test", Type: "Host", Title: "other.example.test",
		Tags: []string{"host", "other"}, Parameters: json.RawMessage(`{"ip":"192.0.2.99"}`)}
	col, c := compile("demo1.example.test", map[string]any{"cf_root": root, "cf_collect_hosts": "true",
		"cf_export_ip": "192.0.2.20"}, append(web.Exports, other))
	if got, want := hosts(c), []string{"demo1.example.test", web1}; !slices.Equal(got, want) {
		t.Errorf("collector's hosts = %q, want %q", got, want)
	}
	if want := []compiler.Collect{{Type: "Host", Matched: []string{web1}}}; !reflect.DeepEqual(col.Collects, want) {
		t.Errorf("collects = %+v, want %+v", col.Collects, want)
	}
	for title, ip := range map[string]string{web1: "192.0.2.10", "demo1.example.test": "192.0.2.20"} {
		r := c.resource("Host", title)
		if r == nil || r.Parameters["ip"] != ip || r.Parameters["target"] != root+"/hosts" || r.Exported != (title != web1) {
			t.Errorf("Host[%s] = %+v, want ip %s, target %s/hosts", title, r, ip, root)
		}
	}
	f := c.resource("File", root+"/hosts")
	if f == nil || !reflect.DeepEqual(f.Parameters["before"], []any{"Host[demo1.example.test]", "Host[" + web1 + "]"}) {
		t.Errorf("File[%s/hosts] = %+v, want it before both hosts", root, f)
	}

	applyHosts(t, col.Catalog, envpath, root)
}

// applyHosts applies the host entries of a compiled example catalog (and
// the files they need) twice with puppet apply --catalog, as an agent
// applies what the farm serves.
func applyHosts(t *testing.T, body []byte, envpath, root string) {
	t.Helper()
	puppet, err := exec.LookPath("puppet")
	if err != nil {
		t.Fatalf("puppet not found: %v (%s)", err, installHint)
	}
	// Only the containers, the host entries and their files: the rest
	// needs a file server for its puppet:/// sources.
	var cat map[string]any
	if err := json.Unmarshal(body, &cat); err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	var resources []any
	for _, r := range cat["resources"].([]any) {
		m := r.(map[string]any)
		typ, title := m["type"].(string), m["title"].(string)
		if typ == "Stage" || typ == "Class" || typ == "Node" || typ == "Host" ||
			(typ == "File" && (title == root || title == root+"/hosts")) {
			kept[typ+"["+title+"]"] = true
			resources = append(resources, r)
		}
	}
	var edges []any
	for _, ed := range cat["edges"].([]any) {
		m := ed.(map[string]any)
		if kept[m["source"].(string)] && kept[m["target"].(string)] {
			edges = append(edges, ed)
		}
	}
	cat["resources"], cat["edges"] = resources, edges
	b, err := json.Marshal(cat)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	catFile := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(catFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	summary := filepath.Join(dir, "public/last_run_summary.yaml")
	changes := regexp.MustCompile(`(?m)^changes:\n\s+total: (\d+)`)
	apply := func() string {
		cmd := exec.CommandContext(t.Context(), puppet, "apply", "--color=false",
			"--confdir", filepath.Join(dir, "conf"), "--vardir", filepath.Join(dir, "var"),
			"--codedir", filepath.Join(dir, "code"), "--logdir", filepath.Join(dir, "log"),
			"--rundir", filepath.Join(dir, "run"), "--publicdir", filepath.Join(dir, "public"),
			"--environmentpath", envpath, "--environment", "production", "--catalog", catFile)
		out, err := cmd.CombinedOutput()
		t.Logf("puppet apply --catalog\n%s", out)
		if err != nil {
			t.Fatalf("puppet apply: %v", err)
		}
		s, err := os.ReadFile(summary)
		if err != nil {
			t.Fatal(err)
		}
		m := changes.FindSubmatch(s)
		if m == nil {
			t.Fatalf("no change count in %s:\n%s", summary, s)
		}
		return string(m[1])
	}
	if n := apply(); n == "0" {
		t.Error("first apply changed nothing")
	}
	if n := apply(); n != "0" {
		t.Errorf("second apply made %s changes, want none", n)
	}
	b, err = os.ReadFile(filepath.Join(root, "hosts"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"192.0.2.10\tweb1.example.test\n", "192.0.2.20\tdemo1.example.test\n"} {
		if !strings.Contains(string(b), line) {
			t.Errorf("hosts file lacks %q:\n%s", line, b)
		}
	}
}
