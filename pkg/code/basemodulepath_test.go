package code

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// globalDirs makes two global module directories: the first holds module
// global (a class, a file, a plugin fact, an external fact and a
// function) and a module pupdemo that the environment's own shadows; the
// second holds global again (shadowed by the first) and module second.
func globalDirs(t *testing.T) []string {
	t.Helper()
	one, two := filepath.Join(t.TempDir(), "modules"), filepath.Join(t.TempDir(), "more")
	putFile(t, one, "global/manifests/init.pp", "class global { }\n")
	putFile(t, one, "global/files/motd", "from the global module\n")
	putFile(t, one, "global/files/tree/a.txt", "a\n")
	putFile(t, one, "global/lib/facter/global_fact.rb", "Facter.add(:global_fact) { setcode { 'g' } }\n")
	putFile(t, one, "global/lib/puppet/functions/global/hello.rb", "# hello\n")
	putFile(t, one, "global/facts.d/global_ext.txt", "global_ext=1\n")
	putFile(t, one, "pupdemo/files/static.txt", "the global pupdemo, hidden by the environment's\n")
	putFile(t, one, "pupdemo/lib/facter/pupdemo_fact.rb", "# the global one\n")
	putFile(t, two, "global/files/motd", "from the second directory, hidden\n")
	putFile(t, two, "second/files/x", "x\n")
	return []string{one, two}
}

func snapshotWith(t *testing.T, store farm.ContentStore, dir string, base []string) *Manifest {
	t.Helper()
	m, err := SnapshotWith(context.Background(), store, "production", dir, Options{BaseModulepath: base})
	if err != nil {
		t.Fatalf("SnapshotWith(%s, %q): %v", dir, base, err)
	}
	return m
}

func TestSnapshotBaseModulepath(t *testing.T) {
	const b0, b1 = BaseModulepathDir + "/0", BaseModulepathDir + "/1"
	tests := []struct {
		name     string
		conf     string // "" for no environment.conf
		want     []string
		withBase bool // the snapshot holds the global directories
	}{
		{"no environment.conf: the default", "", []string{"modules", b0, b1}, true},
		{"no modulepath setting: the default", "manifest = manifests\n", []string{"modules", b0, b1}, true},
		{"explicit, in place", "modulepath = site:$basemodulepath:modules\n", []string{"site", b0, b1, "modules"}, true},
		{"braces", "modulepath = modules:${basemodulepath}\n", []string{"modules", b0, b1}, true},
		{"excluded", "modulepath = modules\n", []string{"modules"}, false},
		{"only other settings", "modulepath = modules:$codedir/modules:$basemodulepath/x\n", []string{"modules"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtureEnv(t)
			if tt.conf == "" {
				if err := os.Remove(filepath.Join(dir, "environment.conf")); err != nil {
					t.Fatal(err)
				}
			} else {
				putFile(t, dir, "environment.conf", tt.conf)
			}
			store := memstore.New()
			m := snapshotWith(t, store, dir, globalDirs(t))
			if !reflect.DeepEqual(m.Modulepath, tt.want) {
				t.Errorf("Modulepath = %q, want %q", m.Modulepath, tt.want)
			}
			_, has := m.Entry(b0 + "/global/files/motd")
			if has != tt.withBase {
				t.Errorf("snapshot holds the global modules: %v, want %v", has, tt.withBase)
			}
			wantDirs := []string{}
			if tt.withBase {
				wantDirs = []string{b0, b1}
			}
			if got := m.BaseDirs(); !reflect.DeepEqual(got, wantDirs) {
				t.Errorf("BaseDirs = %q, want %q", got, wantDirs)
			}
			if !tt.withBase {
				// Exactly the snapshot without global directories.
				if plain := snapshot(t, memstore.New(), dir); plain.CodeID() != m.CodeID() {
					t.Errorf("an environment that does not use $basemodulepath changed with global directories")
				}
			}
			// The manifest loads back (validation accepts the global tree).
			if _, err := Load(context.Background(), store, m.CodeID()); err != nil {
				t.Errorf("Load: %v", err)
			}
		})
	}
}

func TestSnapshotBaseModulepathNone(t *testing.T) {
	// $basemodulepath with no global directories configured stands for nothing.
	dir := fixtureEnv(t)
	putFile(t, dir, "environment.conf", "modulepath = $basemodulepath:modules\n")
	m := snapshotWith(t, memstore.New(), dir, nil)
	if !reflect.DeepEqual(m.Modulepath, []string{"modules"}) || len(m.BaseDirs()) != 0 {
		t.Errorf("Modulepath = %q, BaseDirs = %q; want [modules] and none", m.Modulepath, m.BaseDirs())
	}
	if _, ok := m.Entry(BaseModulepathDir); ok {
		t.Errorf("snapshot has %s without global directories", BaseModulepathDir)
	}
}

