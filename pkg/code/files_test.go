package code

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// recordedEnvDir is where the recorded Puppet Server kept the environment.
const recordedEnvDir = "/etc/puppet/code/environments/production"

var ctimeRE = regexp.MustCompile(`\{ctime\}[^"]*`)

// normalize re-encodes JSON compactly with ctime values blanked, so a
// recorded body and ours compare byte for byte otherwise.
func normalize(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return ctimeRE.ReplaceAllString(string(out), "{ctime}T")
}

func readRecorded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../testdata/puppet-protocol", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fixtureFiles(t *testing.T) (*Files, *memstore.Store) {
	t.Helper()
	store := memstore.New()
	m := snapshot(t, store, fixtureEnv(t))
	return NewFiles(store, m, recordedEnvDir), store
}

// TestMetadataMatchesRecordings asks what the recorded agent asked and
// compares with what Puppet Server 7.9.5 answered (ctime values aside).
func TestMetadataMatchesRecordings(t *testing.T) {
	ctx := context.Background()
	trimmed := struct {
		Entries json.RawMessage `json:"entries"`
	}{}
	if err := json.Unmarshal(readRecorded(t, "file_metadatas-plugins-recurse.trimmed.json"), &trimmed); err != nil {
		t.Fatal(err)
	}
	var pluginEntries []json.RawMessage
	_ = json.Unmarshal(trimmed.Entries, &pluginEntries)
	// The first 7 entries are the pupdemo module's; the rest come from
	// modules of the server's basemodulepath, which a snapshot does not have.
	pluginsRecurse, _ := json.Marshal(pluginEntries[:7])

	tests := []struct {
		name         string
		single       bool
		key          string
		query        string
		owner, group int
		want         []byte
	}{
		{"file_metadata static", true, "modules/pupdemo/static.txt",
			"links=manage&checksum_type=sha256&source_permissions=ignore&environment=production", 102, 105,
			readRecorded(t, "file_metadata-static.body")},
		{"file_metadatas tree", false, "modules/pupdemo/tree",
			"recurse=true&max_files=0&links=manage&checksum_type=sha256&source_permissions=ignore&environment=production", 102, 105,
			readRecorded(t, "file_metadatas-tree.body")},
		{"pluginfacts", false, "pluginfacts",
			"recurse=true&max_files=-1&ignore=.svn&ignore=CVS&ignore=.git&ignore=.hg&links=follow&checksum_type=sha256&source_permissions=use&environment=production", 0, 0,
			readRecorded(t, "file_metadatas-pluginfacts.body")},
		{"plugins norecurse", false, "plugins",
			"recurse=false&links=manage&checksum_type=sha256&source_permissions=ignore&environment=production", 102, 105,
			readRecorded(t, "file_metadatas-plugins-norecurse.body")},
		{"plugins recurse", false, "plugins",
			"recurse=true&max_files=-1&ignore=.svn&ignore=CVS&ignore=.git&ignore=.hg&links=follow&checksum_type=sha256&source_permissions=ignore&environment=production", 102, 105,
			pluginsRecurse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, _ := fixtureFiles(t)
			files.Owner, files.Group = tt.owner, tt.group
			q, _ := url.ParseQuery(tt.query)
			opts, err := ParseMetadataQuery(q)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			if tt.single {
				md, err := files.FileMetadata(ctx, tt.key, opts)
				if err != nil {
					t.Fatal(err)
				}
				got, _ = json.Marshal(md)
			} else {
				mds, err := files.FileMetadatas(ctx, tt.key, opts)
				if err != nil {
					t.Fatal(err)
				}
				got, _ = json.Marshal(mds)
			}
			if g, w := normalize(t, got), normalize(t, tt.want); g != w {
				t.Errorf("metadata differs from the recording\n got %s\nwant %s", g, w)
			}
			if strings.Contains(string(got), "{ctime}") && !strings.Contains(string(got), `"{ctime}1970-01-01 00:00:00 +0000"`) {
				t.Errorf("directory ctime is not the fixed time: %s", got)
			}
		})
	}
}

