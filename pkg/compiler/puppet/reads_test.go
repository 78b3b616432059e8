package puppet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/facts"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// readFacts are the facts the read cases compile with; numbers are kept
// exact (1.0 is a Float, 2 an Integer).
const readFacts = `{
  "os": {"family": "Debian", "name": "Debian", "architecture": "amd64",
         "release": {"major": "12", "full": "12.11"}},
  "osfamily": "Debian",
  "kernel": "Linux",
  "kernelrelease": "6.1.0-18-amd64",
  "networking": {"fqdn": "n1.example.test", "hostname": "n1", "ip": "10.0.0.1"},
  "processors": {"count": 2},
  "load_averages": {"1m": 0.25, "5m": 1.5, "15m": 1.0},
  "memory": {"system": {"total": "1.00 GiB", "available": "512.00 MiB"}},
  "is_virtual": true,
  "empty": {}
}`

func decodeFacts(t testing.TB, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// describe renders a read for comparison: "value os.family",
// "value os.nosuch (missing)", "hash os=true", "present foo=false",
// "keys os"; the whole facts hash is "<facts>".
func describe(r facts.Read) string {
	p := strings.Join(r.Path, ".")
	if p == "" {
		p = "<facts>"
	}
	switch {
	case r.Missing:
		return fmt.Sprintf("%s %s (missing)", r.Kind, p)
	case r.Kind == facts.ReadHash || r.Kind == facts.ReadPresent:
		return fmt.Sprintf("%s %s=%s", r.Kind, p, r.Value)
	default:
		return fmt.Sprintf("%s %s", r.Kind, p)
	}
}

// baselineReads are read by every compile: evaluating the main class sets
// $name and $title at top scope, which fails if facts of those names exist.
var baselineReads = []string{"present name=false", "present title=false"}

type readCase struct {
	name   string
	params string            // the class's parameter list, if any
	code   string            // the body of class cases::<name>
	files  map[string]string // more files, relative to the environment
	want   []string          // the reads besides baselineReads, as describe renders them
	always string            // when set, the compile must be marked always-recompile, Why containing this
	clock  string            // when set, the compile must be marked as reading the clock, ClockWhy containing this
	hook   string            // the recording hook that makes the difference, if one is singled out
}

// readCases cover each way a compile can read facts.
var readCases = []readCase{
	{name: "nothing", code: `notify { 'x': }`},
	{name: "trusted and server facts are not facts", code: `notify { 'x': message => "${trusted['certname']} ${server_facts['serverversion']} ${environment}" }`},

	// $facts and the hashes in it.
	{name: "facts index", code: `notify { 'x': message => $facts['os']['family'] }`, want: []string{"value os.family"}, hook: "facts"},
	{name: "nested leaf", code: `notify { 'x': message => $facts['memory']['system']['total'] }`, want: []string{"value memory.system.total"}},
	{name: "missing fact", code: `notify { 'x': message => "${facts['nosuch']}" }`, want: []string{"value nosuch (missing)"}},
	{name: "missing nested fact", code: `notify { 'x': message => "${facts['os']['nosuch']}" }`, want: []string{"hash os=true", "value os.nosuch (missing)"}},
	// Iterating reveals the key set and every value, but a hash value is a
	// recording hash itself: only what the block reads of it is read.
	{name: "iterating facts", code: `$facts.each |$k, $v| { }`, want: []string{"keys <facts>", "value is_virtual", "value kernel",
		"value kernelrelease", "value osfamily", "hash empty=true", "hash load_averages=true", "hash memory=true",
		"hash networking=true", "hash os=true", "hash processors=true"}, hook: "iterate"},
	{name: "iterating a hash", code: `$facts['os'].each |$k, $v| { }`,
		want: []string{"keys os", "value os.architecture", "value os.family", "value os.name", "hash os.release=true"}},
	{name: "iterating reads only what the block reads of hash values",
		code: `$facts['memory'].each |$k, $v| { notify { $k: message => $v['total'] } }
notify { 'x': message => $facts['load_averages'].map |$k, $v| { "${k}=${v}" } }`,
		want: []string{"keys memory", "value memory.system.total", "keys load_averages", "value load_averages.1m", "value load_averages.5m", "value load_averages.15m"}, hook: "iterate"},
	{name: "values and filter", code: `notify { 'x': message => join(values($facts['os']['release']), ' ') }
$big = $facts['memory'].filter |$k, $v| { $v['total'] =~ /GiB/ }
notify { 'y': message => keys($big) }`,
		want: []string{"keys os.release", "value os.release.full", "value os.release.major", "keys memory", "value memory.system.total"}, hook: "iterate"},
	{name: "comparing the facts with a hash of another size", code: `if $facts == {} { notify { 'x': } }`, want: []string{"keys <facts>"}},
	{name: "serialising the whole facts", code: `notify { 'x': message => inline_template("<%= @facts.to_s.size > 0 %>") }`, want: []string{"value <facts>"}},
	{name: "keys", code: `notify { 'x': message => join(keys($facts['os']), ',') }`, want: []string{"keys os"}},
	{name: "size", code: `notify { 'x': message => "${length($facts['networking'])}" }`, want: []string{"keys networking"}},
	{name: "in operator", code: `if 'family' in $facts['os'] { notify { 'x': } }`, want: []string{"keys os"}},
	{name: "dig", code: `notify { 'x': message => "${$facts.dig('os', 'release', 'major')} ${dig($facts, 'os', 'nosuch', 'x')}" }`,
		want: []string{"value os.release.major", "value os.nosuch (missing)"}},
	{name: "getvar", code: `notify { 'x': message => getvar('facts.os.name') }`, want: []string{"value os.name"}},
	{name: "hash truthiness", code: `if $facts['os'] { notify { 'x': } }`, want: []string{"hash os=true"}},
	{name: "hash type match", code: `if $facts['os'] =~ Hash and $facts['networking'] =~ Hash[String, String] { notify { 'x': } }`,
		want: []string{"keys os", "keys networking", "value networking.fqdn", "value networking.hostname", "value networking.ip"}, hook: "facts"},
	{name: "case", code: `case $facts['kernel'] { 'Linux': { notify { 'x': } } default: {} }`, want: []string{"value kernel"}},
	{name: "integer and float", code: `notify { 'x': message => "${facts['processors']['count'] + $facts['load_averages']['1m']} ${facts['load_averages']['15m']}" }`,
		want: []string{"value processors.count", "value load_averages.1m", "value load_averages.15m"}},
	// A recording hash is still an instance_of?(Hash): the catalog is the
	// same with the facts hook off (Puppet's type system and string
	// formatting test exactly that).
	{name: "interpolated hash", code: `notify { 'x': message => "${facts['os']['release']}" }`,
		want: []string{"keys os.release", "value os.release.full", "value os.release.major"}, hook: "facts"},
	// Class parameters are in the catalog: a fact hash given to one is read
	// whole when the catalog is rendered.
	{name: "hash-typed class parameter", params: `Hash $os = $facts['os'],
  Struct[{family => String, name => String, architecture => String, release => Hash, Optional[nosuch] => Any}] $s = $facts['os']`,
		code: `notify { 'x': message => "${os['family']} ${s['name']}" }`, want: []string{"keys os", "keys os.release", "value os.architecture",
			"value os.family", "value os.name", "value os.nosuch (missing)", "value os.release.full", "value os.release.major"}, hook: "facts"},
	{name: "struct type match", code: `if $facts['os'] =~ Struct[{family => String, name => String, architecture => String, release => Hash, Optional[nosuch] => Any}] { notify { 'x': } }`,
		want: []string{"keys os", "keys os.release", "value os.architecture", "value os.family", "value os.name", "value os.nosuch (missing)"}, hook: "facts"},
	{name: "hash in a resource parameter", code: `notify { 'x': message => $facts['os']['release'] }`,
		want: []string{"keys os.release", "value os.release.full", "value os.release.major"}},
	{name: "hash plus fact hash", code: `$m = { 'a' => 'b' } + $facts['os']['release']
notify { 'x': message => $m['a'] }`, want: []string{"value os.release"}},
	{name: "hash equals fact hash", code: `if { 'major' => '12', 'full' => '12.11' } == $facts['os']['release'] { notify { 'x': } }`,
		want: []string{"keys os.release", "value os.release.full", "value os.release.major"}},
	{name: "a value read covers the rest", code: `notify { 'y': message => inline_template("<%= @facts['os'].to_s.size > 0 %>") }
notify { 'x': message => "${facts['os']['family']} ${keys($facts['os'])} ${facts['os']['nosuch']}" }`, want: []string{"value os"}},
	{name: "fqdn_rand", code: `notify { 'x': message => "${fqdn_rand(100)}" }`, want: []string{"value networking.fqdn"}},

	// Top-scope variables.
	{name: "qualified top-scope variable", code: `notify { 'x': message => $::osfamily }`, want: []string{"value osfamily"}, hook: "qualified"},
	{name: "unqualified top-scope variable", code: `notify { 'x': message => $osfamily }`, want: []string{"value osfamily"}, hook: "topscope"},
	{name: "top-scope hash", code: `notify { 'x': message => $::os['name'] }`, want: []string{"value os.name"}},
	{name: "missing top-scope variables", code: `notify { 'x': message => "${::nosuch} ${nosuch2}" }`,
		want: []string{"value nosuch (missing)", "value nosuch2 (missing)"}},
	{name: "local variable shadows a fact", code: `$kernel = 'mine'
notify { 'x': message => $kernel }`},
	{name: "defined", code: `notify { 'x': message => "${[defined('$foo'), defined('$::osfamily'), defined('$is_virtual')]}" }`,
		want: []string{"present foo=false", "present is_virtual=true", "present osfamily=true"}, hook: "topscope"},

	// ERB templates.
	{name: "erb facts", code: `notify { 'x': message => template('cases/facts.erb') }`,
		files: map[string]string{"modules/cases/templates/facts.erb": `<%= @facts['networking']['fqdn'] %>`},
		want:  []string{"value networking.fqdn"}},
	{name: "erb top-scope variables", code: `notify { 'x': message => template('cases/top.erb') }`,
		files: map[string]string{"modules/cases/templates/top.erb": "<%= @osfamily %> <% if @nosuch %>x<% end %> <%= @os['name'] %>"},
		want:  []string{"value nosuch (missing)", "value os.name", "value osfamily"}, hook: "erb"},
	{name: "erb local variable shadows a fact", params: `String $kernel = 'mine'`, code: `notify { 'x': message => template('cases/local.erb') }`,
		files: map[string]string{"modules/cases/templates/local.erb": `<%= @kernel %>`}},
	{name: "erb in a parameter default", params: `String $a = inline_template('<%= @kernel %>'), String $kernel = 'mine'`,
		code: `notify { 'x': message => "${a} ${kernel}" }`, want: []string{"value kernel"}},
	{name: "erb scope lookups", code: `notify { 'x': message => inline_template("<%= scope['::kernelrelease'] %> <%= scope.lookupvar('kernel') %>") }`,
		want: []string{"value kernel", "value kernelrelease"}},
	// scope.to_hash (older templates, puppet-logrotate's rule) reads only
	// the top-scope variables looked up in it.
	{name: "erb scope.to_hash", code: `notify { 'x': message => inline_template("<%= scope.to_hash['osfamily'] %> <%= scope.to_hash.has_key?('nosuch') %> <%= scope.to_hash['os']['family'] %> <%= scope.to_hash.fetch('kernel', 'x') %>") }`,
		want: []string{"present nosuch=false", "value os.family", "value osfamily", "value kernel"}, hook: "tohash"},
	{name: "erb scope.to_hash of a local variable", params: `String $kernel = 'mine', Optional[String] $unset = undef`,
		code: `notify { 'x': message => inline_template("<%= scope.to_hash['kernel'] %> <%= scope.to_hash['unset'] %>") }`,
		want: []string{"value unset (missing)"}},
	{name: "erb scope.to_hash keys", code: `notify { 'x': message => inline_template("<%= scope.to_hash.keys.size > 0 %>") }`,
		want: []string{"keys <facts>"}, hook: "tohash"},
	{name: "erb scope.to_hash iterated", code: `notify { 'x': message => inline_template("<%= scope.to_hash.select { |k, v| k == 'kernel' }.values %>") }`,
		want: []string{"value <facts>"}},
	{name: "4.x function reads the closure scope", code: `notify { 'x': message => cases_scope() }`,
		files: map[string]string{"modules/cases/lib/puppet/functions/cases_scope.rb": `Puppet::Functions.create_function(:cases_scope, Puppet::Functions::InternalFunction) do
  dispatch :read do
    scope_param
  end

  def read(scope)
    "#{scope['facts']['os']['family']} #{scope.to_hash['kernel']} #{scope.lookupvar('::osfamily')}"
  end
end
`},
		want: []string{"value os.family", "value kernel", "value osfamily"}, hook: "tohash"},
	{name: "erb dynamic access", code: `notify { 'x': message => inline_template("<%= instance_variable_get('@kernel') %>") }`,
		want: []string{"value <facts>"}},
	{name: "erb clock", code: `notify { 'x': message => inline_template("<%= Time.now.year > 2000 %>") }`, clock: "Time"},
	{name: "erb random", code: `notify { 'x': message => inline_template("<%= Time.now.year > 2000 && rand(2) < 3 %>") }`, always: "rand()"},

	// EPP templates.
	{name: "epp", code: `notify { 'x': message => epp('cases/facts.epp') }`,
		files: map[string]string{"modules/cases/templates/facts.epp": `<%= $facts['kernel'] %> <%= $::kernelrelease %> <%= $osfamily %>`},
		want:  []string{"value kernel", "value kernelrelease", "value osfamily"}},
	{name: "inline epp", code: `notify { 'x': message => inline_epp('<%= $kernel %>') }`, want: []string{"value kernel"}},

	// Hiera: interpolation in hierarchy paths and values, automatic
	// parameter lookup, lookup().
	{name: "hiera", code: `include hieracase
notify { 'x': message => "${hieracase::msg} ${lookup('hieracase::other')}" }`,
		files: map[string]string{
			"modules/hieracase/manifests/init.pp": `class hieracase (String $msg) { }`,
			"modules/hieracase/hiera.yaml": "---\nversion: 5\nhierarchy:\n" +
				"  - name: os\n    path: \"os/%{facts.os.family}.yaml\"\n" +
				"  - name: common\n    path: common.yaml\n",
			"modules/hieracase/data/os/Debian.yaml": "---\nhieracase::msg: \"on %{facts.networking.hostname} %{::kernel}\"\n",
			"modules/hieracase/data/common.yaml":    "---\nhieracase::other: \"%{facts.os.name} %{nosuch}\"\n",
		},
		want: []string{"value kernel", "value networking.hostname", "value nosuch (missing)", "value os.family", "value os.name"}},
	{name: "hiera interpolates a whole hash", code: `include hierahash
notify { 'x': message => $hierahash::msg }`,
		files: map[string]string{
			"modules/hierahash/manifests/init.pp": `class hierahash (String $msg) { }`,
			"modules/hierahash/hiera.yaml":        "---\nversion: 5\nhierarchy:\n  - name: common\n    path: common.yaml\n",
			"modules/hierahash/data/common.yaml":  "---\nhierahash::msg: \"release %{facts.os.release}\"\n",
		},
		want: []string{"keys os.release", "value os.release.full", "value os.release.major"}},

	// 3.x functions get deep copies of their arguments.
	{name: "3.x function argument", code: `notify { 'x': message => cases_pick($facts['os'], 'family') }`,
		files: map[string]string{"modules/cases/lib/puppet/parser/functions/cases_pick.rb": `Puppet::Parser::Functions.newfunction(:cases_pick, type: :rvalue) do |args|
  args[0][args[1]]
end
`},
		want: []string{"value os.family"}, hook: "convert"},
	{name: "3.x function changes its argument", code: `notify { 'x': message => "${cases_grow($facts['networking'])}" }`,
		files: map[string]string{"modules/cases/lib/puppet/parser/functions/cases_grow.rb": `Puppet::Parser::Functions.newfunction(:cases_grow, type: :rvalue) do |args|
  h = args[0]
  h['extra'] = 1
  h['extra'] + h.fetch('hostname').size
end
`},
		want: []string{"value networking"}},
	{name: "ruby function compares a fact hash", code: `notify { 'x': message => "${cases::same($facts['os']['release'])}" }`,
		files: map[string]string{"modules/cases/lib/puppet/functions/cases/same.rb": `Puppet::Functions.create_function(:'cases::same') do
  def same(h)
    { 'major' => '12', 'full' => '12.11' } == h
  end
end
`},
		want: []string{"value os.release"}, hook: "hashargs"},

	{name: "ruby function reads node parameters", code: `notify { 'x': message => cases::param('kernel') }`,
		files: map[string]string{"modules/cases/lib/puppet/functions/cases/param.rb": `Puppet::Functions.create_function(:'cases::param', Puppet::Functions::InternalFunction) do
  dispatch :param do
    scope_param
    param 'String', :name
  end
  def param(scope, name)
    scope.compiler.node.parameters[name]
  end
end
`},
		want: []string{"value kernel"}},

	// Inputs other than facts.
	{name: "generate", code: `notify { 'x': message => generate('/bin/echo', 'hi') }`, always: "generate()", hook: "nondet"},
	{name: "Timestamp.new", code: `notify { 'x': message => "${Timestamp.new() > Timestamp('2000-01-01T00:00:00Z')}" }`, clock: "Timestamp.now", hook: "nondet"},
	{name: "legacy strftime", code: `notify { 'x': message => strftime('%Y') }`, clock: "strftime"},
	{name: "strftime of a given time", code: `notify { 'x': message => strftime(Timestamp('2000-01-01T00:00:00Z'), '%Y') }`},
}

// className turns a case name into a class name.
func className(name string) string {
	return "c_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '_'
	}, name)
}

