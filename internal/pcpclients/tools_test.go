package pcpclients

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindSaysHowToBuild(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := findFrom(sub)
	if err == nil || !strings.Contains(err.Error(), "run scripts/pcp-clients.sh") || !strings.Contains(err.Error(), filepath.Join(root, ".tools", "pcp-client", "bin", "pxp-agent")) {
		t.Fatalf("error %v", err)
	}
	bin := filepath.Join(root, ".tools", "pcp-client", "bin")
	if err := os.MkdirAll(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"pxp-agent", "pxp-request", "pcp-ping"} {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	tools, err := findFrom(sub)
	if err != nil || tools.Dir != filepath.Join(root, ".tools", "pcp-client") {
		t.Fatalf("%v %v", tools, err)
	}
}

func TestParsePingOutput(t *testing.T) {
	// pcp-ping's own words, as ruby-pcp-client 0.5.3 prints them.
	out := "Connected to broker in 0.20 seconds.\n\npcp://a/agent                                           0.01 seconds\n\n" +
		"Received 1/2 responses.  Following nodes were missing\n\n    pcp://b/agent\n"
	res := parsePing([]byte(out))
	if !res.Connected || res.Complete || len(res.Responders) != 1 || res.Responders[0] != "pcp://a/agent" || len(res.Missing) != 1 || res.Missing[0] != "pcp://b/agent" {
		t.Fatalf("%+v", res)
	}
}
