package main

import (
	"flag"
	"strings"
	"testing"
)

// TestPuppetDBFlags: what --puppetdb and its companions refuse, each with
// an error an operator can act on, before anything starts.
func TestPuppetDBFlags(t *testing.T) {
	tests := []struct {
		name string
		aws  bool
		args []string
		err  string // "" when valid
		urls int
	}{
		{"none", false, nil, "", 0},
		{"https", false, []string{"--puppetdb", "https://pdb1:8081,https://pdb2:8081"}, "", 2},
		{"loopback http", false, []string{"--puppetdb", "http://127.0.0.1:8080"}, "", 1},
		{"remote http", false, []string{"--puppetdb", "http://pdb:8080"}, "plain http only to a loopback address", 0},
		{"storeconfigs without PuppetDB", false, []string{"--storeconfigs", "puppetdb"}, "--storeconfigs puppetdb needs --puppetdb", 0},
		{"unknown storeconfigs", false, []string{"--storeconfigs", "activerecord"}, "want farm or puppetdb", 0},
		{"cert without key", false, []string{"--puppetdb", "https://pdb:8081", "--puppetdb-cert", "c.pem"}, "go together", 0},
		{"no refresh", false, []string{"--puppetdb", "https://pdb:8081", "--puppetdb-query-refresh", "0s"}, "must be positive", 0},
		{"serve without the outbox", true, []string{"--puppetdb", "https://pdb:8081"}, "--puppetdb-outbox-queue", 0},
		{"serve with the outbox", true, []string{"--puppetdb", "https://pdb:8081", "--puppetdb-outbox-queue", "q", "--puppetdb-dead-letter-queue", "d"}, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p puppetdbFlags
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			p.register(fs, tt.aws)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			urls, err := p.validate(tt.aws)
			if tt.err == "" {
				if err != nil || len(urls) != tt.urls {
					t.Fatalf("validate = %v, %v; want %d URLs", urls, err, tt.urls)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("validate = %v, want an error with %q", err, tt.err)
			}
		})
	}
}
