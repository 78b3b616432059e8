// Package e2e is the harness of compilefarm's end-to-end tests (the
// packages under test/): real `broker dev` and `broker serve` processes,
// real Debian `puppet agent` runs, synthetic nodes speaking the agent's
// HTTP API from Go, and the AWS backends on loopback emulators. Each test
// package's TestMain calls Main.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/compilefarm/compilefarm/internal/farmproc"
)

// Main is the TestMain of an end-to-end package: with -short it only runs
// the tests (every one skips); otherwise it checks that Puppet, Ruby and
// openssl are installed (failing the run, saying how to install them),
// builds the broker, installs the external facts script agents read
// their per-agent facts through, runs the tests and cleans up.
func Main(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	for _, tool := range []string{"puppet", "ruby", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s is required and missing: run scripts/install-deps.sh (as root) first\n", tool)
			os.Exit(1)
		}
	}
	if _, err := farmproc.BuildBroker(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	removeScript, err := installFactsScript()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: install the external facts script:", err)
		farmproc.CleanupBinaries()
		os.Exit(1)
	}
	code := m.Run()
	removeScript()
	farmproc.CleanupBinaries()
	os.Exit(code)
}

// factsScript is an executable external fact that prints the facts file
// named by $CF_E2E_FACTS: each agent run points it at its own agent's
// facts, so agents on one machine do not share them.
const factsScript = `#!/bin/sh
# compilefarm e2e tests: per-agent external facts (removed when the tests end)
[ -n "$CF_E2E_FACTS" ] && [ -r "$CF_E2E_FACTS" ] && cat "$CF_E2E_FACTS"
exit 0
`

// factsLock serialises installFactsScript and its clean-up between the
// test packages that run side by side: one may not remove a directory
// another is about to write its script into.
const factsLock = "/tmp/compilefarm-e2e-facts.lock"

// installFactsScript puts factsScript where Facter looks for external
// facts by default (/etc/facter/facts.d for root on Debian,
// ~/.facter/facts.d otherwise: the agent's own pluginfactdest is purged by
// pluginsync), named for this process, and returns a function that
// removes it and any directory it created that is empty by then.
func installFactsScript() (func(), error) {
	dir := "/etc/facter/facts.d"
	if os.Geteuid() != 0 {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("no home directory for external facts: %w", err)
		}
		dir = filepath.Join(home, ".facter", "facts.d")
	}
	unlock, err := lockFile(factsLock)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create external facts directory: %w", err)
	}
	p := filepath.Join(dir, fmt.Sprintf("compilefarm-e2e-%d.sh", os.Getpid()))
	if err := os.WriteFile(p, []byte(factsScript), 0o755); err != nil {
		return nil, err
	}
	return func() {
		unlock, err := lockFile(factsLock)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return
		}
		defer unlock()
		os.Remove(p)
		for _, d := range created {
			os.Remove(d) // only when empty: another package's script may be there
		}
	}, nil
}

// lockFile takes an exclusive flock on path (created when missing).
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
