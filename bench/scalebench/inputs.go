package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// parseSizes parses a comma-separated list of node counts ("1000,10k,100k"),
// each at least 1 and the list increasing; "" and "0" are no list.
func parseSizes(s string) ([]int, error) {
	if s = strings.TrimSpace(s); s == "" || s == "0" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(strings.ReplaceAll(f, "_", "")))
		mult := 1
		if rest, ok := strings.CutSuffix(f, "k"); ok {
			f, mult = rest, 1000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 10_000_000/mult {
			return nil, fmt.Errorf("%q is not a node count between 1 and 10,000,000", f)
		}
		n *= mult
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("node counts must increase: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

// repoRoot finds the module root (the directory of this module's go.mod)
// from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/compilefarm/compilefarm\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run scalebench inside the compilefarm checkout (no go.mod of github.com/compilefarm/compilefarm above the working directory)")
		}
		dir = parent
	}
}

// copyTree copies the directories and regular files under src to dst.
func copyTree(src, dst string) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o750)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o640)
		}
		return fmt.Errorf("%s is neither a directory nor a regular file", p)
	})
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}