// readCasesEnv writes one environment with a class cases::c_<name> per
// case, included by node <name>.example.test.
func readCasesEnv(t testing.TB) string {
	t.Helper()
	envpath := t.TempDir()
	files := map[string]string{}
	var site strings.Builder
	for _, tc := range readCases {
		cls := className(tc.name)
		params := ""
		if tc.params != "" {
			params = " (" + tc.params + ")"
		}
		files["modules/cases/manifests/"+cls+".pp"] = fmt.Sprintf("class cases::%s%s {\n%s\n}\n", cls, params, tc.code)
		fmt.Fprintf(&site, "node '%s' { include cases::%s }\n", caseCert(tc.name), cls)
		for name, content := range tc.files {
			files[name] = content
		}
	}
	site.WriteString("node default { }\n")
	files["manifests/site.pp"] = site.String()
	writeTree(t, filepath.Join(envpath, "production"), files)
	return envpath
}

func caseCert(name string) string {
	return strings.ReplaceAll(className(name), "_", "-") + ".example.test"
}

// TestRecordReads compiles one small class per case, each on its own node
// of one environment, and checks the reads recorded; a case that names the
// hook responsible is compiled once more with that hook off, and must then
// record something else.
func TestRecordReads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := newEngine(t, Options{Workers: 2})
	envpath := readCasesEnv(t)
	values := decodeFacts(t, readFacts)

	sem := make(chan struct{}, 2)
	t.Run("cases", func(t *testing.T) {
		for _, tc := range readCases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				req := compiler.Request{
					Certname: caseCert(tc.name), Environment: "production",
					CodeID: "reads", EnvironmentPath: envpath, Facts: values,
				}
				res, err := e.Compile(t.Context(), req)
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				if res.Reads == nil {
					t.Fatal("no reads recorded")
				}
				var got []string
				for _, r := range res.Reads.Reads {
					got = append(got, describe(r))
					// The value the worker reported is what facts.Observe
					// computes from the request's facts (Compile returns the
					// latter; readMismatches counts disagreements).
					want, err := facts.Observe(values, r.Path, r.Kind)
					if err != nil {
						t.Fatal(err)
					}
					if want.Missing != r.Missing || !bytes.Equal(want.Value, r.Value) {
						t.Errorf("read %s: got %s (missing %v), facts.Observe gives %s (missing %v)", describe(r), r.Value, r.Missing, want.Value, want.Missing)
					}
				}
				want := tc.want
				if !slices.Contains(want, "value <facts>") { // which covers every other read
					want = slices.Concat(baselineReads, want)
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("reads\n got: %q\nwant: %q", got, want)
				}
				if changed, err := facts.Changed(res.Reads.Reads, values); err != nil || changed {
					t.Errorf("facts.Changed(reads, same facts) = %v, %v", changed, err)
				}
				switch {
				case tc.always == "" && res.Reads.AlwaysRecompile:
					t.Errorf("marked always-recompile: %s", res.Reads.Why)
				case tc.always != "" && (!res.Reads.AlwaysRecompile || !strings.Contains(res.Reads.Why, tc.always)):
					t.Errorf("always_recompile = %v, why %q; want it, mentioning %q", res.Reads.AlwaysRecompile, res.Reads.Why, tc.always)
				}
				switch {
				case tc.clock == "" && res.Reads.Clock:
					t.Errorf("marked as reading the clock: %s", res.Reads.ClockWhy)
				case tc.clock != "" && (!res.Reads.Clock || !strings.Contains(res.Reads.ClockWhy, tc.clock)):
					t.Errorf("clock = %v, why %q; want it, mentioning %q", res.Reads.Clock, res.Reads.ClockWhy, tc.clock)
				}
				if tc.hook == "" {
					return
				}
				off, err := e.compile(t.Context(), req, []string{tc.hook})
				if err != nil {
					t.Fatalf("compile without hook %s: %v", tc.hook, err)
				}
				if !bytes.Equal(blankVolatile(off.Catalog), blankVolatile(res.Catalog)) {
					t.Errorf("switching hook %s off changed the catalog %s", tc.hook, firstDiff(blankVolatile(res.Catalog), blankVolatile(off.Catalog)))
				}
				var without []string
				for _, r := range off.Reads.Reads {
					without = append(without, describe(r))
				}
				slices.Sort(without)
				if slices.Equal(without, got) && off.Reads.AlwaysRecompile == res.Reads.AlwaysRecompile && off.Reads.Clock == res.Reads.Clock {
					t.Errorf("hook %s made no difference: %q", tc.hook, got)
				}
			})
		}
	})
	if n := e.readMismatches.Load(); n != 0 {
		t.Errorf("the worker reported %d read values that differ from facts.Observe over the request's facts", n)
	}
}