func TestSnapshotBaseModulepathSkips(t *testing.T) {
	dir := fixtureEnv(t)
	base := globalDirs(t)
	putFile(t, base[0], ".git/HEAD", "ref: refs/heads/main\n")
	putFile(t, base[0], "global/.git", "gitdir: ../.git/modules/global\n")
	putFile(t, base[0], "global/manifests/init.pp~", "backup\n")
	putFile(t, base[0], "global/manifests/.init.pp.swp", "swap\n")
	m := snapshotWith(t, memstore.New(), dir, base)
	for _, e := range m.Entries {
		if strings.Contains(e.Path, ".git") || strings.HasSuffix(e.Path, "~") || strings.HasSuffix(e.Path, ".swp") {
			t.Errorf("snapshot holds %s", e.Path)
		}
	}
	if _, ok := m.Entry(BaseModulepathDir + "/0/global/manifests/init.pp"); !ok {
		t.Errorf("snapshot lacks the global module's manifest")
	}
}

// TestBaseModuleShadowing: the first module of a name on the modulepath
// wins, as Puppet's do; the environment's own come first by default.
func TestBaseModuleShadowing(t *testing.T) {
	const b0, b1 = BaseModulepathDir + "/0", BaseModulepathDir + "/1"
	tests := []struct {
		conf string
		want map[string]string // module -> directory
	}{
		{"", map[string]string{"pupdemo": "modules/pupdemo", "global": b0 + "/global", "second": b1 + "/second"}},
		{"modulepath = $basemodulepath:modules\n", map[string]string{"pupdemo": b0 + "/pupdemo", "global": b0 + "/global", "second": b1 + "/second"}},
	}
	for _, tt := range tests {
		t.Run(tt.conf, func(t *testing.T) {
			dir := fixtureEnv(t)
			putFile(t, dir, "environment.conf", tt.conf)
			m := snapshotWith(t, memstore.New(), dir, globalDirs(t))
			for name, want := range tt.want {
				if mod, ok := m.Module(name); !ok || mod.Dir != want {
					t.Errorf("Module(%s) = %+v, %v; want it in %s", name, mod, ok, want)
				}
			}
		})
	}
}

