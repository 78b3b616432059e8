package code

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// fixtureEnv copies ../../testdata/puppet-protocol/production (the environment the recordings
// were made with) into a temporary directory with modes 0755 and 0644, so
// results do not depend on how the repository was checked out.
func fixtureEnv(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "production")
	copyTree(t, filepath.Join("../../testdata/puppet-protocol", "production"), dst)
	return dst
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return os.Chmod(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			return err
		}
		return os.Chmod(target, 0o644)
	})
	if err != nil {
		t.Fatalf("copying %s: %v", src, err)
	}
}

func putFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, dir, rel, target string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, store farm.ContentStore, dir string) *Manifest {
	t.Helper()
	m, err := Snapshot(context.Background(), store, "production", dir)
	if err != nil {
		t.Fatalf("Snapshot(%s): %v", dir, err)
	}
	return m
}

var fixturePaths = []string{
	"environment.conf",
	"manifests",
	"manifests/site.pp",
	"modules",
	"modules/pupdemo",
	"modules/pupdemo/facts.d",
	"modules/pupdemo/facts.d/ext.txt",
	"modules/pupdemo/files",
	"modules/pupdemo/files/static.txt",
	"modules/pupdemo/files/tree",
	"modules/pupdemo/files/tree/one.txt",
	"modules/pupdemo/files/tree/sub",
	"modules/pupdemo/files/tree/sub/two.txt",
	"modules/pupdemo/lib",
	"modules/pupdemo/lib/facter",
	"modules/pupdemo/lib/facter/pupdemo_fact.rb",
	"modules/pupdemo/lib/puppet",
	"modules/pupdemo/lib/puppet/functions",
	"modules/pupdemo/lib/puppet/functions/pupdemo",
	"modules/pupdemo/lib/puppet/functions/pupdemo/shout.rb",
	"modules/pupdemo/manifests",
	"modules/pupdemo/manifests/init.pp",
	"modules/pupdemo/templates",
	"modules/pupdemo/templates/greeting.epp",
	"modules/pupdemo/templates/motd.erb",
}

func paths(m *Manifest) []string {
	var out []string
	for _, e := range m.Entries {
		out = append(out, e.Path)
	}
	return out
}

func TestSnapshotFixture(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	m := snapshot(t, store, fixtureEnv(t))

	if got := paths(m); !reflect.DeepEqual(got, fixturePaths) {
		t.Errorf("entries:\n got %q\nwant %q", got, fixturePaths)
	}
	if !farm.Digest(m.CodeID()).Valid() {
		t.Fatalf("CodeID %q is not a digest", m.CodeID())
	}
	if !reflect.DeepEqual(m.Modulepath, []string{"modules"}) {
		t.Errorf("Modulepath = %q, want [modules] (environment.conf only has a comment)", m.Modulepath)
	}
	static, _ := m.Entry("modules/pupdemo/files/static.txt")
	want := farm.Digest("f2f24e6739d74b395d63997888a8ba34808c777ad8d5076502f20883845458b4") // from file_metadata-static.body
	if static.Type != TypeFile || static.SHA256 != want || static.Size != 60 || static.Mode != 0o644 {
		t.Errorf("static.txt entry = %+v", static)
	}
	if d, _ := m.Entry("modules/pupdemo/lib"); d.Type != TypeDirectory || d.Mode != 0o755 || d.SHA256 != "" {
		t.Errorf("lib entry = %+v", d)
	}
	for _, d := range m.Digests() {
		if ok, err := store.Has(ctx, farm.SpaceContent, d); err != nil || !ok {
			t.Errorf("content %s not stored: %v", d, err)
		}
	}
	stored, err := store.Get(ctx, farm.SpaceCode, farm.Digest(m.CodeID()))
	if err != nil {
		t.Fatalf("manifest not stored under its code_id: %v", err)
	}
	enc, _ := m.Encode()
	if string(stored) != string(enc) {
		t.Errorf("stored manifest differs from Encode()")
	}
	if strings.Contains(string(stored), "\n") || strings.Contains(string(stored), "time") {
		t.Errorf("manifest JSON is not compact or mentions time: %s", stored)
	}

	// Identical code gives an identical code_id, whatever the directory and
	// store; Load gives the same manifest back.
	m2 := snapshot(t, memstore.New(), fixtureEnv(t))
	if m2.CodeID() != m.CodeID() {
		t.Errorf("same code, different code_ids: %s, %s", m.CodeID(), m2.CodeID())
	}
	loaded, err := Load(ctx, store, m.CodeID())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if loaded.CodeID() != m.CodeID() || !reflect.DeepEqual(loaded.Entries, m.Entries) || loaded.Environment != "production" {
		t.Errorf("Load gave a different manifest")
	}
}

