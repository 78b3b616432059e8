package command

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/compiler/puppet"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

// debianModules are the modules of Debian's packages the test
// environment's nodes use (/usr/share/puppet/modules).
var debianModules = []string{"apache", "concat", "stdlib", "ntp", "host_core", "sshkeys_core"}

// testEnvironment is a code snapshot of testdata/envs/production with
// debianModules: its environmentpath.
func testEnvironment(t *testing.T) string {
	t.Helper()
	envpath := t.TempDir()
	env := filepath.Join(envpath, "production")
	if err := os.CopyFS(env, os.DirFS("testdata/envs/production")); err != nil {
		t.Fatal(err)
	}
	for _, m := range debianModules {
		src := filepath.Join("/usr/share/puppet/modules", m)
		if err := os.CopyFS(filepath.Join(env, "modules", m), os.DirFS(src)); err != nil {
			t.Fatalf("copy Debian's module %s: %v (%s)", m, err, refHint)
		}
	}
	return envpath
}

// catalogCase is a node of the test environment.
type catalogCase struct {
	name       string
	certname   string
	extensions map[string]string
}

var catalogCases = []catalogCase{
	{"exports, aliases, relationships, rich data", "wire-exports.test", map[string]string{"pp_role": "web"}},
	{"ntp and apache, as recorded", "wire-apache.test", nil},
	{"the default node", "wire-default.example.test", nil},
}

// farmCatalog compiles the node with the farm's engine and returns the
// catalog the farm serves (sealed) and its exports as the farm stores them.
func farmCatalog(t *testing.T, e *puppet.Engine, envpath string, c catalogCase, facts map[string]any) ([]byte, []byte) {
	t.Helper()
	res, err := e.Compile(t.Context(), compiler.Request{
		Certname: c.certname, Environment: "production", CodeID: "wire-code", EnvironmentPath: envpath,
		Facts: facts, Node: nodeinfo.Info{TrustedExtensions: c.extensions},
	})
	if err != nil {
		t.Fatalf("farm compile: %v", err)
	}
	sealed, _, err := catalog.Seal(res.Catalog, "wire-code")
	if err != nil {
		t.Fatal(err)
	}
	// As compiler.Pool.storeExports keeps them.
	list := append([]compiler.ExportedResource(nil), res.Exports...)
	for i := range list {
		list[i].Certname = c.certname
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Type != list[j].Type {
			return list[i].Type < list[j].Type
		}
		return list[i].Title < list[j].Title
	})
	var exports []byte
	if len(list) > 0 {
		if exports, err = json.Marshal(list); err != nil {
			t.Fatal(err)
		}
	}
	return sealed, exports
}

// engine is the farm's Ruby Puppet engine the package's tests share.
var engine struct {
	once sync.Once
	dir  string
	eng  *puppet.Engine
	err  error
}

// sharedEngine returns the farm's engine, started on first use (TestMain
// closes it).
func sharedEngine(t *testing.T) *puppet.Engine {
	t.Helper()
	engine.once.Do(func() {
		if engine.dir, engine.err = os.MkdirTemp("", "puppetdb-command-engine-"); engine.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		engine.eng, engine.err = puppet.New(ctx, puppet.Options{WorkDir: engine.dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	})
	if engine.err != nil {
		t.Fatalf("start the farm's engine: %v (%s)", engine.err, refHint)
	}
	return engine.eng
}

// TestCatalogReference compiles the test environment's nodes with the
// farm's engine and with Puppet itself, and compares the payload Catalog
// makes of what the farm keeps (its catalog, its exports) with the one
// the catalog terminus makes of the catalog Puppet compiled. Version and
// catalog_uuid differ by design (the farm's version is the code_id, its
// catalog_uuid a digest): Catalog must send the served catalog's. Exported
// resources the node does not collect carry no kind in the farm's exports
// (PuppetDB does not store it either).
func TestCatalogReference(t *testing.T) {
	ref := newReference(t)
	envpath := testEnvironment(t)
	e := sharedEngine(t)
	for _, c := range catalogCases {
		t.Run(c.name, func(t *testing.T) {
			var doc map[string]any
			if err := decode(agentFacts(t, c.certname, nil), &doc); err != nil {
				t.Fatal(err)
			}
			facts := doc["values"].(map[string]any)
			served, exports := farmCatalog(t, e, envpath, c, facts)
			wantPayload := ref.payload(t, map[string]any{"catalog": map[string]any{
				"envpath": envpath, "environment": "production", "certname": c.certname, "facts": facts,
				"extensions": c.extensions, "code_id": "wire-code", "transaction_uuid": "wire-transaction",
			}})
			in := CatalogInput{Catalog: served, Exports: exports, TransactionUUID: "wire-transaction",
				Producer: "farm.example.test", ProducerTimestamp: now}
			check := func(t *testing.T, in CatalogInput) {
				b, err := Catalog(in)
				if err != nil {
					t.Fatalf("Catalog: %v", err)
				}
				got := comparable(t, b)
				s, _ := catalog.Parse(served)
				if got["version"] != "wire-code" || got["catalog_uuid"] != s.CatalogUUID {
					t.Errorf("version %v, catalog_uuid %v: want the served catalog's (wire-code, %s)", got["version"], got["catalog_uuid"], s.CatalogUUID)
				}
				want := comparable(t, wantPayload)
				sameAsReference(t, normalizeCatalog(got, got), normalizeCatalog(want, got))
			}
			t.Run("containers found by tags", func(t *testing.T) { check(t, in) })
			if len(exports) > 0 {
				t.Run("containers recorded", func(t *testing.T) {
					in.Exports = withContainers(t, exports, comparable(t, wantPayload))
					check(t, in)
				})
			}
		})
	}
}

// normalizeCatalog readies a catalog payload for comparison with got:
// version and catalog_uuid out, resources and edges sorted, and a kind
// got's resource lacks taken out.
func normalizeCatalog(p, got map[string]any) map[string]any {
	delete(p, "version")
	delete(p, "catalog_uuid")
	gotKind := map[string]bool{}
	for _, r := range got["resources"].([]any) {
		r := r.(map[string]any)
		_, ok := r["kind"]
		gotKind[r["type"].(string)+"["+r["title"].(string)+"]"] = ok
	}
	for _, r := range p["resources"].([]any) {
		r := r.(map[string]any)
		if !gotKind[r["type"].(string)+"["+r["title"].(string)+"]"] {
			delete(r, "kind")
		}
	}
	sortBy(p, "resources", "type", "title")
	sortBy(p, "edges")
	return p
}

// withContainers is the exports with each one's container as the
// reference's containment edges give it: what the farm's exports hold
// when its engine records containers.
func withContainers(t *testing.T, exports []byte, ref map[string]any) []byte {
	t.Helper()
	container := map[string]string{}
	for _, e := range ref["edges"].([]any) {
		e := e.(map[string]any)
		if e["relationship"] != "contains" {
			continue
		}
		src, dst := e["source"].(map[string]any), e["target"].(map[string]any)
		container[dst["type"].(string)+"["+dst["title"].(string)+"]"] = src["type"].(string) + "[" + src["title"].(string) + "]"
	}
	var list []map[string]any
	if err := decode(exports, &list); err != nil {
		t.Fatal(err)
	}
	for _, x := range list {
		x["container"] = container[x["type"].(string)+"["+x["title"].(string)+"]"]
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