func TestSnapshotBaseModulepathCodeID(t *testing.T) {
	env := fixtureEnv(t)
	excluded := fixtureEnv(t)
	putFile(t, excluded, "environment.conf", "modulepath = modules\n")
	base := globalDirs(t)
	usingBefore := snapshotWith(t, memstore.New(), env, base).CodeID()
	excludedBefore := snapshotWith(t, memstore.New(), excluded, base).CodeID()

	tests := []struct {
		name   string
		change func(t *testing.T)
	}{
		{"a global module's file", func(t *testing.T) { putFile(t, base[0], "global/files/motd", "changed\n") }},
		{"a new global module", func(t *testing.T) { putFile(t, base[1], "third/manifests/init.pp", "class third {}\n") }},
		{"a removed global module", func(t *testing.T) {
			if err := os.RemoveAll(filepath.Join(base[1], "second")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	prev := usingBefore
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.change(t)
			if got := snapshotWith(t, memstore.New(), env, base).CodeID(); got == prev {
				t.Errorf("code_id of an environment using $basemodulepath did not change")
			} else {
				prev = got
			}
			if got := snapshotWith(t, memstore.New(), excluded, base).CodeID(); got != excludedBefore {
				t.Errorf("code_id of an environment without $basemodulepath changed")
			}
		})
	}
	// The same global content in other directories is the same code.
	moved := filepath.Join(t.TempDir(), "moved")
	copyTree(t, base[0], moved)
	first := snapshotWith(t, memstore.New(), env, base).CodeID()
	if again := snapshotWith(t, memstore.New(), env, []string{moved, base[1]}).CodeID(); again != first {
		t.Errorf("code_id depends on where the global directories are")
	}
}

func TestSnapshotBaseModulepathErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, env string, base []string) []string
		want    error
		message string
	}{
		{"missing global directory", func(t *testing.T, env string, base []string) []string {
			return []string{base[0], filepath.Join(t.TempDir(), "nope")}
		}, nil, "global module directory"},
		{"global directory is a file", func(t *testing.T, env string, base []string) []string {
			f := filepath.Join(t.TempDir(), "file")
			putFile(t, filepath.Dir(f), "file", "x")
			return []string{f}
		}, farm.ErrInvalid, "not a directory"},
		{"absolute link in a global module", func(t *testing.T, env string, base []string) []string {
			symlink(t, base[0], "global/files/passwd", "/etc/passwd")
			return base
		}, farm.ErrInvalid, "modules/global/files/passwd points to the absolute path"}, // named where it is on disk
		{"link out of its global directory", func(t *testing.T, env string, base []string) []string {
			symlink(t, base[0], "global/files/up", "../../..")
			return base
		}, farm.ErrInvalid, "leaves its global module directory"},
		{"link to another global directory", func(t *testing.T, env string, base []string) []string {
			symlink(t, base[0], "other", "../1/second")
			return base
		}, farm.ErrInvalid, "leaves its global module directory"},
		{"out through a link", func(t *testing.T, env string, base []string) []string {
			symlink(t, base[0], "global/top", "..")
			symlink(t, base[0], "sneaky", "global/top/..")
			return base
		}, farm.ErrInvalid, "leaves its global module directory"},
		{"environment link into the global directories", func(t *testing.T, env string, base []string) []string {
			symlink(t, env, "modules/global", "../.basemodulepath/0/global")
			return base
		}, farm.ErrInvalid, "leaves the environment"},
		{"environment holds the reserved name", func(t *testing.T, env string, base []string) []string {
			putFile(t, env, BaseModulepathDir+"/0/x/manifests/init.pp", "class x {}\n")
			return base
		}, farm.ErrInvalid, "rename it"},
		{"modulepath names the reserved directory", func(t *testing.T, env string, base []string) []string {
			putFile(t, env, "environment.conf", "modulepath = modules:.basemodulepath/0\n")
			return base
		}, farm.ErrInvalid, "use $basemodulepath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := fixtureEnv(t)
			base := tt.setup(t, env, globalDirs(t))
			_, err := SnapshotWith(context.Background(), memstore.New(), "production", env, Options{BaseModulepath: base})
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.want, tt.message)
			}
		})
	}
	// Links that stay inside a global directory are kept.
	env, base := fixtureEnv(t), globalDirs(t)
	symlink(t, base[0], "global/files/alias", "motd")
	symlink(t, base[0], "linked", "global")
	m := snapshotWith(t, memstore.New(), env, base)
	if e, err := m.Lookup(MountModules, "linked/alias"); err != nil || e.Path != BaseModulepathDir+"/0/global/files/motd" {
		t.Errorf("Lookup through links in a global directory = %+v, %v", e, err)
	}
}

