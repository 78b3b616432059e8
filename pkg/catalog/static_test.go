package catalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// fixtureFiles snapshots ../../testdata/puppet-protocol/production (copied with modes 0755/0644)
// and serves it from envDir.
func fixtureFiles(t *testing.T, envDir string) *code.Files {
	t.Helper()
	src := filepath.Join("../../testdata/puppet-protocol", "production")
	dst := filepath.Join(t.TempDir(), "production")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	m, err := code.Snapshot(context.Background(), store, "production", dst)
	if err != nil {
		t.Fatal(err)
	}
	return code.NewFiles(store, m, envDir)
}

var ctimeRE = regexp.MustCompile(`\{ctime\}[^"]*`)

// staticParts returns metadata and recursive_metadata with the environment
// directory replaced, owner and group zeroed and ctime values blanked.
func staticParts(t *testing.T, catalogJSON []byte, envDir string) string {
	t.Helper()
	c, err := catalog.Parse(catalogJSON)
	if err != nil {
		t.Fatal(err)
	}
	md, err := c.FileMetadata()
	if err != nil {
		t.Fatal(err)
	}
	rmd, err := c.RecursiveFileMetadata()
	if err != nil {
		t.Fatal(err)
	}
	fix := func(m catalog.FileMetadata) catalog.FileMetadata {
		m.Path = strings.Replace(m.Path, envDir, "<env>", 1)
		m.Owner, m.Group = 0, 0
		m.Checksum.Value = ctimeRE.ReplaceAllString(m.Checksum.Value, "{ctime}T")
		return m
	}
	for k, v := range md {
		md[k] = fix(v)
	}
	for _, bySource := range rmd {
		for _, list := range bySource {
			for i := range list {
				list[i] = fix(list[i])
			}
		}
	}
	b, _ := json.MarshalIndent(map[string]any{"metadata": md, "recursive_metadata": rmd}, "", " ")
	return string(b)
}

// TestMakeStaticGolden compiles nothing: it takes the catalog Puppet Server
// compiled for agent1 without a code_id, makes it static against a snapshot
// of the same code, and compares with the static catalog Puppet Server
// answered when asked with a code_id.
func TestMakeStaticGolden(t *testing.T) {
	const ourEnvDir = "/var/lib/compilefarm/code/0123/production"
	const theirEnvDir = "/etc/puppet/code/environments/production"
	files := fixtureFiles(t, ourEnvDir)
	in := readTestdata(t, "catalog-agent1.body")
	want := readTestdata(t, "catalog-agent1-static-with-code_id.body")
	codeID := files.Manifest.CodeID()

	out, err := catalog.MakeStatic(context.Background(), in, codeID, files)
	if err != nil {
		t.Fatal(err)
	}
	if got, w := staticParts(t, out, ourEnvDir), staticParts(t, want, theirEnvDir); got != w {
		t.Errorf("static metadata differs from Puppet Server's\n got %s\nwant %s", got, w)
	}

	c, err := catalog.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.CodeID != codeID {
		t.Errorf("code_id = %q, want %q", c.CodeID, codeID)
	}
	orig, _ := catalog.Parse(in)
	if !reflect.DeepEqual(c.Resources, orig.Resources) || !reflect.DeepEqual(c.Edges, orig.Edges) || !reflect.DeepEqual(c.Classes, orig.Classes) {
		t.Errorf("MakeStatic changed resources, edges or classes")
	}
	// Same keys in the same order as Puppet Server's static catalog.
	keyOrder := func(b []byte) []string {
		d := json.NewDecoder(bytes.NewReader(b))
		var keys []string
		_, _ = d.Token()
		for d.More() {
			k, _ := d.Token()
			keys = append(keys, k.(string))
			var skip json.RawMessage
			_ = d.Decode(&skip)
		}
		return keys
	}
	if got, w := keyOrder(out), keyOrder(want); !reflect.DeepEqual(got, w) {
		t.Errorf("keys %q, want %q", got, w)
	}

	// Deterministic, and idempotent on its own output.
	again, err := catalog.MakeStatic(context.Background(), in, codeID, files)
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("second MakeStatic differs (err %v)", err)
	}
	twice, err := catalog.MakeStatic(context.Background(), out, codeID, files)
	if err != nil || !bytes.Equal(twice, out) {
		t.Errorf("MakeStatic of a static catalog differs (err %v)", err)
	}
}

