package code

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/memstore"
)

// TestLibraryPublicPaths: catalogs compiled from a checkout show the
// environment's public path, not the checkout's.
func TestLibraryPublicPaths(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	m, err := Snapshot(ctx, store, "production", "../../testdata/puppet-protocol/production")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	lib := NewLibrary(store, root)
	envPath, err := lib.EnvironmentPath(ctx, m.CodeID())
	if err != nil {
		t.Fatal(err)
	}
	checkout := filepath.Join(envPath, "production")
	if _, err := os.Stat(filepath.Join(checkout, "manifests", "site.pp")); err != nil {
		t.Fatalf("checkout: %v", err)
	}
	compiled, err := os.ReadFile("../../testdata/puppet-protocol/catalog-agent1.body")
	if err != nil {
		t.Fatal(err)
	}
	// As the engine would produce it from this checkout.
	compiled = []byte(strings.ReplaceAll(string(compiled), "/etc/puppet/code/environments/production/", checkout+"/"))
	static, err := lib.MakeStatic(ctx, compiled, m.CodeID())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(static), root) {
		t.Errorf("static catalog still names the checkout %s", root)
	}
	if !strings.Contains(string(static), `"file":"/compilefarm/environments/production/modules/pupdemo/manifests/init.pp"`) ||
		!strings.Contains(string(static), `"path":"/compilefarm/environments/production/modules/pupdemo/files/static.txt"`) {
		t.Errorf("static catalog lacks public paths:\n%.600s", static)
	}
	msg, _ := lib.Publish(ctx, m.CodeID(), []byte("Syntax error (file: "+checkout+"/manifests/site.pp, line: 2)"))
	if string(msg) != "Syntax error (file: /compilefarm/environments/production/manifests/site.pp, line: 2)" {
		t.Errorf("Publish = %q", msg)
	}
}