func TestSnapshotChangesCodeID(t *testing.T) {
	base := snapshot(t, memstore.New(), fixtureEnv(t)).CodeID()
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
		same   bool
	}{
		{"content", func(t *testing.T, dir string) { putFile(t, dir, "manifests/site.pp", "node default {}\n") }, false},
		{"mode", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "manifests/site.pp"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"new file", func(t *testing.T, dir string) { putFile(t, dir, "README.md", "hi") }, false},
		{"new empty dir", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"git dir", func(t *testing.T, dir string) { putFile(t, dir, ".git/HEAD", "ref: refs/heads/main\n") }, true},
		{"git file", func(t *testing.T, dir string) {
			putFile(t, dir, "modules/pupdemo/.git", "gitdir: ../../.git/modules/pupdemo\n")
		}, true},
		{"svn hg CVS", func(t *testing.T, dir string) {
			putFile(t, dir, ".svn/entries", "x")
			putFile(t, dir, "modules/.hg/store", "x")
			putFile(t, dir, "manifests/CVS/Root", "x")
		}, true},
		{"editor files", func(t *testing.T, dir string) {
			putFile(t, dir, "manifests/site.pp~", "x")
			putFile(t, dir, "manifests/.site.pp.swp", "x")
			putFile(t, dir, "manifests/#site.pp#", "x")
			putFile(t, dir, "manifests/4913", "x")
			symlink(t, dir, "manifests/.#site.pp", "user@host.1234:1700000000") // emacs lock, dangling
		}, true},
		{"mtime", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "manifests/site.pp")
			fi, _ := os.Stat(p)
			if err := os.Chtimes(p, fi.ModTime().Add(1e12), fi.ModTime().Add(1e12)); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtureEnv(t)
			tt.change(t, dir)
			got := snapshot(t, memstore.New(), dir).CodeID()
			if (got == base) != tt.same {
				t.Errorf("code_id same = %v, want %v", got == base, tt.same)
			}
		})
	}
}

