package ca

import (
	"crypto"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agent is a key and the certificate the CA signed for it.
type agent struct {
	name string
	key  crypto.Signer
	cert *x509.Certificate
	pem  []byte
}

func signAgent(t *testing.T, c *CA, name string) agent {
	t.Helper()
	key := ecKey(t, elliptic.P256())
	if err := c.SubmitCSR(t.Context(), name, makeCSR(t, csrSpec{cn: name, key: key})); err != nil {
		t.Fatalf("SubmitCSR %s: %v", name, err)
	}
	if err := c.Sign(t.Context(), name); err != nil {
		t.Fatalf("Sign %s: %v", name, err)
	}
	p := c.signedPEM(t, name)
	return agent{name: name, key: key, cert: mustParseCert(t, p), pem: p}
}

func (a agent) tls() *tls.Certificate {
	return &tls.Certificate{Certificate: [][]byte{a.cert.Raw}, PrivateKey: a.key, Leaf: a.cert}
}

func TestOpenSSLVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the openssl binary; skipped with -short")
	}
	openssl := requireOpenSSL(t)
	c := openCA(t, Options{})
	signAgent(t, c, "good.example.test")
	signAgent(t, c, "bad.example.test")
	server, err := c.IssueServerCert(t.Context(), "puppet.test", []string{"puppet", "127.0.0.1"}, "")
	if err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	if err := c.Revoke(t.Context(), "bad.example.test"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	tests := []struct {
		name  string
		cert  string
		extra []string
		ok    bool
		want  string
	}{
		{"signed agent", "good.example.test", nil, true, ": OK"},
		{"signed agent as TLS client", "good.example.test", []string{"-purpose", "sslclient"}, true, ": OK"},
		{"revoked agent", "bad.example.test", nil, false, "certificate revoked"},
		{"server certificate by name", "puppet.test", []string{"-purpose", "sslserver", "-verify_hostname", "puppet"}, true, ": OK"},
		{"server certificate by IP", "puppet.test", []string{"-purpose", "sslserver", "-verify_ip", "127.0.0.1"}, true, ": OK"},
		{"server certificate for another name", "puppet.test", []string{"-verify_hostname", "other.test"}, false, "hostname mismatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			caFile := writeTemp(t, "ca.pem", must(c.CACertificate(t.Context())))
			crlFile := writeTemp(t, "crl.pem", must(c.CRL(t.Context())))
			args := append([]string{"verify", "-crl_check_all", "-CAfile", caFile, "-CRLfile", crlFile}, tc.extra...)
			args = append(args, writeTemp(t, "cert.pem", c.signedPEM(t, tc.cert)))
			out, err := exec.Command(openssl, args...).CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("run openssl: %v", err)
			}
			if (err == nil) != tc.ok || !strings.Contains(string(out), tc.want) {
				t.Fatalf("openssl %s: err=%v, want ok=%v and %q in:\n%s", strings.Join(args, " "), err, tc.ok, tc.want, out)
			}
		})
	}
	if server.Leaf == nil {
		t.Fatalf("IssueServerCert returned no Leaf")
	}
}

// serveTLS runs an HTTPS server answering with the client certificate's CN
// ("anonymous" without one) and returns its address.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
				fmt.Fprint(w, r.TLS.PeerCertificates[0].Subject.CommonName)
				return
			}
			fmt.Fprint(w, "anonymous")
		}),
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// getAs sends one GET / on a new connection to serveTLS's server at addr
// ("puppet", verified against roots), presenting client (none if nil), and
// returns the body: the CN the server saw.
func getAs(roots *x509.CertPool, addr string, client *tls.Certificate) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "puppet",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if client == nil {
				return &tls.Certificate{}, nil
			}
			return client, nil
		},
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func TestTLSClientVerification(t *testing.T) {
	c := openCA(t, Options{})
	server, err := c.IssueServerCert(t.Context(), "puppet.test", []string{"puppet"}, "")
	if err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	good := signAgent(t, c, "good.example.test")
	revoked := signAgent(t, c, "revoked.example.test")
	if err := c.Revoke(t.Context(), revoked.name); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	other := freshCA(t, Options{Name: "stranger"})
	stranger := signAgent(t, other, "good.example.test") // same name, another CA

	tlsVerifies := c.ServerTLSConfig(server)
	tlsVerifies.ClientAuth = tls.VerifyClientCertIfGiven // crypto/tls verifies; VerifyConnection checks revocation
	configs := map[string]*tls.Config{
		"ServerTLSConfig":                   c.ServerTLSConfig(server),
		"VerifyConnection after crypto/tls": tlsVerifies,
	}
	for cfgName, cfg := range configs {
		addr := serveTLS(t, cfg)
		tests := []struct {
			name   string
			client *tls.Certificate
			want   string // body, or "" for a refused handshake
		}{
			{"no client certificate", nil, "anonymous"},
			{"signed agent", good.tls(), "good.example.test"},
			{"revoked agent", revoked.tls(), ""},
			{"agent of another CA", stranger.tls(), ""},
		}
		for _, tc := range tests {
			t.Run(cfgName+"/"+tc.name, func(t *testing.T) {
				body, err := getAs(c.Pool(), addr, tc.client)
				if tc.want == "" {
					if err == nil {
						t.Fatalf("request with a refused certificate succeeded")
					}
					return
				}
				if err != nil {
					t.Fatalf("GET: %v", err)
				}
				if body != tc.want {
					t.Fatalf("server saw %q, want %q", body, tc.want)
				}
			})
		}
	}
}