// fakeFiles answers from a table keyed by request key and records the
// options it was asked with.
type fakeFiles struct {
	single map[string]catalog.FileMetadata
	search map[string][]catalog.FileMetadata
	asked  []string
}

func (f *fakeFiles) EnvironmentDir() string { return "/env" }

func (f *fakeFiles) FileMetadata(_ context.Context, key string, o catalog.MetadataOptions) (catalog.FileMetadata, error) {
	f.asked = append(f.asked, fmt.Sprintf("find %s %s %s %s", key, o.Links, o.ChecksumType, o.SourcePermissions))
	if key == "modules/broken/x" {
		return catalog.FileMetadata{}, fmt.Errorf("boom: %w", farm.ErrTransient)
	}
	md, ok := f.single[key]
	if !ok {
		return md, fmt.Errorf("%s: %w", key, farm.ErrNotFound)
	}
	return md, nil
}

func (f *fakeFiles) FileMetadatas(_ context.Context, key string, o catalog.MetadataOptions) ([]catalog.FileMetadata, error) {
	f.asked = append(f.asked, fmt.Sprintf("search %s %s %s %v %d %d %q", key, o.Links, o.ChecksumType, o.Recurse, o.RecurseLimit, o.MaxFiles, o.Ignore))
	list, ok := f.search[key]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, farm.ErrNotFound)
	}
	return append([]catalog.FileMetadata(nil), list...), nil
}

func fileMD(path, rel, typ string) catalog.FileMetadata {
	return catalog.FileMetadata{Path: path, RelativePath: rel, Links: "manage", Mode: 420, Type: typ,
		Checksum: catalog.Checksum{Type: "sha256", Value: "{sha256}" + strings.Repeat("a", 64)}}
}

func newFake() *fakeFiles {
	return &fakeFiles{
		single: map[string]catalog.FileMetadata{
			"modules/m/a.txt":     fileMD("/env/modules/m/files/a.txt", "", "file"),
			"modules/m/b.txt":     fileMD("/env/modules/m/files/b.txt", "", "file"),
			"modules/site_m/c":    fileMD("/env/site/site_m/files/c", "", "file"),
			"modules/deep/d":      fileMD("/env/dist/x/deep/files/d", "", "file"),
			"modules/outside/e":   fileMD("/opt/modules/outside/files/e", "", "file"),
			"plugins/facter/f.rb": fileMD("/env/modules/m/lib/facter/f.rb", "", "file"),
			"modules/m/dir":       fileMD("/env/modules/m/files/dir", "", "directory"),
		},
		search: map[string][]catalog.FileMetadata{
			"modules/m/dir": {
				fileMD("/env/modules/m/files/dir", ".", "directory"),
				fileMD("/env/modules/m/files/dir", "x", "file"),
			},
			"modules/m/dir2": {
				fileMD("/env/modules/m/files/dir2", ".", "directory"),
			},
			"modules/outside/dir": {
				fileMD("/opt/modules/outside/files/dir", ".", "directory"),
			},
		},
	}
}

func fileResource(title string, params string) string {
	return `{"type":"File","title":"` + title + `","tags":["file"],"exported":false,"parameters":` + params + `}`
}