func TestContentMatchesRecordings(t *testing.T) {
	ctx := context.Background()
	files, store := fixtureFiles(t)
	for _, tt := range []struct {
		name   string
		lookup func() (Entry, error)
		body   string
	}{
		{"file_content", func() (Entry, error) { return files.Manifest.Lookup("modules", "pupdemo/static.txt") }, "file_content-static.body"},
		{"static_file_content", func() (Entry, error) { return files.Manifest.LookupStatic("modules/pupdemo/files/static.txt") }, "static_file_content.body"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := tt.lookup()
			if err != nil {
				t.Fatal(err)
			}
			data, err := store.Get(ctx, farm.SpaceContent, e.SHA256)
			if err != nil {
				t.Fatal(err)
			}
			if want := readRecorded(t, tt.body); string(data) != string(want) {
				t.Errorf("content %q, want %q", data, want)
			}
		})
	}
}

// richEnv is the fixture plus a second module dir, links and tasks.
func richEnv(t *testing.T) (*Files, *memstore.Store) {
	t.Helper()
	dir := fixtureEnv(t)
	putFile(t, dir, "environment.conf", "modulepath = site:modules:$basemodulepath\n")
	putFile(t, dir, "site/profile/lib/facter/pupdemo_fact.rb", "# shadows pupdemo's\n")
	putFile(t, dir, "site/profile/lib/facter/profile_fact.rb", "# profile\n")
	putFile(t, dir, "site/profile/files/motd", "motd\n")
	putFile(t, dir, "site/profile/tasks/init.sh", "#!/bin/sh\n")
	putFile(t, dir, "site/profile/locales/config.yaml", "x: 1\n")
	putFile(t, dir, "site/Not_A_Module/lib/x.rb", "ignored\n")
	symlink(t, dir, "modules/pupdemo/files/alias.txt", "static.txt")
	symlink(t, dir, "modules/pupdemo/files/treelink", "tree")
	symlink(t, dir, "modules/pupdemo/files/dangling", "gone.txt")
	symlink(t, dir, "modules/pupdemo/files/tree/sub/loop", "..")
	symlink(t, dir, "modules/linked", "../site/profile")
	store := memstore.New()
	m := snapshot(t, store, dir)
	return NewFiles(store, m, "/envs/production"), store
}

