// Package docs_test keeps docs/ARCHITECTURE.md in step with the tree: every
// Go package under the module's pkg/, internal/, functions/ and broker/ is
// named in it, and every such path it names exists.
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// mapFile is the map, relative to the module root.
const mapFile = "docs/ARCHITECTURE.md"

// roots are the top-level directories whose Go packages the map must name.
var roots = []string{"pkg", "internal", "functions", "broker"}

// moduleRoot is the module root: the parent of docs/, where go test runs
// this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.Contains(string(b), "module github.com/compilefarm/compilefarm\n") {
		t.Fatalf("%s is not the module root (go.mod: %v): run go test from the checkout", root, err)
	}
	return root
}

// goPackages returns the directories under root/dir (slash-separated,
// relative to root) that hold a .go file, skipping testdata and the
// directories the go tool ignores (names starting with "." or "_").
func goPackages(t *testing.T, root, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != filepath.Join(root, dir) && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list the Go packages under %s: %v", dir, err)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// pathChar reports whether c can be part of a path the map names.
func pathChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-./", c)
}

// namedPaths returns the paths under roots that text names, with the line
// of their first mention: each maximal run of path characters that holds a
// '/' and is "<root>/" or starts with it, without trailing '/' or '.' (so
// "`pkg/ca/`", "pkg/ca." and "pkg/pcp/*" name pkg/ca, pkg/ca and pkg/pcp,
// and "`broker/`" names broker, the word "broker" does not). A run names
// only itself: "pkg/compiler/puppet" does not name pkg/compiler, and
// "bench/internal/latency" names nothing under internal/.
func namedPaths(text string) map[string]int {
	named := map[string]int{}
	for i, line := range strings.Split(text, "\n") {
		for _, run := range strings.FieldsFunc(line, func(c rune) bool { return !pathChar(c) }) {
			if !strings.Contains(run, "/") {
				continue
			}
			p := strings.TrimRight(run, "/.")
			for _, r := range roots {
				if p == r || strings.HasPrefix(p, r+"/") {
					if _, seen := named[p]; !seen {
						named[p] = i + 1
					}
				}
			}
		}
	}
	return named
}

func TestNamedPaths(t *testing.T) {
	got := namedPaths("- `pkg/compiler/puppet`: x; `pkg/ca/` and pkg/pcp/* (`broker serve`, brokers)\n" +
		"bench/internal/latency, ../pkg/farm, broker.Options, internal, `broker/`.\n" +
		"pkg/compiler/pointer.go and functions/compile. pkgs/x, internal/flowtest/")
	want := map[string]int{"pkg/compiler/puppet": 1, "pkg/ca": 1, "pkg/pcp": 1, "broker": 2,
		"pkg/compiler/pointer.go": 3, "functions/compile": 3, "internal/flowtest": 3}
	if len(got) != len(want) {
		t.Errorf("namedPaths = %v, want %v", got, want)
	}
	for p, line := range want {
		if got[p] != line {
			t.Errorf("namedPaths: %s at line %d, want line %d (all: %v)", p, got[p], line, got)
		}
	}
}

// TestArchitectureNamesEveryPackage: a package added under pkg/,
// internal/, functions/ or broker/ gets its line in the map.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, mapFile))
	if err != nil {
		t.Fatal(err)
	}
	named := namedPaths(string(doc))
	for _, dir := range roots {
		for _, pkg := range goPackages(t, root, dir) {
			if _, ok := named[pkg]; !ok {
				t.Errorf("Go package %s is not named in %s: add a line for it to %s (`%s`: what it holds, in one sentence)",
					pkg, mapFile, mapFile, pkg)
			}
		}
	}
}

// TestArchitectureNamesOnlyWhatExists: a package moved or removed leaves no
// line behind in the map.
func TestArchitectureNamesOnlyWhatExists(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, mapFile))
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, dir := range roots {
		pkgs = append(pkgs, goPackages(t, root, dir)...)
	}
	named := namedPaths(string(doc))
	paths := make([]string, 0, len(named))
	for p := range named {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
		gone := err != nil
		if err == nil && fi.IsDir() {
			// A directory must hold a Go package, itself or below it.
			gone = !slices.ContainsFunc(pkgs, func(pkg string) bool { return pkg == p || strings.HasPrefix(pkg, p+"/") })
		}
		if gone {
			t.Errorf("%s:%d names %s, which is not in the tree (or holds no Go package) any more: "+
				"fix the path or remove its line from %s", mapFile, named[p], p, mapFile)
		}
	}
}
