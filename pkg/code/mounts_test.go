package code

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// TestMountsWithoutModules: an environment with no module directory at all
// answers the merged mounts with Puppet's listing (its codedir, one
// directory, recurse off), so an agent with strict_environment_mode finds
// the environment; single-file lookups in them find nothing, as in Puppet.
func TestMountsWithoutModules(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "production")
	putFile(t, dir, "manifests/site.pp", "node default { notify { 'no modules': } }\n")
	store := memstore.New()
	m := snapshot(t, store, dir)
	if len(m.ModuleDirs()) != 0 {
		t.Fatalf("module dirs %q, want none", m.ModuleDirs())
	}
	// The recorded server's environment directory: its codedir is Debian's.
	files := NewFiles(store, m, recordedEnvDir)
	const dirEntry = `{"path":"/etc/puppet/code","relative_path":".","links":"%s","owner":0,"group":0,"mode":%d,` +
		`"checksum":{"type":"ctime","value":"{ctime}1970-01-01 00:00:00 +0000"},"type":"directory","destination":null}`
	tests := []struct {
		key  string
		opts MetadataOptions
		want string
	}{
		{"plugins", MetadataOptions{Recurse: false, Links: "manage", SourcePermissions: "ignore"}, fmt.Sprintf(dirEntry, "manage", 420)},
		{"plugins", MetadataOptions{Recurse: true, Links: "manage", SourcePermissions: "ignore"}, fmt.Sprintf(dirEntry, "manage", 420)},
		{"pluginfacts", MetadataOptions{Recurse: true, Links: "follow", SourcePermissions: "ignore"}, fmt.Sprintf(dirEntry, "follow", 420)},
		{"locales", MetadataOptions{Recurse: true, Links: "follow"}, fmt.Sprintf(dirEntry, "follow", 420)},
		{"locales/whatever/path", MetadataOptions{Recurse: true, Links: "manage", SourcePermissions: "use"}, fmt.Sprintf(dirEntry, "manage", 493)},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			mds, err := files.FileMetadatas(ctx, tt.key, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(mds)
			if string(got) != "["+tt.want+"]" {
				t.Errorf("got\n  %s\nwant\n  [%s]", got, tt.want)
			}
		})
	}
	for _, key := range []string{"plugins", "plugins/facter/x.rb", "pluginfacts/x.txt", "modules/x/y", "tasks/x/y"} {
		if _, err := files.FileMetadata(ctx, key, MetadataOptions{}); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("FileMetadata(%s) = %v, want ErrNotFound", key, err)
		}
	}
	if _, err := files.FileMetadatas(ctx, "modules/x", MetadataOptions{}); !errors.Is(err, farm.ErrNotFound) {
		t.Errorf("FileMetadatas(modules/x) = %v, want ErrNotFound", err)
	}

	// Served by the library, the codedir is the public one.
	lib := NewLibrary(store, t.TempDir())
	mds, err := lib.FileMetadatas(ctx, m.CodeID(), "plugins", MetadataOptions{Recurse: true})
	if err != nil || len(mds) != 1 || mds[0].Path != "/compilefarm" || mds[0].RelativePath != "." {
		t.Errorf("library: %+v, %v; want one entry for /compilefarm", mds, err)
	}
}