func TestModules(t *testing.T) {
	files, _ := richEnv(t)
	got := files.Manifest.Modules()
	want := []Module{{"profile", "site/profile"}, {"linked", "modules/linked"}, {"pupdemo", "modules/pupdemo"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Modules() = %+v, want %+v", got, want)
	}
}

func TestLookup(t *testing.T) {
	files, _ := richEnv(t)
	m := files.Manifest
	tests := []struct {
		mount, rel string
		wantPath   string // resolved entry path; "" when an error is expected
		wantErr    error
	}{
		{"modules", "pupdemo/static.txt", "modules/pupdemo/files/static.txt", nil},
		{"modules", "pupdemo//tree/./one.txt", "modules/pupdemo/files/tree/one.txt", nil},
		{"modules", "pupdemo/alias.txt", "modules/pupdemo/files/static.txt", nil},
		{"modules", "pupdemo/treelink/sub/two.txt", "modules/pupdemo/files/tree/sub/two.txt", nil},
		{"modules", "profile/motd", "site/profile/files/motd", nil},
		{"modules", "linked/motd", "site/profile/files/motd", nil},
		{"plugins", "facter/pupdemo_fact.rb", "site/profile/lib/facter/pupdemo_fact.rb", nil}, // first module wins
		{"plugins", "puppet/functions/pupdemo/shout.rb", "modules/pupdemo/lib/puppet/functions/pupdemo/shout.rb", nil},
		{"pluginfacts", "ext.txt", "modules/pupdemo/facts.d/ext.txt", nil},
		{"locales", "config.yaml", "site/profile/locales/config.yaml", nil},
		{"tasks", "profile/init.sh", "site/profile/tasks/init.sh", nil},
		{"modules", "pupdemo/missing.txt", "", farm.ErrNotFound},
		{"modules", "pupdemo/dangling", "", farm.ErrNotFound},
		{"modules", "nosuch/x", "", farm.ErrNotFound},
		{"modules", "Not_A_Module/x", "", farm.ErrNotFound},
		{"nomount", "x", "", farm.ErrNotFound},
		{"plugins", "nothere.rb", "", farm.ErrNotFound},
		{"modules", "pupdemo/tree", "", farm.ErrInvalid}, // a directory
		{"modules", "", "", farm.ErrInvalid},
		{"modules", "pupdemo/../../../manifests/site.pp", "", farm.ErrInvalid},
		{"modules", "pupdemo/tree/..", "", farm.ErrInvalid},
		{"modules", `pupdemo\..\..\x`, "", farm.ErrInvalid},
		{"modules", "pupdemo/static.txt\x00", "", farm.ErrInvalid},
		{"../modules", "pupdemo/static.txt", "", farm.ErrInvalid},
		{"", "pupdemo/static.txt", "", farm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.mount+"/"+tt.rel, func(t *testing.T) {
			e, err := m.Lookup(tt.mount, tt.rel)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Path != tt.wantPath || e.Type != TypeFile || !e.SHA256.Valid() {
				t.Errorf("entry = %+v, want file %s", e, tt.wantPath)
			}
		})
	}
}

func TestLookupStatic(t *testing.T) {
	files, _ := richEnv(t)
	tests := []struct {
		path     string
		wantPath string
		wantErr  error
	}{
		{"modules/pupdemo/files/static.txt", "modules/pupdemo/files/static.txt", nil},
		{"modules/pupdemo/files/tree/sub/two.txt", "modules/pupdemo/files/tree/sub/two.txt", nil},
		{"site/profile/files/motd", "site/profile/files/motd", nil},
		{"modules/pupdemo/files/alias.txt", "modules/pupdemo/files/static.txt", nil},
		{"modules/pupdemo/files/missing", "", farm.ErrNotFound},
		{"modules/pupdemo/manifests/init.pp", "", farm.ErrInvalid},
		{"environment.conf", "", farm.ErrInvalid},
		{"modules/pupdemo/files/", "", farm.ErrInvalid},
		{"modules/pupdemo/files/tree", "", farm.ErrInvalid},
		{"modules/pupdemo/files/../manifests/init.pp", "", farm.ErrInvalid},
		{"/modules/pupdemo/files/static.txt/../../../../environment.conf", "", farm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			e, err := files.Manifest.LookupStatic(tt.path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || e.Path != tt.wantPath {
				t.Errorf("LookupStatic = %+v, %v; want %s", e, err, tt.wantPath)
			}
		})
	}
}

func rels(mds []FileMetadata) []string {
	var out []string
	for _, md := range mds {
		out = append(out, md.Path+" "+md.RelativePath+" "+md.Type)
	}
	return out
}

func TestFileMetadatas(t *testing.T) {
	ctx := context.Background()
	files, _ := richEnv(t)
	const mf = "/envs/production/modules/pupdemo/files"
	tests := []struct {
		name    string
		key     string
		opts    MetadataOptions
		want    []string
		wantErr error
	}{
		{"no recurse", "modules/pupdemo/tree", MetadataOptions{},
			[]string{mf + "/tree . directory"}, nil},
		{"recurse", "modules/pupdemo/tree", MetadataOptions{Recurse: true},
			[]string{mf + "/tree . directory", mf + "/tree one.txt file", mf + "/tree sub directory", mf + "/tree sub/loop link", mf + "/tree sub/two.txt file"}, nil},
		{"recurselimit 1", "modules/pupdemo/tree", MetadataOptions{Recurse: true, RecurseLimit: 1},
			[]string{mf + "/tree . directory", mf + "/tree one.txt file", mf + "/tree sub directory"}, nil},
		{"ignore dir", "modules/pupdemo/tree", MetadataOptions{Recurse: true, Ignore: []string{"sub"}},
			[]string{mf + "/tree . directory", mf + "/tree one.txt file"}, nil},
		{"ignore glob", "modules/pupdemo/tree", MetadataOptions{Recurse: true, Ignore: []string{"*.txt", "loop"}},
			[]string{mf + "/tree . directory", mf + "/tree sub directory"}, nil},
		{"max_files ok", "modules/pupdemo/tree", MetadataOptions{Recurse: true, MaxFiles: 4}, nil, nil},
		{"max_files exceeded", "modules/pupdemo/tree", MetadataOptions{Recurse: true, MaxFiles: 3}, nil, farm.ErrInvalid},
		{"link managed", "modules/pupdemo/treelink", MetadataOptions{Recurse: true},
			[]string{mf + "/treelink . link"}, nil},
		{"link followed", "modules/pupdemo/treelink", MetadataOptions{Recurse: true, Links: "follow", Ignore: []string{"loop"}},
			[]string{mf + "/treelink . directory", mf + "/treelink one.txt file", mf + "/treelink sub directory", mf + "/treelink sub/two.txt file"}, nil},
		{"loop followed", "modules/pupdemo/tree", MetadataOptions{Recurse: true, Links: "follow"}, nil, farm.ErrInvalid},
		{"single file", "modules/pupdemo/static.txt", MetadataOptions{Recurse: true},
			[]string{mf + "/static.txt . file"}, nil},
		{"plugins merged", "plugins", MetadataOptions{Recurse: true, RecurseLimit: 2},
			[]string{
				"/envs/production/site/profile/lib . directory",
				"/envs/production/site/profile/lib facter directory",
				"/envs/production/site/profile/lib facter/profile_fact.rb file",
				"/envs/production/site/profile/lib facter/pupdemo_fact.rb file",
				"/envs/production/modules/pupdemo/lib puppet directory",
				"/envs/production/modules/pupdemo/lib puppet/functions directory",
			}, nil},
		{"plugins path ignored", "plugins/anything", MetadataOptions{},
			[]string{"/envs/production/site/profile/lib . directory"}, nil},
		{"missing", "modules/pupdemo/nope", MetadataOptions{}, nil, farm.ErrNotFound},
		{"traversal", "modules/pupdemo/../x", MetadataOptions{}, nil, farm.ErrInvalid},
		{"bad links", "modules/pupdemo/tree", MetadataOptions{Links: "sideways"}, nil, farm.ErrInvalid},
		{"bad checksum", "modules/pupdemo/tree", MetadataOptions{ChecksumType: "crc32"}, nil, farm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mds, err := files.FileMetadatas(ctx, tt.key, tt.opts)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != nil && !reflect.DeepEqual(rels(mds), tt.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(rels(mds), "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestMergedMountWithoutModuleDirs(t *testing.T) {
	ctx := context.Background()
	dir := fixtureEnv(t)
	if err := os.RemoveAll(filepath.Join(dir, "modules/pupdemo/lib")); err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	files := NewFiles(store, snapshot(t, store, dir), "/envs/production")
	// Puppet answers the modulepath directory itself, without recursing.
	mds, err := files.FileMetadatas(ctx, "plugins", MetadataOptions{Recurse: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := rels(mds); !reflect.DeepEqual(got, []string{"/envs/production/modules . directory"}) {
		t.Errorf("got %q", got)
	}

	// An empty modulepath: Puppet answers its codedir (see TestMountsWithoutModules).
	putFile(t, dir, "environment.conf", "modulepath = $basemodulepath\n")
	files = NewFiles(store, snapshot(t, store, dir), "/envs/production")
	mds, err = files.FileMetadatas(ctx, "plugins", MetadataOptions{Recurse: true})
	if got := rels(mds); err != nil || !reflect.DeepEqual(got, []string{"/ . directory"}) {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestFileMetadataSingle(t *testing.T) {
	ctx := context.Background()
	files, _ := richEnv(t)
	const mf = "/envs/production/modules/pupdemo/files"
	tests := []struct {
		name    string
		files   *Files
		key     string
		opts    MetadataOptions
		want    string // JSON
		wantErr error
	}{
		{"file", files, "modules/pupdemo/static.txt", MetadataOptions{},
			`{"path":"` + mf + `/static.txt","relative_path":null,"links":"manage","owner":0,"group":0,"mode":420,"checksum":{"type":"sha256","value":"{sha256}f2f24e6739d74b395d63997888a8ba34808c777ad8d5076502f20883845458b4"},"type":"file","destination":null}`, nil},
		{"directory", files, "modules/pupdemo/tree", MetadataOptions{SourcePermissions: "use"},
			`{"path":"` + mf + `/tree","relative_path":null,"links":"manage","owner":0,"group":0,"mode":493,"checksum":{"type":"ctime","value":"{ctime}1970-01-01 00:00:00 +0000"},"type":"directory","destination":null}`, nil},
		{"link managed", files, "modules/pupdemo/alias.txt", MetadataOptions{},
			`{"path":"` + mf + `/alias.txt","relative_path":null,"links":"manage","owner":0,"group":0,"mode":420,"checksum":{"type":"sha256","value":"{sha256}f2f24e6739d74b395d63997888a8ba34808c777ad8d5076502f20883845458b4"},"type":"link","destination":"static.txt"}`, nil},
		{"link followed", files, "modules/pupdemo/alias.txt", MetadataOptions{Links: "follow"},
			`{"path":"` + mf + `/alias.txt","relative_path":null,"links":"follow","owner":0,"group":0,"mode":420,"checksum":{"type":"sha256","value":"{sha256}f2f24e6739d74b395d63997888a8ba34808c777ad8d5076502f20883845458b4"},"type":"file","destination":null}`, nil},
		{"link to dir", files, "modules/pupdemo/treelink", MetadataOptions{},
			`{"path":"` + mf + `/treelink","relative_path":null,"links":"manage","owner":0,"group":0,"mode":420,"checksum":{"type":"sha256","value":null},"type":"link","destination":"tree"}`, nil},
		{"link to dir, use", files, "modules/pupdemo/treelink", MetadataOptions{SourcePermissions: "use"},
			`{"path":"` + mf + `/treelink","relative_path":null,"links":"manage","owner":0,"group":0,"mode":511,"checksum":{"type":"sha256","value":null},"type":"link","destination":"tree"}`, nil},
		{"missing", files, "modules/pupdemo/missing.txt", MetadataOptions{}, "", farm.ErrNotFound},
		{"dangling followed", files, "modules/pupdemo/dangling", MetadataOptions{Links: "follow"}, "", farm.ErrNotFound},
		{"plugins find", files, "plugins/facter/pupdemo_fact.rb", MetadataOptions{}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := tt.files.FileMetadata(ctx, tt.key, tt.opts)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(md)
			switch {
			case strings.HasPrefix(tt.want, "{"+"\""):
				if string(got) != tt.want {
					t.Errorf("got  %s\nwant %s", got, tt.want)
				}
			case tt.want != "":
				if !strings.HasPrefix(md.Checksum.Value, tt.want) || md.Checksum.Type != tt.opts.ChecksumType {
					t.Errorf("checksum = %+v, want prefix %s", md.Checksum, tt.want)
				}
			}
		})
	}
}

func TestChecksumTypes(t *testing.T) {
	ctx := context.Background()
	big := strings.Repeat("0123456789abcdef", 64) // 1024 bytes: lite checksums differ
	dir := fixtureEnv(t)
	putFile(t, dir, "modules/pupdemo/files/big", big)
	symlink(t, dir, "modules/pupdemo/files/biglink", "big")
	store := memstore.New()
	files := NewFiles(store, snapshot(t, store, dir), "/envs/production")

	sum := func(h hash.Hash, data string) string { h.Write([]byte(data)); return hex.EncodeToString(h.Sum(nil)) }
	lite := big[:512]
	want := map[string]string{
		"sha256":     sum(sha256.New(), big),
		"sha256lite": sum(sha256.New(), lite),
		"md5":        sum(md5.New(), big),
		"md5lite":    sum(md5.New(), lite),
		"sha1":       sum(sha1.New(), big),
		"sha1lite":   sum(sha1.New(), lite),
		"sha512":     sum(sha512.New(), big),
		"sha384":     sum(sha512.New384(), big),
		"sha224":     sum(sha256.New224(), big),
		"mtime":      "1970-01-01 00:00:00 +0000",
		"ctime":      "1970-01-01 00:00:00 +0000",
		"none":       "",
	}
	if len(want) != len(catalog.ChecksumTypes) {
		t.Fatalf("test covers %d types, catalog.ChecksumTypes has %d", len(want), len(catalog.ChecksumTypes))
	}
	for _, typ := range catalog.ChecksumTypes {
		for _, key := range []string{"modules/pupdemo/big", "modules/pupdemo/biglink"} {
			md, err := files.FileMetadata(ctx, key, MetadataOptions{ChecksumType: typ})
			if err != nil {
				t.Fatalf("%s %s: %v", typ, key, err)
			}
			if w := "{" + typ + "}" + want[typ]; md.Checksum.Type != typ || md.Checksum.Value != w {
				t.Errorf("%s %s: checksum %+v, want %s", typ, key, md.Checksum, w)
			}
		}
	}
}

func TestParseMetadataQuery(t *testing.T) {
	tests := []struct {
		query   string
		want    MetadataOptions
		wantErr bool
	}{
		{"", MetadataOptions{Links: "manage", ChecksumType: "sha256", SourcePermissions: "ignore"}, false},
		{"recurse=true&max_files=-1&ignore=.svn&ignore=CVS&links=follow&checksum_type=md5&source_permissions=use&environment=production",
			MetadataOptions{Links: "follow", ChecksumType: "md5", SourcePermissions: "use", Recurse: true, MaxFiles: -1, Ignore: []string{".svn", "CVS"}}, false},
		{"recurse=true&recurselimit=2&max_files=10", MetadataOptions{Links: "manage", ChecksumType: "sha256", SourcePermissions: "ignore", Recurse: true, RecurseLimit: 2, MaxFiles: 10}, false},
		{"recurse=true&recurselimit=0", MetadataOptions{Links: "manage", ChecksumType: "sha256", SourcePermissions: "ignore"}, false},
		{"links=ignore", MetadataOptions{Links: "manage", ChecksumType: "sha256", SourcePermissions: "ignore"}, false},
		{"recurse=maybe", MetadataOptions{}, true},
		{"recurselimit=x", MetadataOptions{}, true},
		{"max_files=-2", MetadataOptions{}, true},
		{"links=sideways", MetadataOptions{}, true},
		{"checksum_type=crc", MetadataOptions{}, true},
		{"source_permissions=maybe", MetadataOptions{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			got, err := ParseMetadataQuery(q)
			if tt.wantErr {
				if !errors.Is(err, farm.ErrInvalid) {
					t.Errorf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestFnmatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{".git", ".git", true},
		{"CVS", "CVS", true},
		{"CVS", "cvs", false},
		{"*.txt", "one.txt", true},
		{"*.txt", "one.txt.bak", false},
		{"*", ".hidden", false}, // a leading dot needs a literal dot
		{".*", ".hidden", true},
		{"?git", ".git", false},
		{"*~", "file~", true},
		{"f?le", "file", true},
		{"[abc]x", "bx", true},
		{"[!abc]x", "bx", false},
		{"[^abc]x", "dx", true},
		{"[a-c]x", "cx", true},
		{"[a-c]x", "dx", false},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{"[x", "[x", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
	}
	for _, tt := range tests {
		if got := fnmatch(tt.pattern, tt.name); got != tt.want {
			t.Errorf("fnmatch(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

// TestConcurrentUse serves one freshly loaded manifest from many goroutines
// (run with -race).
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	m := snapshot(t, store, fixtureEnv(t))
	loaded, err := Load(ctx, store, m.CodeID())
	if err != nil {
		t.Fatal(err)
	}
	files := NewFiles(store, loaded, recordedEnvDir)
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		go func() {
			_, err := files.FileMetadatas(ctx, "plugins", MetadataOptions{Recurse: true, ChecksumType: "md5"})
			if err == nil {
				_, err = loaded.Lookup("modules", "pupdemo/tree/one.txt")
			}
			if err == nil && loaded.CodeID() != m.CodeID() {
				err = errors.New("code_id changed")
			}
			errs <- err
		}()
	}
	for i := 0; i < 16; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