func requireRuby(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("ruby")
	if err != nil {
		t.Fatalf("ruby with Puppet 7 (Debian's puppet-agent) is required to check the CA against the real agent code: %v", err)
	}
	return p
}

func runRuby(t *testing.T, ruby, home string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), ruby, args...)
	cmd.Env = append(os.Environ(), "HOME="+home) // Puppet must not touch the real ~/.puppetlabs
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run ruby %v: %v", args, err)
	}
	return string(out), err
}

// TestPuppetAgentTrustsFarm drives Puppet 7's own agent SSL code (Ruby
// OpenSSL, certificate_revocation = chain) against the CA: a CSR made by
// Puppet is signed with its extensions, and the agent accepts the front
// door's ECDSA P-256 certificate with the CA and CRL chain, then refuses it
// once revoked, and refuses to use its own certificate once revoked.
func TestPuppetAgentTrustsFarm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ruby Puppet; skipped with -short")
	}
	ruby := requireRuby(t)
	work := t.TempDir()
	const name = "agent-ruby.example.test"
	out, err := runRuby(t, ruby, work, "testdata/puppet_csr.rb", name, work)
	if err != nil || !strings.Contains(out, "CSR_OK") {
		t.Fatalf("Puppet did not make a CSR (is Debian's puppet-agent installed?): %v\n%s", err, out)
	}

	c := openCA(t, Options{})
	if err := c.SubmitCSR(t.Context(), name, mustReadFile(t, filepath.Join(work, "agent_csr.pem"))); err != nil {
		t.Fatalf("SubmitCSR of Puppet's CSR: %v", err)
	}
	if err := c.Sign(t.Context(), name); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	agentPEM := c.signedPEM(t, name)
	roles := 0
	for _, ext := range mustParseCert(t, agentPEM).Extensions {
		if ext.Id.Equal(oidPPRole) && strings.Contains(string(ext.Value), "webserver") {
			roles++
		}
	}
	if roles != 1 {
		t.Fatalf("pp_role from Puppet's CSR is not in the certificate")
	}

	server, err := c.IssueServerCert(t.Context(), "puppet.test", []string{"puppet", "localhost", "127.0.0.1"}, "")
	if err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	addr := serveTLS(t, c.ServerTLSConfig(server))
	_, port, _ := net.SplitHostPort(addr)

	caFile, crlFile, certFile := filepath.Join(work, "ca.pem"), filepath.Join(work, "crl.pem"), filepath.Join(work, "agent_cert.pem")
	caPEM, _ := c.CACertificate(t.Context())
	mustWriteFile(t, caFile, caPEM)
	mustWriteFile(t, certFile, agentPEM)
	connect := func() (string, error) {
		crl, err := c.CRL(t.Context())
		if err != nil {
			t.Fatalf("CRL: %v", err)
		}
		mustWriteFile(t, crlFile, crl)
		return runRuby(t, ruby, work, "testdata/puppet_connect.rb", caFile, crlFile, filepath.Join(work, "agent_key.pem"), certFile, "puppet.test", port)
	}

	out, err = connect()
	if err != nil {
		t.Fatalf("Puppet's agent refused the farm: %v\n%s", err, out)
	}
	for _, want := range []string{"PEER_KEY OpenSSL::PKey::EC prime256v1", "BODY " + name, "TLS TLSv1.3 ", "TLS TLSv1.2 ECDHE-ECDSA-"} {
		if !strings.Contains(out, want) {
			t.Fatalf("agent output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("Puppet agent accepted the ECDSA front door:\n%s", out)

	if err := c.Revoke(t.Context(), "puppet.test"); err != nil {
		t.Fatalf("Revoke server: %v", err)
	}
	out, err = connect()
	if err == nil || !strings.Contains(out, "revoked") {
		t.Fatalf("agent accepted a revoked server certificate: %v\n%s", err, out)
	}
	t.Logf("revoked server: %s", strings.TrimSpace(out))

	if err := c.Revoke(t.Context(), name); err != nil {
		t.Fatalf("Revoke agent: %v", err)
	}
	out, err = connect()
	if err == nil || !strings.Contains(out, "is revoked") {
		t.Fatalf("agent used its revoked certificate: %v\n%s", err, out)
	}
	t.Logf("revoked agent: %s", strings.TrimSpace(out))
}