func TestMakeStaticRules(t *testing.T) {
	type result struct {
		Metadata  map[string]catalog.FileMetadata
		Recursive map[string]map[string][]catalog.FileMetadata
	}
	single := func(title, source, uri, path string) result {
		md := fileMD(path, "", "file")
		if strings.HasSuffix(path, "/dir") {
			md.Type = "directory"
		}
		md.Source, md.ContentURI = source, uri
		return result{Metadata: map[string]catalog.FileMetadata{title: md}}
	}
	tests := []struct {
		name      string
		resources []string
		want      result
		wantAsked []string // nil: not checked
		wantErr   error
	}{
		{"single source", []string{fileResource("/t", `{"ensure":"file","source":"puppet:///modules/m/a.txt"}`)},
			single("/t", "puppet:///modules/m/a.txt", "puppet:///modules/m/files/a.txt", "/env/modules/m/files/a.txt"),
			[]string{"find modules/m/a.txt manage sha256 ignore"}, nil},
		{"server and port kept", []string{fileResource("/t", `{"source":"puppet://puppet.example:8140/modules/m/a.txt"}`)},
			single("/t", "puppet://puppet.example:8140/modules/m/a.txt", "puppet://puppet.example:8140/modules/m/files/a.txt", "/env/modules/m/files/a.txt"), nil, nil},
		{"trailing slash dropped", []string{fileResource("/t", `{"source":"puppet:///modules/m/a.txt/"}`)},
			single("/t", "puppet:///modules/m/a.txt", "puppet:///modules/m/files/a.txt", "/env/modules/m/files/a.txt"), nil, nil},
		{"first existing of an array", []string{fileResource("/t", `{"source":["puppet:///modules/m/missing",null,"puppet:///modules/m/b.txt","puppet:///modules/m/a.txt"]}`)},
			single("/t", "puppet:///modules/m/b.txt", "puppet:///modules/m/files/b.txt", "/env/modules/m/files/b.txt"),
			[]string{"find modules/m/missing manage sha256 ignore", "find modules/m/b.txt manage sha256 ignore"}, nil},
		{"other module dir", []string{fileResource("/t", `{"source":"puppet:///modules/site_m/c"}`)},
			single("/t", "puppet:///modules/site_m/c", "puppet:///site/site_m/files/c", "/env/site/site_m/files/c"), nil, nil},
		{"links, checksum and permissions passed", []string{fileResource("/t", `{"source":"puppet:///modules/m/a.txt","links":"follow","checksum":"md5","source_permissions":"use"}`)},
			single("/t", "puppet:///modules/m/a.txt", "puppet:///modules/m/files/a.txt", "/env/modules/m/files/a.txt"),
			[]string{"find modules/m/a.txt follow md5 use"}, nil},
		{"directory without recurse", []string{fileResource("/t", `{"ensure":"directory","source":"puppet:///modules/m/dir","recurse":false}`)},
			single("/t", "puppet:///modules/m/dir", "puppet:///modules/m/files/dir", "/env/modules/m/files/dir"), nil, nil},
		{"absent skipped", []string{fileResource("/t", `{"ensure":"absent","source":"puppet:///modules/m/a.txt"}`)}, result{}, []string{}, nil},
		{"content skipped", []string{fileResource("/t", `{"content":"x","source":"puppet:///modules/m/a.txt"}`)}, result{}, []string{}, nil},
		{"no source skipped", []string{fileResource("/t", `{"ensure":"file"}`)}, result{}, []string{}, nil},
		{"not File skipped", []string{`{"type":"Notify","title":"n","tags":[],"exported":false,"parameters":{"source":"puppet:///modules/m/a.txt"}}`}, result{}, []string{}, nil},
		{"other scheme skipped", []string{fileResource("/t", `{"source":"https://example.com/a.txt"}`)}, result{}, []string{}, nil},
		{"mixed schemes skipped", []string{fileResource("/t", `{"source":["puppet:///modules/m/a.txt","file:///tmp/a"]}`)}, result{}, []string{}, nil},
		{"rich data source skipped", []string{fileResource("/t", `{"source":{"__ptype":"Sensitive","__pvalue":"x"}}`)}, result{}, []string{}, nil},
		{"not the modules mount", []string{fileResource("/t", `{"source":"puppet:///plugins/facter/f.rb"}`)}, result{}, nil, nil},
		{"not in a module's files", []string{fileResource("/t", `{"source":"puppet:///modules/deep/d"}`)}, result{}, nil, nil},
		{"outside the environment", []string{fileResource("/t", `{"source":"puppet:///modules/outside/e"}`)}, result{}, nil, nil},
		{"missing source fails", []string{fileResource("/t", `{"source":["puppet:///modules/m/x","puppet:///modules/m/y"]}`)}, result{}, nil, farm.ErrInvalid},
		{"resolver error fails", []string{fileResource("/t", `{"source":"puppet:///modules/broken/x"}`)}, result{}, nil, farm.ErrTransient},
		{"recursive", []string{fileResource("/t", `{"ensure":"directory","source":"puppet:///modules/m/dir","recurse":true}`)},
			result{Recursive: map[string]map[string][]catalog.FileMetadata{"/t": {"puppet:///modules/m/dir": {
				withURI(fileMD("/env/modules/m/files/dir", ".", "directory"), "puppet:///modules/m/files/dir"),
				withURI(fileMD("/env/modules/m/files/dir", "x", "file"), "puppet:///modules/m/files/dir/x"),
			}}}},
			[]string{`search modules/m/dir manage sha256 true 0 0 []`}, nil},
		{"recursive options", []string{fileResource("/t", `{"source":"puppet:///modules/m/dir2","recurse":"remote","recurselimit":"2","max_files":-1,"ignore":".git","links":"follow","checksum":"sha1"}`)},
			result{Recursive: map[string]map[string][]catalog.FileMetadata{"/t": {"puppet:///modules/m/dir2": {
				withURI(fileMD("/env/modules/m/files/dir2", ".", "directory"), "puppet:///modules/m/files/dir2"),
			}}}},
			[]string{`search modules/m/dir2 follow sha1 true 2 -1 [".git"]`}, nil},
		{"recursive first existing", []string{fileResource("/t", `{"source":["puppet:///modules/m/none","puppet:///modules/m/dir2","puppet:///modules/m/dir"],"recurse":"true"}`)},
			result{Recursive: map[string]map[string][]catalog.FileMetadata{"/t": {"puppet:///modules/m/dir2": {
				withURI(fileMD("/env/modules/m/files/dir2", ".", "directory"), "puppet:///modules/m/files/dir2"),
			}}}},
			[]string{`search modules/m/none manage sha256 true 0 0 []`, `search modules/m/dir2 manage sha256 true 0 0 []`}, nil},
		{"recursive sourceselect all", []string{fileResource("/t", `{"source":["puppet:///modules/m/dir2","puppet:///modules/m/dir"],"recurse":true,"sourceselect":"all"}`)},
			result{Recursive: map[string]map[string][]catalog.FileMetadata{"/t": {
				"puppet:///modules/m/dir2": {withURI(fileMD("/env/modules/m/files/dir2", ".", "directory"), "puppet:///modules/m/files/dir2")},
				"puppet:///modules/m/dir": {
					withURI(fileMD("/env/modules/m/files/dir", ".", "directory"), "puppet:///modules/m/files/dir"),
					withURI(fileMD("/env/modules/m/files/dir", "x", "file"), "puppet:///modules/m/files/dir/x"),
				},
			}}}, nil, nil},
		{"recursive none existing", []string{fileResource("/t", `{"source":"puppet:///modules/m/none","recurse":true}`)}, result{}, nil, nil},
		{"recursive outside", []string{fileResource("/t", `{"source":["puppet:///modules/outside/dir","puppet:///modules/m/dir"],"recurse":true,"sourceselect":"all"}`)}, result{}, nil, nil},
		{"recurselimit 0 lists the root", []string{fileResource("/t", `{"source":"puppet:///modules/m/dir2","recurse":true,"recurselimit":0}`)},
			result{Recursive: map[string]map[string][]catalog.FileMetadata{"/t": {"puppet:///modules/m/dir2": {
				withURI(fileMD("/env/modules/m/files/dir2", ".", "directory"), "puppet:///modules/m/files/dir2"),
			}}}},
			[]string{`search modules/m/dir2 manage sha256 false 0 0 []`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"tags":[],"name":"n","version":1,"code_id":null,"catalog_uuid":"u","catalog_format":2,"environment":"production","resources":[` +
				strings.Join(tt.resources, ",") + `],"edges":[],"classes":[]}`
			files := newFake()
			out, err := catalog.MakeStatic(context.Background(), []byte(in), "cid", files)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := catalog.Parse(out)
			if err != nil {
				t.Fatal(err)
			}
			var got result
			if md, _ := c.FileMetadata(); len(md) > 0 {
				got.Metadata = md
			}
			if rmd, _ := c.RecursiveFileMetadata(); len(rmd) > 0 {
				got.Recursive = rmd
			}
			if !reflect.DeepEqual(got, tt.want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(tt.want, "", " ")
				t.Errorf("got %s\nwant %s", g, w)
			}
			if tt.wantAsked != nil && !reflect.DeepEqual(append([]string{}, files.asked...), tt.wantAsked) {
				t.Errorf("asked %q, want %q", files.asked, tt.wantAsked)
			}
			if c.CodeID != "cid" {
				t.Errorf("code_id = %q", c.CodeID)
			}
			if (len(c.Metadata) == 0) != (tt.want.Metadata == nil) || (len(c.RecursiveMetadata) == 0) != (tt.want.Recursive == nil) {
				t.Errorf("empty metadata must be left out: %s", out)
			}
		})
	}
}

func withURI(md catalog.FileMetadata, uri string) catalog.FileMetadata {
	md.ContentURI = uri
	return md
}

func TestMakeStaticBadInput(t *testing.T) {
	if _, err := catalog.MakeStatic(context.Background(), []byte("{"), "cid", newFake()); !errors.Is(err, farm.ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := readTestdata(t, "catalog-agent1.body")
	if _, err := catalog.MakeStatic(ctx, in, "cid", newFake()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

func TestFileMetadataJSON(t *testing.T) {
	// Puppet's shapes: nulls for relative_path, destination and an unknown
	// checksum; content_uri and source only when set.
	md := catalog.FileMetadata{Path: "/p", Links: "manage", Mode: 420, Type: "link", Checksum: catalog.Checksum{Type: "sha256"}}
	got, _ := json.Marshal(md)
	want := `{"path":"/p","relative_path":null,"links":"manage","owner":0,"group":0,"mode":420,"checksum":{"type":"sha256","value":null},"type":"link","destination":null}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var back catalog.FileMetadata
	if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, md) {
		t.Errorf("round trip = %+v, %v", back, err)
	}
	md.RelativePath, md.Destination, md.ContentURI, md.Source = ".", "t&<", "puppet:///x", "puppet:///y"
	got, _ = json.Marshal(md)
	if !strings.Contains(string(got), `"relative_path":"."`) || !strings.Contains(string(got), `"content_uri":"puppet:///x","source":"puppet:///y"}`) {
		t.Errorf("got %s", got)
	}
}

func TestMetadataOptionsNormalize(t *testing.T) {
	got, err := catalog.MetadataOptions{Links: "ignore", RecurseLimit: -3}.Normalize()
	want := catalog.MetadataOptions{Links: "manage", ChecksumType: "sha256", SourcePermissions: "ignore"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Normalize = %+v, %v", got, err)
	}
	for _, bad := range []catalog.MetadataOptions{{Links: "x"}, {ChecksumType: "crc32"}, {SourcePermissions: "x"}} {
		if _, err := bad.Normalize(); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("Normalize(%+v) err = %v", bad, err)
		}
	}
}