func TestSnapshotLinks(t *testing.T) {
	tests := []struct {
		name    string
		links   [][2]string // path, target
		wantErr bool
	}{
		{"file in module", [][2]string{{"modules/pupdemo/files/alias.txt", "static.txt"}}, false},
		{"dir across modules", [][2]string{{"site", "modules/pupdemo"}}, false},
		{"dangling inside", [][2]string{{"modules/pupdemo/files/gone", "nothere.txt"}}, false},
		{"loop inside", [][2]string{{"a", "b"}, {"b", "a"}}, false},
		{"absolute", [][2]string{{"modules/pupdemo/files/passwd", "/etc/passwd"}}, true},
		{"up and out", [][2]string{{"modules/pupdemo/files/up", "../../../../etc"}}, true},
		{"out by one", [][2]string{{"manifests/env", "../.."}}, true},
		{"out through a link", [][2]string{{"modules/top", ".."}, {"sneaky", "modules/top/.."}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtureEnv(t)
			for _, l := range tt.links {
				symlink(t, dir, l[0], l[1])
			}
			m, err := Snapshot(context.Background(), memstore.New(), "production", dir)
			if tt.wantErr {
				if !errors.Is(err, farm.ErrInvalid) || !strings.Contains(err.Error(), "link") {
					t.Fatalf("err = %v, want an ErrInvalid about the link", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			for _, l := range tt.links {
				e, ok := m.Entry(l[0])
				if !ok || e.Type != TypeLink || e.Target != l[1] {
					t.Errorf("entry %s = %+v, want link to %s", l[0], e, l[1])
				}
			}
		})
	}
}

func TestSnapshotErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Snapshot(ctx, memstore.New(), "Bad-Env", fixtureEnv(t)); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("bad environment name: err = %v, want ErrInvalid", err)
	}
	if _, err := Snapshot(ctx, memstore.New(), "production", filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Errorf("missing dir: no error")
	}
	file := filepath.Join(t.TempDir(), "f")
	putFile(t, filepath.Dir(file), "f", "x")
	if _, err := Snapshot(ctx, memstore.New(), "production", file); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("file instead of dir: err = %v, want ErrInvalid", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Snapshot(cancelled, memstore.New(), "production", fixtureEnv(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

func TestSnapshotThroughLinkedDir(t *testing.T) {
	dir := fixtureEnv(t)
	link := filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	a := snapshot(t, memstore.New(), dir)
	b := snapshot(t, memstore.New(), link)
	if a.CodeID() != b.CodeID() {
		t.Errorf("snapshot through a linked directory differs")
	}
}

func TestModulepath(t *testing.T) {
	tests := []struct {
		name string
		conf string // "" for no environment.conf
		want []string
	}{
		{"no environment.conf", "", []string{"modules"}},
		{"no modulepath setting", "manifest = site.pp\n", []string{"modules"}},
		{"site and modules", "modulepath = site:modules:$basemodulepath\n", []string{"site", "modules"}},
		{"cleaned, outside ignored", "# comment\nmodulepath=./dist:/opt/modules:../shared:modules/\n", []string{"dist", "modules"}},
		{"only basemodulepath", "modulepath = $basemodulepath\n", []string{}},
		{"environment itself", "modulepath = .\n", []string{""}},
		{"last wins", "modulepath = a\nmodulepath = b\n", []string{"b"}},
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
			m := snapshot(t, memstore.New(), dir)
			if !reflect.DeepEqual(m.Modulepath, tt.want) {
				t.Errorf("Modulepath = %q, want %q", m.Modulepath, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	good := snapshot(t, store, fixtureEnv(t))
	enc, _ := good.Encode()

	put := func(s string) string {
		d, err := store.Put(ctx, farm.SpaceCode, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return string(d)
	}
	sha := strings.Repeat("a", 64)
	tests := []struct {
		name   string
		codeID string
		want   error
	}{
		{"not a digest", "demo-code-id-production-0001", farm.ErrInvalid},
		{"unknown", strings.Repeat("0", 64), farm.ErrNotFound},
		{"not json", put("nope"), farm.ErrInvalid},
		{"not canonical", put(strings.Replace(string(enc), `{"format":1,`, `{ "format":1,`, 1)), farm.ErrInvalid},
		{"unknown field", put(strings.Replace(string(enc), `{"format":1,`, `{"format":1,"x":1,`, 1)), farm.ErrInvalid},
		{"future format", put(`{"format":2,"environment":"production","modulepath":["modules"],"entries":[]}`), farm.ErrInvalid},
		{"unsorted", put(`{"format":1,"environment":"production","modulepath":["modules"],"entries":[{"path":"b","type":"directory","mode":493},{"path":"a","type":"directory","mode":493}]}`), farm.ErrInvalid},
		{"no parent", put(`{"format":1,"environment":"production","modulepath":["modules"],"entries":[{"path":"a/b","type":"directory","mode":493}]}`), farm.ErrInvalid},
		{"dotdot path", put(`{"format":1,"environment":"production","modulepath":["modules"],"entries":[{"path":"../x","type":"directory","mode":493}]}`), farm.ErrInvalid},
		{"escaping link", put(`{"format":1,"environment":"production","modulepath":["modules"],"entries":[{"path":"l","type":"link","mode":511,"target":"../x"}]}`), farm.ErrInvalid},
		{"file without digest", put(`{"format":1,"environment":"production","modulepath":["modules"],"entries":[{"path":"f","type":"file","mode":420}]}`), farm.ErrInvalid},
		{"bad mode", put(`{"format":1,"environment":"production","modulepath":["modules"],"entries":[{"path":"f","type":"file","sha256":"` + sha + `","mode":2147484068}]}`), farm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(ctx, store, tt.codeID)
			if !errors.Is(err, tt.want) {
				t.Errorf("Load err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMaterialize(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	dir := fixtureEnv(t)
	if err := os.Chmod(filepath.Join(dir, "manifests/site.pp"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "modules/pupdemo/templates"), 0o750); err != nil {
		t.Fatal(err)
	}
	putFile(t, dir, "modules/pupdemo/files/run.sh", "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(dir, "modules/pupdemo/files/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, dir, "modules/pupdemo/files/alias.txt", "static.txt")
	m := snapshot(t, store, dir)

	root := filepath.Join(t.TempDir(), "code")
	envPath, err := Materialize(ctx, store, m, root)
	if err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	if envPath != filepath.Join(root, m.CodeID()) {
		t.Errorf("envPath = %s, want root/<code_id>", envPath)
	}
	env := filepath.Join(envPath, "production")
	// Same entries, contents and modes as the source.
	again := snapshot(t, memstore.New(), env)
	if again.CodeID() != m.CodeID() {
		t.Errorf("materialized tree snapshots to %s, want %s", again.CodeID(), m.CodeID())
	}
	for rel, want := range map[string]fs.FileMode{
		"manifests/site.pp":                0o600,
		"modules/pupdemo/files/run.sh":     0o755,
		"modules/pupdemo/files/static.txt": 0o644,
		"modules/pupdemo/templates":        0o750 | fs.ModeDir,
	} {
		fi, err := os.Stat(filepath.Join(env, rel))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode = %v, want %v", rel, fi.Mode(), want)
		}
	}
	if target, err := os.Readlink(filepath.Join(env, "modules/pupdemo/files/alias.txt")); err != nil || target != "static.txt" {
		t.Errorf("link = %q, %v", target, err)
	}

	// A second call reuses the tree.
	marker := filepath.Join(env, "marker")
	putFile(t, env, "marker", "x")
	if p, err := Materialize(ctx, store, m, root); err != nil || p != envPath {
		t.Fatalf("second Materialize = %s, %v", p, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("second Materialize rewrote the tree")
	}
}

func TestMaterializeReadOnlyDir(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	dir := fixtureEnv(t)
	if err := os.Chmod(filepath.Join(dir, "modules/pupdemo/templates"), 0o555); err != nil {
		t.Fatal(err)
	}
	m := snapshot(t, store, dir)
	if e, _ := m.Entry("modules/pupdemo/templates"); e.Mode != 0o555 {
		t.Errorf("recorded mode %v, want 0555", e.Mode)
	}
	envPath, err := Materialize(ctx, store, m, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(envPath, "production/modules/pupdemo/templates"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("materialized mode %v, want 0755 (recorded 0555 plus owner rwx)", fi.Mode().Perm())
	}
}

func TestMaterializeConcurrent(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	m := snapshot(t, store, fixtureEnv(t))
	loaded, err := Load(ctx, store, m.CodeID())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	const n = 8
	var wg sync.WaitGroup
	results := make([]string, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Materialize(ctx, store, loaded, root)
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil || results[i] != filepath.Join(root, m.CodeID()) {
			t.Errorf("call %d: %s, %v", i, results[i], errs[i])
		}
	}
	names, _ := os.ReadDir(root)
	if len(names) != 1 {
		var got []string
		for _, d := range names {
			got = append(got, d.Name())
		}
		t.Errorf("root holds %q, want only the code_id directory", got)
	}
}

func TestMaterializeMissingContent(t *testing.T) {
	ctx := context.Background()
	m := snapshot(t, memstore.New(), fixtureEnv(t))
	root := t.TempDir()
	// A store without the content: nothing may be left behind.
	_, err := Materialize(ctx, memstore.New(), m, root)
	if !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if names, _ := os.ReadDir(root); len(names) != 0 {
		t.Errorf("root not empty after a failed Materialize: %v", names)
	}
}

func TestMaterializeRejectsBadManifest(t *testing.T) {
	m := &Manifest{Format: ManifestFormat, Environment: "production", Entries: []Entry{
		{Path: "../escape", Type: TypeDirectory, Mode: 0o755},
	}}
	if _, err := Materialize(context.Background(), memstore.New(), m, t.TempDir()); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
}
