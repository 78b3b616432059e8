package emulator

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// registryHosts returns the hosts this machine installs packages,
// modules and tools from, in lower case, read from its own configuration
// (no file may name them, this one included): every URL in apt's sources
// (comments too: a snapshot mirror noted beside the archive), npm's
// registry and Go's module proxy and checksum database. scripts/emulators/
// and scripts/install-deps.sh install through those clients with that
// configuration, so that a machine behind its own mirror or proxy installs
// without editing the repository. It also forbids GitHub release downloads
// (a path, not a host), the other usual way around a package manager.
func registryHosts(t *testing.T) []string {
	t.Helper()
	var text []string
	sources, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	for _, p := range append([]string{"/etc/apt/sources.list"}, sources...) {
		if b, err := os.ReadFile(p); err == nil {
			text = append(text, string(b))
		}
	}
	for _, c := range [][]string{{"go", "env", "GOPROXY", "GOSUMDB"}, {"npm", "config", "get", "registry"}} {
		if _, err := exec.LookPath(c[0]); err != nil {
			continue // no npm: nothing of its configuration to keep out
		}
		out, err := exec.Command(c[0], c[1:]...).Output()
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(c, " "), err)
		}
		text = append(text, strings.NewReplacer(",", " ", "|", " ").Replace(string(out)))
	}
	seen := map[string]bool{}
	var hosts []string
	for _, word := range strings.Fields(strings.Join(text, "\n")) {
		if _, rest, ok := strings.Cut(word, "://"); ok {
			word = rest
		}
		host, _, _ := strings.Cut(word, "/")
		host = strings.ToLower(strings.TrimRight(host, ".,;:)]\"'"))
		// A host has a dot and letters in its last label; "direct", "off",
		// file paths and option words do not.
		last := host[strings.LastIndex(host, ".")+1:]
		if !strings.Contains(host, ".") || strings.ContainsAny(host, "=[]") || strings.Trim(last, "abcdefghijklmnopqrstuvwxyz") != "" || seen[host] {
			continue
		}
		seen[host] = true
		hosts = append(hosts, host)
	}
	if len(hosts) == 0 {
		t.Fatal("found no package registry in this machine's configuration (apt sources, go env GOPROXY, npm config get registry): nothing to check the repository against")
	}
	return append(hosts, releaseDownloads)
}

// releaseDownloads is the path of a GitHub release's files.
const releaseDownloads = "/releases/download/"

// TestNoRegistryHostInRepository fails when a text file tracked by git
// names a package registry's host. It reads files only (no network, no
// emulator), so it runs with -short too.
func TestNoRegistryHostInRepository(t *testing.T) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("find this test's file")
	}
	root := filepath.Join(filepath.Dir(self), "..", "..")

	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list the repository's files with git ls-files in %s: %v (the test needs git and a git checkout)", root, err)
	}
	registries := registryHosts(t)
	t.Logf("package registries of this machine: %s", strings.Join(registries, " "))
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files in %s; want the whole repository", len(files), root)
	}
	for _, name := range files {
		path := filepath.Join(root, name)
		fi, err := os.Lstat(path)
		if os.IsNotExist(err) {
			continue // deleted in the worktree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
			continue // binary (git's test): a compressed tarball names nothing readable
		}
		for i, line := range bytes.Split(asciiLower(b), []byte("\n")) {
			for _, host := range registries {
				if host == releaseDownloads && path == filepath.Clean(self) {
					continue // the constant above
				}
				if bytes.Contains(line, []byte(host)) {
					t.Errorf("%s:%d names %s, a package registry's host or download path: install through apt-get, go or npm with the machine's own configuration instead",
						name, i+1, host)
					break
				}
			}
		}
	}
}

// asciiLower returns a copy of b with A-Z in lower case.
func asciiLower(b []byte) []byte {
	l := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		l[i] = c
	}
	return l
}
