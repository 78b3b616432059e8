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

// registryHosts are the hosts (or host and path) packages, modules and
// toolchains are downloaded from, in lower case. No tracked file may name
// one: scripts/emulators/ and scripts/install-deps.sh install through the
// ordinary clients (apt-get, go, npm) with the machine's own
// configuration, so that a machine behind its own mirror or proxy installs
// without editing the repository. This file is the one place the list is
// written, and the test skips it.
var registryHosts = []string{
	// Debian and Ubuntu archives ("debian.org/debian" is any Debian
	// mirror's archive or security path: ftp.XX, deb, security, ...).
	"deb.debian.org", "security.debian.org", "snapshot.debian.org", "debian.org/debian",
	"archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com",
	// Go: the module proxy, the checksum database, toolchain downloads.
	"proxy.golang.org", "sum.golang.org", "index.golang.org", "go.dev/dl", "dl.google.com",
	// Node.
	"registry.npmjs.org", "registry.npmjs.com", "registry.yarnpkg.com", "nodejs.org/dist",
	"deb.nodesource.com", "rpm.nodesource.com",
	// Python and Ruby.
	"pypi.org", "pypi.python.org", "files.pythonhosted.org", "rubygems.org",
	// Puppet's package repositories and the Forge.
	"apt.puppet.com", "yum.puppet.com", "apt.puppetlabs.com", "yum.puppetlabs.com",
	"forge.puppet.com", "forgeapi.puppet.com", "forge.puppetlabs.com",
	// Release downloads from GitHub (github.com/OWNER/REPO/releases/download/...).
	"/releases/download/", "raw.githubusercontent.com", "objects.githubusercontent.com",
	"release-assets.githubusercontent.com", "codeload.github.com",
}

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
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files in %s; want the whole repository", len(files), root)
	}
	for _, name := range files {
		path := filepath.Join(root, name)
		if path == filepath.Clean(self) {
			continue
		}
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
			for _, host := range registryHosts {
				if bytes.Contains(line, []byte(host)) {
					t.Errorf("%s:%d names %s, a package registry's host: install through apt-get, go or npm with the machine's own configuration instead",
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
