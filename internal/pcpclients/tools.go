// Package pcpclients runs the real PCP clients (pxp-agent, the C++ agent
// Puppet Enterprise nodes run, and ruby-pcp-client's pxp-request and
// pcp-ping controllers, built into .tools/pcp-client by
// scripts/pcp-clients.sh) against a PCP broker in tests, and gives those
// tests a throw-away farm CA for their certificates.
package pcpclients

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Tools is an installation of the real PCP clients.
type Tools struct {
	// Dir is the installation prefix (.tools/pcp-client): bin/pxp-agent,
	// bin/pxp-request, bin/pcp-ping, pxp/modules.
	Dir string
}

// Find locates the clients in .tools/pcp-client under the module root
// (the nearest directory above the working directory holding go.mod).
// Its error says to run scripts/pcp-clients.sh when they are missing.
func Find() (*Tools, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	return findFrom(wd)
}

func findFrom(wd string) (*Tools, error) {
	root := ""
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			root = dir
			break
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	if root == "" {
		return nil, fmt.Errorf("pcpclients: no go.mod above %s", wd)
	}
	t := &Tools{Dir: filepath.Join(root, ".tools", "pcp-client")}
	var missing []error
	for _, b := range []string{"pxp-agent", "pxp-request", "pcp-ping"} {
		if fi, err := os.Stat(t.bin(b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, fmt.Errorf("%s is missing", t.bin(b)))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("pcpclients: the real PCP clients are not built (%w): run scripts/pcp-clients.sh", errors.Join(missing...))
	}
	return t, nil
}

// Require returns the clients for a test that runs them: under -short the
// test is skipped (the fast lane needs no Ruby or C++), otherwise missing
// clients fail it with the message "run scripts/pcp-clients.sh".
func Require(t testing.TB) *Tools {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real PCP clients (pxp-agent, ruby-pcp-client); skipped under -short")
	}
	tools, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

func (t *Tools) bin(name string) string { return filepath.Join(t.Dir, "bin", name) }
