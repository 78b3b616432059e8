package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// checkEyamlKeys refuses an --eyaml-keys that is not a directory, or is one
// inside the environments: code snapshots would copy its keys.
func checkEyamlKeys(dir, envRoot string) error {
	if dir == "" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("--eyaml-keys: %w", err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return fmt.Errorf("--eyaml-keys %s is not a directory (it holds the keys of encrypted Hiera data)", dir)
	}
	if rel, err := filepath.Rel(envRoot, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("--eyaml-keys %s is inside --environments %s, so code snapshots would copy its keys: keep the keys outside", dir, envRoot)
	}
	return nil
}