// TestWorkerReadValues talks to a worker directly and checks the values it
// reports against facts.Observe over the same facts, byte for byte (bar
// Go's escaping of <, > and &): integers stay integers, floats floats, and
// hash keys come sorted. Compile recomputes the values with facts.Observe;
// this checks that the worker already agrees.
func TestWorkerReadValues(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	dir := t.TempDir()
	script, err := writeWorker(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := startProcess(t.Context(), DefaultRuby, script, dir, nil, startTimeout, testLogger())
	if err != nil {
		t.Fatalf("start worker: %v (%s)", err, installHint)
	}
	defer p.stop(stopGrace)
	if !p.ready.Recording {
		t.Fatalf("worker does not record: %+v", p.ready)
	}

	cases := []struct {
		name, certname, envpath string
		facts                   map[string]any
		wantReads               int // at least
	}{
		{"numbers", caseCert("integer and float"), readCasesEnv(t), decodeFacts(t, readFacts), 3},
		{"whole facts", caseCert("whole facts"), readCasesEnv(t), decodeFacts(t, readFacts), 1},
		{"real modules and an agent's facts", mutationCert, mutationEnv(t), agentFacts(t), 20},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			factsJSON, err := encodeFacts(tc.facts)
			if err != nil {
				t.Fatal(err)
			}
			line, _ := json.Marshal(request{ID: uint64(i + 1), Certname: tc.certname, Environment: "production",
				CodeID: "values", EnvironmentPath: tc.envpath, Facts: factsJSON})
			if err := p.send(append(line, '\n')); err != nil {
				t.Fatal(err)
			}
			var out []byte
			select {
			case out = <-p.lines:
			case <-time.After(time.Minute):
				t.Fatal("no answer")
			}
			var resp struct {
				OK    bool `json:"ok"`
				Reads struct {
					Reads []facts.Read `json:"reads"`
				} `json:"reads"`
				Error *workerError `json:"error"`
			}
			if err := json.Unmarshal(out, &resp); err != nil || !resp.OK {
				t.Fatalf("answer %.300s: %v %+v", out, err, resp.Error)
			}
			if len(resp.Reads.Reads) < tc.wantReads {
				t.Fatalf("%d reads, want at least %d: %+v", len(resp.Reads.Reads), tc.wantReads, resp.Reads.Reads)
			}
			for _, r := range resp.Reads.Reads {
				want, err := facts.Observe(tc.facts, r.Path, r.Kind)
				if err != nil {
					t.Fatal(err)
				}
				if r.Missing != want.Missing || !bytes.Equal(r.Value, unescapeHTML(t, want.Value)) {
					t.Errorf("read %s: worker says %s (missing %v), facts.Observe %s (missing %v)", describe(r), r.Value, r.Missing, want.Value, want.Missing)
				}
			}
		})
	}
}

