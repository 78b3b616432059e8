package site

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/test/e2e"
)

// globalModule writes the module cfglobal into the global module directory
// dir: a class managing two files under the node's cf_root, one with
// content that uses a function and a plugin fact of the module's lib/
// (which agents pluginsync), one from the module's files/ through
// puppet:///modules/cfglobal/. version tells the code apart.
func globalModule(t *testing.T, dir, version string) {
	t.Helper()
	files := map[string]string{
		"cfglobal/manifests/init.pp": `class cfglobal {
  file { "${facts['cf_root']}/global.txt":
    ensure  => file,
    content => "global ` + version + ` ${facts['cf_global_plugin']} ${cfglobal::shout('from lib')}\n",
  }
  file { "${facts['cf_root']}/global_static.txt":
    ensure => file,
    source => 'puppet:///modules/cfglobal/static.txt',
  }
}
`,
		"cfglobal/files/static.txt":                       "static " + version + "\n",
		"cfglobal/lib/facter/cf_global_plugin.rb":         "Facter.add(:cf_global_plugin) { setcode { 'plugin fact' } }\n",
		"cfglobal/lib/puppet/functions/cfglobal/shout.rb": "Puppet::Functions.create_function(:'cfglobal::shout') do\n  dispatch :shout do\n    param 'String', :s\n  end\n\n  def shout(s)\n    s.upcase\n  end\nend\n",
	}
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// addGlobalEnv adds an environment whose site.pp includes cfglobal, with
// environment.conf conf ("" for none: the default modulepath).
func addGlobalEnv(t *testing.T, envs, name, conf string) {
	t.Helper()
	dir := filepath.Join(envs, name)
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "site.pp"), []byte("node default {\n  include cfglobal\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if conf != "" {
		if err := os.WriteFile(filepath.Join(dir, "environment.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readManaged(t *testing.T, a *e2e.Agent, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.Root, rel))
	if err != nil {
		t.Errorf("%s's managed file: %v", a.Certname, err)
	}
	return string(b)
}

// TestBaseModulepath: modules of the global module directory
// (--basemodulepath) serve environments whose modulepath uses them (the
// default one, and $basemodulepath in environment.conf) with a real agent:
// the compile finds the class and its lib/ function, the agent
// pluginsyncs its fact and fetches its file. After a change there,
// `code deploy --all` recompiles those environments' nodes and the agents
// apply the change, while a node of an environment whose modulepath
// excludes $basemodulepath (the example's production) is not recompiled.
func TestBaseModulepath(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Ruby Puppet and the puppet agent; skipped with -short")
	}
	envs := e2e.CopyExampleEnvs(t)
	global := filepath.Join(t.TempDir(), "global")
	globalModule(t, global, "v1")
	addGlobalEnv(t, envs, "globaldefault", "")
	addGlobalEnv(t, envs, "globalexplicit", "modulepath = site:$basemodulepath\n")
	f := e2e.StartFarm(t, t.TempDir(), envs, "--basemodulepath", global)

	users := []struct {
		agent *e2e.Agent
		env   string
	}{
		{e2e.NewAgent(t, "global1.example.test"), "globaldefault"},
		{e2e.NewAgent(t, "global2.example.test"), "globalexplicit"},
	}
	for _, u := range users {
		code, out := u.agent.Run(t, f, "--environment", u.env)
		if code != 2 {
			t.Fatalf("%s's first run in %s: exit %d, want 2\n%s", u.agent.Certname, u.env, code, out)
		}
		if got, want := readManaged(t, u.agent, "global.txt"), "global v1 plugin fact FROM LIB\n"; got != want {
			t.Errorf("%s: global.txt = %q, want %q (class, plugin fact and function of the global module)", u.agent.Certname, got, want)
		}
		if got := readManaged(t, u.agent, "global_static.txt"); got != "static v1\n" {
			t.Errorf("%s: global_static.txt = %q, want the global module's file", u.agent.Certname, got)
		}
		if _, err := os.Stat(filepath.Join(u.agent.Dir, "var", "lib", "facter", "cf_global_plugin.rb")); err != nil {
			t.Errorf("%s did not pluginsync the global module's fact: %v", u.agent.Certname, err)
		}
	}
	other := e2e.NewAgent(t, "own.example.test")
	if code, out := other.Run(t, f); code != 2 {
		t.Fatalf("production agent's first run: exit %d, want 2\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(other.Dir, "var", "lib", "facter", "cf_global_plugin.rb")); err == nil {
		t.Errorf("an agent of production (modulepath = modules) got the global module's fact")
	}

	before := f.Nodes()
	globalModule(t, global, "v2")
	out, err := f.CLI("code", "deploy", "--all")
	t.Logf("broker code deploy --all:\n%s", out)
	if err != nil {
		t.Fatalf("code deploy --all: %v", err)
	}
	for _, want := range []string{"globaldefault: code_id", "globalexplicit: code_id", "production: code unchanged", "ETA done"} {
		if !strings.Contains(out, want) {
			t.Errorf("deploy output lacks %q", want)
		}
	}
	after := f.Nodes()
	for _, u := range users {
		old, now := before[u.agent.Certname].Catalog, after[u.agent.Certname].Catalog
		if old == nil || now == nil || now.CodeID == old.CodeID {
			t.Fatalf("%s's catalog after the deploy: %+v (before %+v), want one of new code", u.agent.Certname, now, old)
		}
		code, out := u.agent.Run(t, f, "--environment", u.env)
		if code != 2 {
			t.Fatalf("%s's run after the deploy: exit %d, want 2\n%s", u.agent.Certname, code, out)
		}
		if got, want := readManaged(t, u.agent, "global.txt"), "global v2 plugin fact FROM LIB\n"; got != want {
			t.Errorf("%s after the deploy: global.txt = %q, want %q", u.agent.Certname, got, want)
		}
		if got := readManaged(t, u.agent, "global_static.txt"); got != "static v2\n" {
			t.Errorf("%s after the deploy: global_static.txt = %q, want the changed file", u.agent.Certname, got)
		}
	}
	if old, now := before[other.Certname].Catalog, after[other.Certname].Catalog; old == nil || now == nil || now.Seq != old.Seq || now.CodeID != old.CodeID {
		t.Errorf("production's node after the global change: catalog %+v (before %+v), want it not recompiled", now, old)
	}
	if code, out := other.Run(t, f); code != 0 {
		t.Errorf("production agent after the global change: exit %d, want 0 (nothing changed)\n%s", code, out)
	}
}