func TestLoadRejectsBadBaseDirs(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	sha := string(farm.DigestOf([]byte("x")))
	const head = `{"format":1,"environment":"production","modulepath":["modules"],"entries":[`
	tests := []struct {
		name, entries string
	}{
		{"reserved name is a file", `{"path":".basemodulepath","type":"file","sha256":"` + sha + `","mode":420,"size":1}`},
		{"not numbered", `{"path":".basemodulepath","type":"directory","mode":493},{"path":".basemodulepath/x","type":"directory","mode":493}`},
		{"a gap", `{"path":".basemodulepath","type":"directory","mode":493},{"path":".basemodulepath/1","type":"directory","mode":493}`},
		{"link out of a global directory", `{"path":".basemodulepath","type":"directory","mode":493},{"path":".basemodulepath/0","type":"directory","mode":493},` +
			`{"path":".basemodulepath/0/l","type":"link","mode":511,"target":"../../modules"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := store.Put(ctx, farm.SpaceCode, []byte(head+tt.entries+`]}`))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Load(ctx, store, string(d)); !errors.Is(err, farm.ErrInvalid) {
				t.Errorf("Load err = %v, want ErrInvalid", err)
			}
		})
	}
}

// TestBaseModuleMounts: global modules serve pluginsync (lib, facts.d) and
// the modules mount, with public paths under /compilefarm/modules; their
// files are not static content (Puppet Server inlines only the
// environment's own).
func TestBaseModuleMounts(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	dir := fixtureEnv(t)
	m := snapshotWith(t, store, dir, globalDirs(t))
	lib := NewLibrary(store, t.TempDir())
	files, err := lib.files(ctx, m.CodeID())
	if err != nil {
		t.Fatal(err)
	}
	const b0, b1 = BaseModulepathDir + "/0", BaseModulepathDir + "/1"
	for _, tt := range []struct{ mount, rel, want string }{
		{MountModules, "global/motd", b0 + "/global/files/motd"}, // the first directory wins
		{MountModules, "second/x", b1 + "/second/files/x"},
		{MountModules, "pupdemo/static.txt", "modules/pupdemo/files/static.txt"}, // the environment's wins
		{MountPlugins, "facter/global_fact.rb", b0 + "/global/lib/facter/global_fact.rb"},
		{MountPlugins, "facter/pupdemo_fact.rb", "modules/pupdemo/lib/facter/pupdemo_fact.rb"},
		{MountPluginFacts, "global_ext.txt", b0 + "/global/facts.d/global_ext.txt"},
	} {
		if e, err := m.Lookup(tt.mount, tt.rel); err != nil || e.Path != tt.want {
			t.Errorf("Lookup(%s, %s) = %s, %v; want %s", tt.mount, tt.rel, e.Path, err, tt.want)
		}
	}

	opts := MetadataOptions{Recurse: true}
	plugins, err := files.FileMetadatas(ctx, "plugins", opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, md := range plugins {
		got[md.RelativePath] = md.Path
	}
	if got["facter/global_fact.rb"] != "/compilefarm/modules/global/lib" ||
		got["puppet/functions/global/hello.rb"] != "/compilefarm/modules/global/lib" ||
		got["facter/pupdemo_fact.rb"] != "/compilefarm/environments/production/modules/pupdemo/lib" {
		t.Errorf("plugins metadata paths: %v", got)
	}
	facts, err := files.FileMetadatas(ctx, "pluginfacts", opts)
	if err != nil {
		t.Fatal(err)
	}
	if rels := rels(facts); !strings.Contains(strings.Join(rels, "\n"), "/compilefarm/modules/global/facts.d global_ext.txt file") {
		t.Errorf("pluginfacts lacks the global module's external fact: %q", rels)
	}
	md, err := files.FileMetadata(ctx, "modules/second/x", MetadataOptions{})
	if err != nil || md.Path != "/compilefarm/modules2/second/files/x" {
		t.Errorf("metadata of a module in the second directory: %+v, %v", md, err)
	}
	if b, err := lib.FileContent(ctx, m.CodeID(), "modules/global/motd"); err != nil || string(b) != "from the global module\n" {
		t.Errorf("FileContent = %q, %v", b, err)
	}
	if _, err := m.LookupStatic(b0 + "/global/files/motd"); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("LookupStatic of a global module's file: err = %v, want ErrInvalid", err)
	}
	if _, err := m.LookupStatic(b0 + "/files/x"); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("LookupStatic into the global directories: err = %v, want ErrInvalid", err)
	}

	// A static catalog inlines the environment's files, not global ones,
	// and names both by their public paths.
	envPath, err := lib.EnvironmentPath(ctx, m.CodeID())
	if err != nil {
		t.Fatal(err)
	}
	checkout := filepath.Join(envPath, "production")
	if _, err := os.Stat(filepath.Join(checkout, b0, "global", "manifests", "init.pp")); err != nil {
		t.Fatalf("checkout lacks the global module: %v", err)
	}
	compiled := `{"tags":["settings"],"name":"n1","version":1,"code_id":null,"catalog_uuid":"u","catalog_format":2,"environment":"production","resources":[` +
		`{"type":"File","title":"/tmp/motd","tags":["file"],"file":"` + checkout + `/` + b0 + `/global/manifests/init.pp","line":2,"exported":false,"parameters":{"source":"puppet:///modules/global/motd"}},` +
		`{"type":"File","title":"/tmp/static","tags":["file"],"file":"` + checkout + `/manifests/site.pp","line":3,"exported":false,"parameters":{"source":"puppet:///modules/pupdemo/static.txt"}}` +
		`],"edges":[],"classes":[]}`
	static, err := lib.MakeStatic(ctx, []byte(compiled), m.CodeID())
	if err != nil {
		t.Fatal(err)
	}
	c, err := catalog.Parse(static)
	if err != nil {
		t.Fatal(err)
	}
	if c.Resources[0].File != "/compilefarm/modules/global/manifests/init.pp" || c.Resources[1].File != "/compilefarm/environments/production/manifests/site.pp" {
		t.Errorf("resource files: %q, %q", c.Resources[0].File, c.Resources[1].File)
	}
	if s := string(c.Metadata); strings.Contains(s, "/tmp/motd") || !strings.Contains(s, "/tmp/static") {
		t.Errorf("inlined metadata = %s, want only the environment's file", s)
	}
	msg, _ := lib.Publish(ctx, m.CodeID(), []byte("Error (file: "+checkout+"/"+b1+"/second/manifests/init.pp, line: 1)"))
	if string(msg) != "Error (file: /compilefarm/modules2/second/manifests/init.pp, line: 1)" {
		t.Errorf("Publish = %q", msg)
	}
}