// unescapeHTML re-encodes JSON without Go's escaping of <, > and &, which
// Ruby does not do.
func unescapeHTML(t *testing.T, b json.RawMessage) []byte {
	t.Helper()
	if len(b) == 0 {
		return nil
	}
	v, err := decodeExact(b)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// TestCheckReads checks how Compile turns the worker's reads into stored
// ones: values recomputed by facts.Observe, spelling of numbers forgiven,
// anything else counted as a recording bug.
func TestCheckReads(t *testing.T) {
	values := decodeFacts(t, `{"load": 1.50, "n": 1.0, "os": {"family": "Debian"}}`)
	read := func(kind facts.ReadKind, value string, missing bool, path ...string) facts.Read {
		return facts.Read{Path: path, Kind: kind, Value: json.RawMessage(value), Missing: missing}
	}
	tests := []struct {
		name     string
		read     facts.Read
		mismatch bool
	}{
		{"same", read(facts.ReadValue, `"Debian"`, false, "os", "family"), false},
		{"number spelled otherwise", read(facts.ReadValue, `1.5`, false, "load"), false},
		{"whole hash, keys in another order", read(facts.ReadValue, `{"os":{"family":"Debian"},"n":1.0,"load":1.5}`, false), false},
		{"integer for float", read(facts.ReadValue, `1`, false, "n"), true},
		{"other value", read(facts.ReadValue, `"RedHat"`, false, "os", "family"), true},
		{"missing for present", read(facts.ReadValue, ``, true, "os", "family"), true},
		{"present for missing", read(facts.ReadValue, `"x"`, false, "nosuch"), true},
		{"keys", read(facts.ReadKeys, `["family"]`, false, "os"), false},
		{"hash", read(facts.ReadHash, `false`, false, "os"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Engine{log: testLogger()}
			got, err := e.checkReads("test", &facts.ReadRecord{Reads: []facts.Read{tt.read}, AlwaysRecompile: true, Why: "w"}, values)
			if err != nil {
				t.Fatal(err)
			}
			if n := e.readMismatches.Load(); (n > 0) != tt.mismatch {
				t.Errorf("mismatches = %d, want mismatch %v", n, tt.mismatch)
			}
			want, _ := facts.Observe(values, tt.read.Path, tt.read.Kind)
			if len(got.Reads) != 1 || got.Reads[0].Missing != want.Missing || !bytes.Equal(got.Reads[0].Value, want.Value) {
				t.Errorf("stored %+v, want facts.Observe's %+v", got.Reads, want)
			}
			if !got.AlwaysRecompile || got.Why != "w" {
				t.Errorf("always/why lost: %+v", got)
			}
			if changed, _ := facts.Changed(got.Reads, values); changed {
				t.Error("stored reads are changed by the same facts")
			}
		})
	}
	t.Run("invalid kind", func(t *testing.T) {
		e := &Engine{log: testLogger()}
		if _, err := e.checkReads("test", &facts.ReadRecord{Reads: []facts.Read{{Path: []string{"x"}, Kind: "bogus"}}}, values); err == nil {
			t.Error("no error")
		}
	})
	t.Run("no reads", func(t *testing.T) {
		e := &Engine{log: testLogger()}
		if got, err := e.checkReads("test", nil, values); got != nil || err != nil {
			t.Errorf("= %v, %v; want nil, nil", got, err)
		}
	})
}

// TestDisableHooks checks the test-only switch: "all" turns recording off
// (no reads), unknown hook names are refused, for the engine and for one
// compile.
func TestDisableHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	envpath := readCasesEnv(t)
	req := compiler.Request{Certname: caseCert("facts index"), Environment: "production", CodeID: "hooks",
		EnvironmentPath: envpath, Facts: decodeFacts(t, readFacts)}

	t.Run("all", func(t *testing.T) {
		e := newEngine(t, Options{DisableHooks: []string{"all"}})
		if ready := e.workers[0].proc.ready; ready.Recording || len(ready.Hooks) != 0 {
			t.Errorf("ready = %+v, want no recording", ready)
		}
		res, err := e.Compile(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Reads != nil {
			t.Errorf("Reads = %+v, want nil", res.Reads)
		}
	})
	t.Run("unknown hook for the engine", func(t *testing.T) {
		_, err := New(t.Context(), Options{WorkDir: t.TempDir(), Logger: testLogger(), DisableHooks: []string{"nosuch"}})
		if err == nil || !strings.Contains(err.Error(), "unknown recording hooks nosuch") {
			t.Errorf("New = %v, want an error naming the unknown hook", err)
		}
	})
	t.Run("per compile", func(t *testing.T) {
		e := sharedEngine(t)
		if ready := e.workers[0].proc.ready; !ready.Recording || !slices.Equal(ready.Hooks, []string{"facts", "topscope", "qualified", "tohash", "iterate", "erb", "convert", "hashargs", "nondet", "queries"}) {
			t.Errorf("ready = %+v, want every hook", ready)
		}
		if _, err := e.compile(t.Context(), req, []string{"nosuch"}); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("unknown hook: err = %v, want farm.ErrInvalid", err)
		}
		res, err := e.compile(t.Context(), req, []string{"all"})
		if err != nil || res.Reads != nil {
			t.Errorf("all: %v, reads %+v; want no reads", err, res.Reads)
		}
		res, err = e.Compile(t.Context(), req)
		if err != nil || res.Reads == nil {
			t.Fatalf("then: %v, reads %+v; want reads", err, res.Reads)
		}
	})
}
