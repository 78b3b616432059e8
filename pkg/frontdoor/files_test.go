package frontdoor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/code"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// countingFiles counts the metadata lookups of a Files.
type countingFiles struct {
	Files
	lookups atomic.Int64
}

func (c *countingFiles) FileMetadata(ctx context.Context, codeID, key string, opts catalog.MetadataOptions) (catalog.FileMetadata, error) {
	c.lookups.Add(1)
	return c.Files.FileMetadata(ctx, codeID, key, opts)
}

func (c *countingFiles) FileMetadatas(ctx context.Context, codeID, key string, opts catalog.MetadataOptions) ([]catalog.FileMetadata, error) {
	c.lookups.Add(1)
	return c.Files.FileMetadatas(ctx, codeID, key, opts)
}

// TestMetadataAnswersKept: a file_metadata(s) answer is looked up once per
// code snapshot, path and query, and answered the same from memory; a
// deploy (another code_id) is answered from its own snapshot; failures
// are not kept.
func TestMetadataAnswersKept(t *testing.T) {
	r := newRig(t)
	files := &countingFiles{Files: r.fd.Files}
	r.fd.Files = files
	a1 := r.client("agent1.example.test")
	const pluginsync = "/puppet/v3/file_metadatas/plugins?recurse=true&ignore=.svn&ignore=CVS&ignore=.git&ignore=.hg&links=follow&checksum_type=sha256&source_permissions=ignore&environment=production"
	get := func(path string) response {
		t.Helper()
		return r.do(a1, "GET", path, nil, nil)
	}
	first := get(pluginsync)
	var entries []map[string]any
	if first.status != 200 || json.Unmarshal([]byte(first.body), &entries) != nil || len(entries) < 2 {
		t.Fatalf("pluginsync: %d %s", first.status, first.body)
	}
	steps := []struct {
		name, path  string
		wantStatus  int
		wantLookups int64 // after the step
	}{
		{"the same request", pluginsync, 200, 1},
		{"the same again", pluginsync, 200, 1},
		{"another query", pluginsync + "&recurselimit=1", 200, 2},
		{"one file", "/puppet/v3/file_metadata/modules/pupdemo/static.txt?links=follow&checksum_type=sha256&environment=production", 200, 3},
		{"one file again", "/puppet/v3/file_metadata/modules/pupdemo/static.txt?links=follow&checksum_type=sha256&environment=production", 200, 3},
		{"not found", "/puppet/v3/file_metadata/modules/pupdemo/absent.txt?environment=production", 404, 4},
		{"not found again", "/puppet/v3/file_metadata/modules/pupdemo/absent.txt?environment=production", 404, 5},
	}
	for _, s := range steps {
		resp := get(s.path)
		if resp.status != s.wantStatus || files.lookups.Load() != s.wantLookups {
			t.Fatalf("%s: %d, %d lookups; want %d, %d lookups", s.name, resp.status, files.lookups.Load(), s.wantStatus, s.wantLookups)
		}
		if s.path == pluginsync && (resp.body != first.body || resp.header.Get("Content-Type") != first.header.Get("Content-Type")) {
			t.Errorf("%s: answered %s %q, first %s %q", s.name, resp.header.Get("Content-Type"), resp.body, first.header.Get("Content-Type"), first.body)
		}
	}

	// A deploy: new code, a new plugin, a new answer.
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../testdata/puppet-protocol/production")); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "modules", "pupdemo", "lib", "facter", "deployed.rb")
	if err := os.WriteFile(lib, []byte("Facter.add(:deployed) { setcode { 1 } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := code.Snapshot(context.Background(), r.store, "production", dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.PutEnvironment(context.Background(), farm.Environment{Name: "production", CodeID: m.CodeID()}); err != nil {
		t.Fatal(err)
	}
	deployed := get(pluginsync)
	var after []map[string]any
	if deployed.status != 200 || json.Unmarshal([]byte(deployed.body), &after) != nil || len(after) != len(entries)+1 || files.lookups.Load() != 6 {
		t.Errorf("pluginsync after a deploy: %d, %d entries (%d before), %d lookups: %s", deployed.status, len(after), len(entries), files.lookups.Load(), deployed.body)
	}
}
