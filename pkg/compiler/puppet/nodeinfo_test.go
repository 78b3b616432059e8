package puppet

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/compiler"
	"github.com/compilefarm/compilefarm/pkg/nodeinfo"
)

// nodeInfoEnv classifies by $trusted and by classifier classes and
// parameters, the ways real sites do.
var nodeInfoEnv = map[string]string{
	"environment.conf": "modulepath = modules\n",
	"hiera.yaml": `---
version: 5
defaults:
  datadir: data
  data_hash: yaml_data
hierarchy:
  - name: role
    path: "roles/%{trusted.extensions.pp_role}.yaml"
  - name: common
    path: common.yaml
`,
	"data/common.yaml":    "profile::motd::text: common\n",
	"data/roles/web.yaml": "profile::motd::text: from the web role's hiera level\n",
	"manifests/site.pp": `
node default {
  $role = $trusted['extensions']['pp_role']
  notify { "role ${role}": }
  notify { "private ${trusted['extensions']['1.3.6.1.4.1.34380.1.2.1']}": }
  notify { "auth ${trusted['extensions']['pp_auth_role']}": }
  notify { "trusted ${trusted['certname']} ${trusted['hostname']} ${trusted['domain']} ${trusted['authenticated']}": }
  notify { "tier ${tier} ${::tier}": }
  notify { "shadowed ${cf_shadowed} fact ${facts['cf_shadowed']}": }
  include profile::motd
}
`,
	"modules/profile/manifests/motd.pp": "class profile::motd(String $text) { notify { \"motd ${text}\": } }\n",
	"modules/role/manifests/web.pp":     "class role::web { notify { 'role::web': } }\n",
	"modules/ntp/manifests/init.pp":     "class ntp(Array $servers = []) { notify { \"ntp ${servers}\": } }\n",
}

// TestCompileNodeInfo: the compile sees the certificate's extensions in
// $trusted (also through Hiera interpolation) and the classifier's classes
// (a list, or a hash with parameters) and parameters, which win over a
// fact of the same name and are not recorded as fact reads.
func TestCompileNodeInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	e := sharedEngine(t)
	src := t.TempDir()
	writeTree(t, src, nodeInfoEnv)
	envpath := snapshot(t, src, "production")
	facts := map[string]any{"cf_shadowed": "from facts", "tier": "fact tier"}
	base := compiler.Request{Certname: "web1.example.test", Environment: "production", CodeID: "nodeinfo-1",
		EnvironmentPath: envpath, Facts: facts}

	tests := []struct {
		name      string
		node      nodeinfo.Info
		want      []string // notify titles that must be there
		wantNot   []string
		readNames []string // top-level names that must not be recorded as fact reads
	}{
		{
			name: "no node information",
			want: []string{"role ", "trusted web1.example.test web1 example.test remote", "motd common", "tier fact tier fact tier"},
		},
		{
			name: "trusted extensions and hiera interpolation",
			node: nodeinfo.Info{TrustedExtensions: map[string]string{"pp_role": "web", "1.3.6.1.4.1.34380.1.2.1": "secret-ish",
				"pp_auth_role": "admin"}},
			want: []string{"role web", "private secret-ish", "auth admin", "motd from the web role's hiera level"},
		},
		{
			name:      "classifier classes and parameters",
			node:      nodeinfo.Info{Classes: []any{"role::web"}, Parameters: map[string]any{"tier": "gold", "cf_shadowed": "from the classifier"}},
			want:      []string{"role::web", "tier gold gold", "shadowed from the classifier fact from facts"},
			readNames: []string{"tier"},
		},
		{
			name: "classes with parameters",
			node: nodeinfo.Info{Classes: map[string]any{"ntp": map[string]any{"servers": []any{"a", "b"}}, "role::web": nil}},
			want: []string{"ntp [a, b]", "role::web"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := base
			req.Node = tt.node
			res, err := e.Compile(t.Context(), req)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			c := parseCatalog(t, res.Catalog)
			var titles []string
			for _, r := range c.Resources {
				if r.Type == "Notify" {
					titles = append(titles, r.Title)
				}
			}
			for _, w := range tt.want {
				if !slices.Contains(titles, w) {
					t.Errorf("no Notify[%s] in %q", w, titles)
				}
			}
			if res.Reads == nil {
				t.Fatal("no reads recorded")
			}
			for _, r := range res.Reads.Reads {
				if len(r.Path) == 1 && slices.Contains(tt.readNames, r.Path[0]) {
					b, _ := json.Marshal(r)
					t.Errorf("a classifier parameter was recorded as a fact read: %s", b)
				}
			}
		})
	}

	t.Run("unknown class from the classifier", func(t *testing.T) {
		req := base
		req.Node = nodeinfo.Info{Classes: []any{"nosuch"}}
		_, err := e.Compile(t.Context(), req)
		var cerr *compiler.CompileError
		if err == nil || !strings.Contains(err.Error(), "Could not find class nosuch for web1.example.test") {
			t.Fatalf("compile with an unknown class = %v, want Puppet's error", err)
		}
		if !errors.As(err, &cerr) {
			t.Errorf("error %T is not a *compiler.CompileError", err)
		}
	})
}
