package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/admin"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// operatorRig is a farm's CA with its operator API on a loopback listener
// and on a front door (real TLS, the CA's server certificate).
type operatorRig struct {
	ca       *ca.CA
	loopback string // http://127.0.0.1:PORT
	front    string // https://127.0.0.1:PORT
}

func newOperatorRig(t *testing.T, autosign bool) *operatorRig {
	t.Helper()
	a, err := cadir.OpenCA(t.Context(), filepath.Join(t.TempDir(), "ca"), ca.Options{KeyBits: 2048, Autosign: autosign})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	cert, err := a.IssueServerCert(t.Context(), "broker.test", serverAltNames("broker.test", ""), pki.KeyECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	adm := adminHandler(&admin.Server{CA: a})
	loop := httptest.NewServer(adm)
	t.Cleanup(loop.Close)
	fd := &frontdoor.Server{CA: a, Revocations: a, Peers: a, Operator: adm}
	front := httptest.NewUnstartedServer(fd.Handler())
	front.TLS = a.ServerTLSConfig(cert)
	front.StartTLS()
	t.Cleanup(front.Close)
	return &operatorRig{ca: a, loopback: loop.URL, front: front.URL}
}

func TestOperatorCertificateThroughTheFrontDoor(t *testing.T) {
	r := newOperatorRig(t, true)
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "ops")
	if err := runCA(ctx, []string{"generate", "ops.example.test", "--operator", "--out", dir, "--admin", r.loopback}); err != nil {
		t.Fatalf("ca generate: %v", err)
	}
	for name, mode := range map[string]os.FileMode{"ops.example.test.key.pem": 0o600, "ops.example.test.cert.pem": 0o644, "ca.pem": 0o644} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s mode %v, want %v", name, st.Mode().Perm(), mode)
		}
	}
	mtls := []string{"--admin", r.front, "--cert", filepath.Join(dir, "ops.example.test.cert.pem"),
		"--key", filepath.Join(dir, "ops.example.test.key.pem"), "--ca-cert", filepath.Join(dir, "ca.pem")}
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" none
	}{
		{"list through the front door", append([]string{"list"}, mtls...), ""},
		{"the front door without a certificate", []string{"list", "--admin", r.front}, "needs an operator certificate, --cert FILE --key FILE --ca-cert FILE"},
		{"certificates on the loopback listener", []string{"list", "--admin", r.loopback, "--cert", "x.pem"}, "go with --admin https://HOST:8140"},
		{"a generate without --operator", []string{"generate", "x.example.test", "--admin", r.loopback}, "add --operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runCA(ctx, tt.args)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("ca %v: %v", tt.args, err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("ca %v = %v, want an error with %q", tt.args, err, tt.wantErr)
			}
		})
	}

	// An agent's certificate is not an operator's.
	agentDir := t.TempDir()
	csr, key := farmtest.NewCSR(t, "agent.example.test")
	if err := r.ca.SubmitCSR(ctx, "agent.example.test", csr); err != nil {
		t.Fatal(err)
	}
	writeAgentFiles(t, r.ca, agentDir, "agent.example.test", key)
	err := runCA(ctx, []string{"list", "--admin", r.front, "--cert", filepath.Join(agentDir, "agent.example.test.cert.pem"),
		"--key", filepath.Join(agentDir, "agent.example.test.key.pem"), "--ca-cert", filepath.Join(dir, "ca.pem")})
	if err == nil || !strings.Contains(err.Error(), "lacks Puppet's pp_cli_auth") {
		t.Fatalf("ca list with an agent's certificate = %v, want a refusal naming pp_cli_auth", err)
	}

	// Revoked: refused.
	if err := runCA(ctx, []string{"revoke", "ops.example.test", "--admin", r.loopback}); err != nil {
		t.Fatal(err)
	}
	if err := runCA(ctx, append([]string{"list"}, mtls...)); err == nil {
		t.Fatalf("ca list with a revoked operator certificate succeeded")
	}
}

// TestSignRefusesOperatorRequests: a request for pp_cli_auth that an
// agent sent waits (autosign never signs it) and `ca sign` signs it only
// with --allow-authorization-extensions.
func TestSignRefusesOperatorRequests(t *testing.T) {
	r := newOperatorRig(t, true)
	ctx := t.Context()
	csr, _ := farmtest.NewCSRWith(t, "sneaky.example.test", farmtest.PPCliAuth)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, r.front+"/puppet-ca/v1/certificate_request/sneaky.example.test", strings.NewReader(string(csr)))
	req.Header.Set("Content-Type", "text/plain")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsTrusting(t, r.ca)}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT certificate_request: %s", resp.Status)
	}
	if _, err := r.ca.Certificate(ctx, "sneaky.example.test"); err == nil {
		t.Fatalf("autosign signed a request for pp_cli_auth")
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"without the flag", []string{"sign", "sneaky.example.test", "--admin", r.loopback}, "requests pp_cli_auth"},
		{"with the flag", []string{"sign", "sneaky.example.test", "--allow-authorization-extensions", "--admin", r.loopback}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runCA(ctx, tt.args)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("ca %v: %v", tt.args, err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("ca %v = %v, want an error with %q", tt.args, err, tt.wantErr)
			}
		})
	}
	if _, err := r.ca.Certificate(context.Background(), "sneaky.example.test"); err != nil {
		t.Fatalf("not signed with --allow-authorization-extensions: %v", err)
	}
}
