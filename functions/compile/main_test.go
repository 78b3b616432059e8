package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPuppetDB(t *testing.T) {
	const certPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, []byte("CA FILE"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	p, err := puppetDB(env(nil))
	if p != nil || err != nil {
		t.Fatalf("unset: %+v, %v; want no PuppetDB", p, err)
	}
	p, err = puppetDB(env(map[string]string{
		"COMPILEFARM_PUPPETDB":      "https://pdb1:8081, https://pdb2:8081",
		"COMPILEFARM_PUPPETDB_CA":   caFile,
		"COMPILEFARM_PUPPETDB_CERT": certPEM,
		"COMPILEFARM_PUPPETDB_KEY":  "  " + certPEM,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.URLs, []string{"https://pdb1:8081", "https://pdb2:8081"}) || string(p.CACert) != "CA FILE" ||
		string(p.Cert) != certPEM || !strings.Contains(string(p.Key), "BEGIN CERTIFICATE") {
		t.Fatalf("got %+v", p)
	}
	_, err = puppetDB(env(map[string]string{"COMPILEFARM_PUPPETDB": "https://pdb1:8081", "COMPILEFARM_PUPPETDB_KEY": "/nonexistent/key.pem"}))
	if err == nil || !strings.Contains(err.Error(), "COMPILEFARM_PUPPETDB_KEY") {
		t.Fatalf("unreadable key file: %v, want an error naming the variable", err)
	}
}
