package command

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestKnownTypesReference checks keysOf against the resource types of
// Puppet and of the modules Debian packages, as Puppet loads them.
func TestKnownTypesReference(t *testing.T) {
	ref := newReference(t)
	libs, err := filepath.Glob("/usr/share/puppet/modules/*/lib")
	if err != nil || len(libs) == 0 {
		t.Fatalf("no modules in /usr/share/puppet/modules (%s)", refHint)
	}
	var types map[string]struct {
		KeyAttributes []string `json:"key_attributes"`
		Isomorphic    bool     `json:"isomorphic"`
	}
	if err := json.Unmarshal(ref.payload(t, map[string]any{"types": libs}), &types); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"file", "exec", "notify", "package", "concat_file", "sshkey"} {
		if _, ok := types[name]; !ok {
			t.Errorf("the reference did not load type %s", name)
		}
	}
	for name, want := range types {
		got := keysOf(name)
		switch {
		case len(want.KeyAttributes) > 1:
			if !got.composite {
				t.Errorf("%s has key attributes %v: want it composite, got %+v", name, want.KeyAttributes, got)
			}
		case got.composite || got.namevar != want.KeyAttributes[0] || got.notIsomorphic == want.Isomorphic:
			t.Errorf("%s: keys %+v, want namevar %s, isomorphic %v", name, got, want.KeyAttributes[0], want.Isomorphic)
		}
	}
}
