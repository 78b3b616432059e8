package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// basemodulepathFlag is --basemodulepath DIR[:DIR...]: the global module
// directories that $basemodulepath stands for in environments' modulepaths.
type basemodulepathFlag struct {
	set  bool
	dirs []string
}

func (f *basemodulepathFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(f.dirs, string(filepath.ListSeparator))
}

func (f *basemodulepathFlag) Set(s string) error {
	f.set, f.dirs = true, nil
	for _, d := range filepath.SplitList(s) {
		if d = strings.TrimSpace(d); d != "" {
			f.dirs = append(f.dirs, d)
		}
	}
	return nil
}

const basemodulepathUsage = "global module directories ($basemodulepath in environment.conf, and the end of the default modulepath), separated by ':'; " +
	"snapshotted with each environment that uses them (default: modules beside the --environments directory, when it exists; \"\" for none)"

// resolve returns the absolute global module directories: the flag's, each
// of which must be a directory, or without the flag the modules directory
// beside envRoot (Puppet's $codedir/modules beside $codedir/environments)
// when it exists.
func (f *basemodulepathFlag) resolve(envRoot string) ([]string, error) {
	if !f.set {
		if envRoot == "" {
			return nil, nil
		}
		abs, err := filepath.Abs(envRoot)
		if err != nil {
			return nil, fmt.Errorf("--basemodulepath default: %w", err)
		}
		d := filepath.Join(filepath.Dir(abs), "modules")
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return []string{d}, nil
		}
		return nil, nil
	}
	out := make([]string, 0, len(f.dirs))
	for _, d := range f.dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("--basemodulepath %s: %w", d, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("--basemodulepath: %s does not exist; it should be a directory of global modules (one directory per module)", d)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("--basemodulepath: %s is not a directory; it should be a directory of global modules (one directory per module)", d)
		}
		out = append(out, abs)
	}
	return out, nil
}
