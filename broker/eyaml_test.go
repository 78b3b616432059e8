package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckEyamlKeys checks that broker dev refuses an --eyaml-keys that is
// not a directory, or one that code snapshots would copy.
func TestCheckEyamlKeys(t *testing.T) {
	root := t.TempDir()
	envs := filepath.Join(root, "environments")
	file := filepath.Join(root, "keys.pem")
	for _, d := range []string{"eyaml", "environments-keys", "environments/keys", "environments/production/keys"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir     string
		wantErr string // "" for none
	}{
		{"", ""},
		{filepath.Join(root, "eyaml"), ""},
		{filepath.Join(root, "environments-keys"), ""}, // a sibling whose name starts alike
		{root, ""}, // holds the environments, is not inside them
		{envs, "inside --environments"},
		{filepath.Join(envs, "keys"), "inside --environments"},
		{filepath.Join(envs, "production", "keys"), "inside --environments"},
		{filepath.Join(root, "nosuch"), "is not a directory"},
		{file, "is not a directory"},
	}
	for _, tt := range tests {
		err := checkEyamlKeys(tt.dir, envs)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("checkEyamlKeys(%q) = %v, want nil", tt.dir, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), "--eyaml-keys "+tt.dir) || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("checkEyamlKeys(%q) = %v, want an error naming the flag and %q", tt.dir, err, tt.wantErr)
		}
	}
}
