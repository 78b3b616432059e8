package caproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/frontdoor"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// upstream is a real Puppet CA for the proxy to talk to: the built-in CA
// behind the real front door handler, on TLS on 127.0.0.1.
type upstream struct {
	dir string
	ca  *ca.CA
	srv *httptest.Server
	url string

	mu       sync.Mutex
	statuses []string // "GET /path STATUS" of every answer
}

// answers returns the statuses the upstream answered requests for path with.
func (u *upstream) answers(path string) []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []int
	for _, s := range u.statuses {
		var m, p string
		var code int
		fmt.Sscan(s, &m, &p, &code)
		if p == path {
			out = append(out, code)
		}
	}
	return out
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }

func startUpstream(t *testing.T, opts ca.Options) *upstream {
	t.Helper()
	ctx := context.Background()
	opts.Name = "upstream"
	opts.KeyBits = 2048
	opts.Logger = quiet()
	dir := t.TempDir()
	authority, err := cadir.OpenCA(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { authority.Close() })
	serverCert, err := authority.IssueServerCert(ctx, "puppet.test", []string{"localhost", "127.0.0.1"}, pki.KeyECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	fd := &frontdoor.Server{CA: authority, Revocations: authority, Peers: authority, Log: quiet()}
	up := &upstream{dir: dir, ca: authority}
	h := fd.Handler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		up.mu.Lock()
		up.statuses = append(up.statuses, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, rec.status))
		up.mu.Unlock()
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.TLS = authority.ServerTLSConfig(serverCert)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	up.srv, up.url = srv, srv.URL
	return up
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// logBuf collects log output for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// openProxy opens a proxy to up with a fresh Dir unless opts has one.
func openProxy(t *testing.T, up *upstream, opts Options) (*CA, *logBuf) {
	t.Helper()
	logs := &logBuf{}
	opts.Upstream = up.url
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = logs.logger()
	}
	p, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, logs
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s %q does not contain %q", what, got, w)
		}
	}
}

func checkPerm(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %v, want %v", path, got, want)
	}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM in %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// agentCert gets a signed agent certificate from the upstream directly.
func agentCert(t *testing.T, up *upstream, name string) tls.Certificate {
	t.Helper()
	ctx := context.Background()
	csr, key := farmtest.NewCSR(t, name)
	if err := up.ca.SubmitCSR(ctx, name, csr); err != nil {
		t.Fatal(err)
	}
	if _, err := up.ca.CertificateRequest(ctx, name); err == nil {
		if err := up.ca.Sign(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	certPEM, err := up.ca.Certificate(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func TestOpenTrust(t *testing.T) {
	up := startUpstream(t, ca.Options{})
	other := startUpstream(t, ca.Options{})
	upCA, _ := up.ca.CACertificate(context.Background())
	otherCA, _ := other.ca.CACertificate(context.Background())
	fp := pki.Fingerprint(parseCert(t, upCA).Raw)

	t.Run("trust on first use", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "proxy")
		p, logs := openProxy(t, up, Options{Dir: dir})
		got, _ := p.CACertificate(context.Background())
		if !bytes.Equal(got, upCA) {
			t.Fatalf("CA certificate differs from the upstream's")
		}
		mustContain(t, "log", logs.String(), "trusting the upstream CA certificate on first use", fp)
		kept, err := os.ReadFile(filepath.Join(dir, fileCACert))
		if err != nil || !bytes.Equal(kept, upCA) {
			t.Fatalf("CA certificate not kept in Dir: %v", err)
		}
		checkPerm(t, dir, 0o700)
		checkPerm(t, filepath.Join(dir, fileCACert), 0o600)
		checkPerm(t, filepath.Join(dir, fileCRL), 0o600)

		// A later start trusts the kept copy: the same upstream is fine...
		p.Close()
		_, logs = openProxy(t, up, Options{Dir: dir})
		mustContain(t, "log", logs.String(), "trusting the kept upstream CA certificate")
		if strings.Contains(logs.String(), "first use") {
			t.Errorf("bootstrapped again: %s", logs)
		}
		// ... and another CA at that address is refused, not trusted anew.
		_, err = Open(context.Background(), Options{Upstream: other.url, Dir: dir, Logger: quiet()})
		if err == nil {
			t.Fatal("opened against another CA with the kept CA certificate")
		}
		mustContain(t, "error", err.Error(), "does not verify against the trusted CA certificate", "remove "+filepath.Join(dir, fileCACert))
	})

	tests := []struct {
		name    string
		file    []byte
		wantErr []string // empty: success
	}{
		{"pinned", upCA, nil},
		{"pinned wrong CA", otherCA, []string{"does not verify against the trusted CA certificate", "CACertFile"}},
		{"pinned not PEM", []byte("hello"), []string{"no PEM certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := Open(context.Background(), Options{Upstream: up.url, Dir: dir, CACertFile: writeTemp(t, "ca.pem", tt.file), Logger: quiet()})
			if len(tt.wantErr) > 0 {
				if err == nil {
					p.Close()
					t.Fatal("Open succeeded")
				}
				mustContain(t, "error", err.Error(), tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			got, _ := p.CACertificate(context.Background())
			if !bytes.Equal(got, upCA) {
				t.Fatal("CA certificate differs from the pinned one")
			}
			if _, err := os.Stat(filepath.Join(dir, fileCACert)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a pinned CA certificate was copied to Dir: %v", err)
			}
		})
	}

	t.Run("pinned leaf certificate", func(t *testing.T) {
		leaf := agentCert(t, up, "leaf.test")
		leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})
		_, err := Open(context.Background(), Options{Upstream: up.url, Dir: t.TempDir(), CACertFile: writeTemp(t, "ca.pem", leafPEM), Logger: quiet()})
		if err == nil {
			t.Fatal("Open succeeded")
		}
		mustContain(t, "error", err.Error(), "is not a CA certificate")
	})
}

func TestOpenOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"http", Options{Upstream: "http://127.0.0.1:8140", Dir: "x"}, "not an https:// base URL"},
		{"no host", Options{Upstream: "https://", Dir: "x"}, "not an https:// base URL"},
		{"no dir", Options{Upstream: "https://127.0.0.1:8140"}, "no directory"},
		{"small key", Options{Upstream: "https://127.0.0.1:8140", Dir: "x", KeyBits: 1024}, "too small"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), tt.opts)
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			mustContain(t, "error", err.Error(), tt.want)
		})
	}
}

// closedURL returns an https URL on which nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "https://" + addr
}

func TestUnreachable(t *testing.T) {
	ctx := context.Background()
	t.Run("at first start", func(t *testing.T) {
		url := closedURL(t)
		_, err := Open(ctx, Options{Upstream: url, Dir: t.TempDir(), Logger: quiet(), Timeout: 2 * time.Second})
		if err == nil {
			t.Fatal("Open succeeded")
		}
		if !errors.Is(err, farm.ErrTransient) {
			t.Errorf("err = %v, want ErrTransient", err)
		}
		mustContain(t, "error", err.Error(), "upstream CA "+url+" is unreachable")
	})

	t.Run("after start", func(t *testing.T) {
		up := startUpstream(t, ca.Options{Autosign: true})
		dir := t.TempDir()
		p, logs := openProxy(t, up, Options{Dir: dir, Timeout: 2 * time.Second, CRLRefresh: 20 * time.Millisecond})
		crl, _ := p.CRL(ctx)
		up.srv.Close()

		csr, _ := farmtest.NewCSR(t, "agent1.test")
		err := p.SubmitCSR(ctx, "agent1.test", csr)
		if !errors.Is(err, farm.ErrTransient) {
			t.Fatalf("SubmitCSR err = %v, want ErrTransient", err)
		}
		mustContain(t, "error", err.Error(), "upstream CA "+up.url+" is unreachable")
		if _, err := p.Certificate(ctx, "agent1.test"); !errors.Is(err, farm.ErrTransient) {
			t.Errorf("Certificate err = %v, want ErrTransient", err)
		}
		if err := p.RefreshCRL(ctx); err == nil {
			t.Error("RefreshCRL succeeded with the upstream down")
		}
		// The last good CRL still serves, and the background refresh says why it is old.
		got, err := p.CRL(ctx)
		if err != nil || !bytes.Equal(got, crl) {
			t.Errorf("CRL with upstream down: %v", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(logs.String(), "serving the last good copy") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		mustContain(t, "log", logs.String(), "could not refresh the CRL from the upstream CA; serving the last good copy")

		// A restart with the upstream down starts from what Dir keeps.
		p.Close()
		p2, logs2 := openProxy(t, up, Options{Dir: dir, Timeout: 2 * time.Second})
		got, err = p2.CRL(ctx)
		if err != nil || !bytes.Equal(got, crl) {
			t.Errorf("kept CRL after restart: %v", err)
		}
		mustContain(t, "log", logs2.String(), "serving the kept copy")
	})
}

// newCSRWith builds an ECDSA CSR with a chosen CN and SANs.
func newCSRWith(t *testing.T, cn string, dns ...string) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestSubmitCSR(t *testing.T) {
	ctx := context.Background()
	up := startUpstream(t, ca.Options{Autosign: true})
	p, _ := openProxy(t, up, Options{})

	signed, key := farmtest.NewCSR(t, "signed.test")
	if err := p.SubmitCSR(ctx, "signed.test", signed); err != nil {
		t.Fatalf("SubmitCSR: %v", err)
	}
	certPEM, err := p.Certificate(ctx, "signed.test")
	if err != nil {
		t.Fatalf("Certificate after autosign: %v", err)
	}
	if cert := parseCert(t, certPEM); !pki.PublicKeysEqual(key.Public(), cert.PublicKey) {
		t.Fatal("autosigned certificate has another key")
	}

	tests := []struct {
		name     string
		certname string
		csr      []byte
		kind     error
		want     []string
	}{
		{"CN mismatch", "agent1.test", newCSRWith(t, "other.test"), farm.ErrInvalid, []string{`Instance name "other.test" does not match requested key "agent1.test"`}},
		{"SANs refused", "agent2.test", newCSRWith(t, "agent2.test", "evil.test"), farm.ErrInvalid, []string{"contains extra subject alternative names (DNS:evil.test)"}},
		{"not PEM", "agent3.test", []byte("garbage"), farm.ErrInvalid, []string{"not a PEM certificate request"}},
		{"already signed", "signed.test", signed, farm.ErrConflict, []string{"signed.test already has a signed certificate"}},
		{"bad certname", "Agent.test", signed, farm.ErrInvalid, []string{"certname"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.SubmitCSR(ctx, tt.certname, tt.csr)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			mustContain(t, "error", err.Error(), tt.want...)
		})
	}

	t.Run("pending without autosign", func(t *testing.T) {
		up := startUpstream(t, ca.Options{})
		p, _ := openProxy(t, up, Options{})
		csr, _ := farmtest.NewCSR(t, "pending.test")
		if err := p.SubmitCSR(ctx, "pending.test", csr); err != nil {
			t.Fatal(err)
		}
		got, err := p.CertificateRequest(ctx, "pending.test")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := up.ca.CertificateRequest(ctx, "pending.test")
		if !bytes.Equal(got, want) {
			t.Errorf("CertificateRequest = %q, want the upstream's %q", got, want)
		}
		if _, err := p.Certificate(ctx, "pending.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("Certificate of unsigned request: err = %v, want ErrNotFound", err)
		}
	})
}

func TestNotFound(t *testing.T) {
	ctx := context.Background()
	up := startUpstream(t, ca.Options{})
	p, _ := openProxy(t, up, Options{})
	tests := []struct {
		name string
		get  func(context.Context, string) ([]byte, error)
		want string
	}{
		{"certificate", p.Certificate, "Could not find certificate nobody.test"},
		{"certificate_request", p.CertificateRequest, "Could not find certificate_request nobody.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.get(ctx, "nobody.test")
			if !errors.Is(err, farm.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
			var ue *UpstreamError
			if !errors.As(err, &ue) || ue.Status != http.StatusNotFound || ue.Message != tt.want {
				t.Fatalf("err = %#v, want an UpstreamError 404 %q", err, tt.want)
			}
		})
	}
}

// TestContract runs farm.CA's suite on a proxy to a real upstream CA: the
// proxy signs nothing itself, so the suite signs and revokes on the
// upstream, as its operator would, and checks the proxy refuses to.
func TestContract(t *testing.T) {
	var mu sync.Mutex
	upstreams := map[farm.CA]*ca.CA{}
	farmtest.TestCA(t, func(t *testing.T) farm.CA {
		up := startUpstream(t, ca.Options{})
		p, _ := openProxy(t, up, Options{CRLRefresh: 50 * time.Millisecond})
		mu.Lock()
		defer mu.Unlock()
		upstreams[p] = up.ca
		return p
	}, farmtest.SignsNothing(func(p farm.CA) farm.CA {
		mu.Lock()
		defer mu.Unlock()
		return upstreams[p]
	}))
}

func TestUpstreamOnly(t *testing.T) {
	ctx := context.Background()
	up := startUpstream(t, ca.Options{})
	p, _ := openProxy(t, up, Options{})
	_, listErr := p.List(ctx)
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"sign", p.Sign(ctx, "agent1"), "sign agent1: this front door proxies CA requests to " + up.url + "; sign on the upstream CA (puppetserver ca sign --certname agent1)"},
		{"revoke", p.Revoke(ctx, "agent1"), "revoke on the upstream CA (puppetserver ca revoke --certname agent1)"},
		{"list", listErr, "list certificates on the upstream CA (puppetserver ca list --all)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, farm.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", tt.err)
			}
			mustContain(t, "error", tt.err.Error(), tt.want)
		})
	}
}

func TestCRL(t *testing.T) {
	ctx := context.Background()
	up := startUpstream(t, ca.Options{Autosign: true})
	a1 := agentCert(t, up, "agent1.test")
	a2 := agentCert(t, up, "agent2.test")

	// An unchanged CRL is not downloaded again: the proxy sends
	// If-Modified-Since and the upstream answers 304.
	t.Run("ConditionalGET", func(t *testing.T) {
		up := startUpstream(t, ca.Options{Autosign: true})
		a := agentCert(t, up, "agent3.test")
		p, _ := openProxy(t, up, Options{Dir: t.TempDir(), CRLRefresh: time.Hour})
		const path = "/puppet-ca/v1/certificate_revocation_list/ca"
		before := len(up.answers(path))
		if err := p.RefreshCRL(ctx); err != nil {
			t.Fatal(err)
		}
		if got := up.answers(path)[before:]; len(got) != 1 || got[0] != http.StatusNotModified {
			t.Fatalf("refresh of an unchanged CRL: upstream answered %v, want [304]", got)
		}
		if err := up.ca.Revoke(ctx, "agent3.test"); err != nil {
			t.Fatal(err)
		}
		if err := p.RefreshCRL(ctx); err != nil {
			t.Fatal(err)
		}
		if got := up.answers(path); got[len(got)-1] != http.StatusOK || !p.IsRevoked(a.Leaf.SerialNumber) {
			t.Fatalf("refresh after a revocation: upstream answered %v, revoked %v; want 200 and true", got, p.IsRevoked(a.Leaf.SerialNumber))
		}
	})

	t.Run("RefreshCRL", func(t *testing.T) {
		dir := t.TempDir()
		p, _ := openProxy(t, up, Options{Dir: dir, CRLRefresh: time.Hour})
		if p.IsRevoked(a1.Leaf.SerialNumber) {
			t.Fatal("revoked before revocation")
		}
		if err := up.ca.Revoke(ctx, "agent1.test"); err != nil {
			t.Fatal(err)
		}
		if err := p.RefreshCRL(ctx); err != nil {
			t.Fatal(err)
		}
		if !p.IsRevoked(a1.Leaf.SerialNumber) || p.IsRevoked(a2.Leaf.SerialNumber) {
			t.Fatal("IsRevoked does not follow the upstream CRL")
		}
		got, _ := p.CRL(ctx)
		want, _ := up.ca.CRL(ctx)
		if !bytes.Equal(got, want) {
			t.Error("CRL differs from the upstream's")
		}
		kept, _ := os.ReadFile(filepath.Join(dir, fileCRL))
		if !bytes.Equal(kept, want) {
			t.Error("CRL not kept in Dir")
		}
	})

	t.Run("background refresh", func(t *testing.T) {
		p, _ := openProxy(t, up, Options{CRLRefresh: 20 * time.Millisecond})
		if p.IsRevoked(a2.Leaf.SerialNumber) {
			t.Fatal("revoked before revocation")
		}
		if err := up.ca.Revoke(ctx, "agent2.test"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !p.IsRevoked(a2.Leaf.SerialNumber) {
			if time.Now().After(deadline) {
				t.Fatal("background refresh did not pick up the revocation")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("kept CRL of another CA is ignored", func(t *testing.T) {
		other := startUpstream(t, ca.Options{})
		otherCRL, _ := other.ca.CRL(ctx)
		dir := t.TempDir()
		p, _ := openProxy(t, up, Options{Dir: dir})
		p.Close()
		if err := os.WriteFile(filepath.Join(dir, fileCRL), otherCRL, 0o600); err != nil {
			t.Fatal(err)
		}
		p, logs := openProxy(t, up, Options{Dir: dir})
		mustContain(t, "log", logs.String(), "ignoring the kept CRL", "not signed by the trusted upstream CA certificate")
		got, _ := p.CRL(ctx)
		want, _ := up.ca.CRL(ctx)
		if !bytes.Equal(got, want) {
			t.Error("CRL is not the upstream's")
		}
	})
}

// TestTLSServer serves with the proxy's ServerTLSConfig and ServerCert and
// connects as agents of the upstream CA.
func TestTLSServer(t *testing.T) {
	ctx := context.Background()
	up := startUpstream(t, ca.Options{Autosign: true, AllowSubjectAltNames: true})
	p, _ := openProxy(t, up, Options{CRLRefresh: time.Hour})
	server, err := p.ServerCert(ctx, "front.test", []string{"localhost", "127.0.0.1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 {
			io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = p.ServerTLSConfig(server)
	srv.StartTLS()
	defer srv.Close()

	good := agentCert(t, up, "good.test")
	bad := agentCert(t, up, "bad.test")
	if err := up.ca.Revoke(ctx, "bad.test"); err != nil {
		t.Fatal(err)
	}
	if err := p.RefreshCRL(ctx); err != nil {
		t.Fatal(err)
	}
	get := func(cert *tls.Certificate) (string, error) {
		conf := &tls.Config{RootCAs: p.Pool(), ServerName: "localhost"}
		if cert != nil {
			conf.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(srv.URL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	tests := []struct {
		name    string
		cert    *tls.Certificate
		want    string
		wantErr bool
	}{
		{"no client certificate", nil, "", false},
		{"valid agent", &good, "good.test", false},
		{"revoked agent", &bad, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := get(tt.cert)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("got %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	t.Run("VerifyConnection without verified chains", func(t *testing.T) {
		if err := p.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{good.Leaf}}); err != nil {
			t.Errorf("good: %v", err)
		}
		err := p.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{bad.Leaf}})
		if err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("bad: %v", err)
		}
	})
}

func TestServerCert(t *testing.T) {
	ctx := context.Background()
	up := startUpstream(t, ca.Options{Autosign: true, AllowSubjectAltNames: true})
	dir := t.TempDir()
	p, _ := openProxy(t, up, Options{Dir: dir, KeyBits: 2048})
	alt := []string{"puppet", "DNS:Puppet.Example.Test", "IP:127.0.0.1", "::1"}

	first, err := p.ServerCert(ctx, "front.test", alt, "")
	if err != nil {
		t.Fatal(err)
	}
	leaf := first.Leaf
	if leaf.Subject.CommonName != "front.test" {
		t.Errorf("CN = %q", leaf.Subject.CommonName)
	}
	for _, n := range []string{"front.test", "puppet", "puppet.example.test"} {
		if err := leaf.VerifyHostname(n); err != nil {
			t.Errorf("certificate does not cover %s: %v", n, err)
		}
	}
	for _, ip := range []string{"127.0.0.1", "::1"} {
		if err := leaf.VerifyHostname(ip); err != nil {
			t.Errorf("certificate does not cover %s: %v", ip, err)
		}
	}
	if _, ok := first.PrivateKey.(*ecdsa.PrivateKey); !ok {
		t.Errorf("default key is %T, want ECDSA", first.PrivateKey)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: up.ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("certificate does not verify against the upstream CA: %v", err)
	}
	checkPerm(t, filepath.Join(dir, dirServer), 0o700)
	checkPerm(t, filepath.Join(dir, dirServer, "front.test.key"), 0o600)
	checkPerm(t, filepath.Join(dir, dirServer, "front.test.pem"), 0o600)
	if _, err := os.Stat(filepath.Join(dir, dirPending, "front.test.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pending key left behind: %v", err)
	}

	sameSerial := func(t *testing.T, got tls.Certificate, want *x509.Certificate) {
		t.Helper()
		if got.Leaf.SerialNumber.Cmp(want.SerialNumber) != 0 {
			t.Fatalf("serial %v, want the kept %v", got.Leaf.SerialNumber, want.SerialNumber)
		}
	}
	t.Run("reused", func(t *testing.T) {
		again, err := p.ServerCert(ctx, "front.test", []string{"puppet"}, pki.KeyECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		sameSerial(t, again, leaf)
	})
	t.Run("reused after restart", func(t *testing.T) {
		p2, logs := openProxy(t, up, Options{Dir: dir})
		again, err := p2.ServerCert(ctx, "front.test", alt, "")
		if err != nil {
			t.Fatal(err)
		}
		sameSerial(t, again, leaf)
		mustContain(t, "log", logs.String(), "reusing server certificate")
		if _, err := up.ca.CertificateRequest(ctx, "front.test"); !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("a request was submitted: %v", err)
		}
	})
	t.Run("rsa", func(t *testing.T) {
		c, err := p.ServerCert(ctx, "front-rsa.test", nil, pki.KeyRSA)
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := c.PrivateKey.(*rsa.PrivateKey); !ok || k.N.BitLen() != 2048 {
			t.Fatalf("key %T, want 2048-bit RSA", c.PrivateKey)
		}
	})
	t.Run("new names need a new certificate the upstream will not sign over the old", func(t *testing.T) {
		_, err := p.ServerCert(ctx, "front.test", append(alt, "more.test"), "")
		if !errors.Is(err, farm.ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
		mustContain(t, "error", err.Error(), "certificate lacks DNS name more.test", "puppetserver ca clean --certname front.test")
	})
	t.Run("revoked certificate replaced", func(t *testing.T) {
		if err := up.ca.Revoke(ctx, "front.test"); err != nil {
			t.Fatal(err)
		}
		if err := p.RefreshCRL(ctx); err != nil {
			t.Fatal(err)
		}
		c, err := p.ServerCert(ctx, "front.test", alt, "")
		if err != nil {
			t.Fatal(err)
		}
		if c.Leaf.SerialNumber.Cmp(leaf.SerialNumber) == 0 || pki.PublicKeysEqual(c.Leaf.PublicKey, leaf.PublicKey) {
			t.Fatal("revoked certificate or its key reused")
		}
	})
	t.Run("name held by an agent", func(t *testing.T) {
		agentCert(t, up, "taken.test")
		_, err := p.ServerCert(ctx, "taken.test", nil, "")
		if !errors.Is(err, farm.ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
		mustContain(t, "error", err.Error(), "already holds a certificate for taken.test with another key", "puppetserver ca clean --certname taken.test")
	})
	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			certname, keyType string
			alt               []string
		}{{"Front.test", "", nil}, {"front2.test", "dsa", nil}, {"front2.test", "", []string{"IP:nope"}}, {"front2.test", "", []string{"*.wild"}}} {
			if _, err := p.ServerCert(ctx, c.certname, c.alt, c.keyType); !errors.Is(err, farm.ErrInvalid) {
				t.Errorf("ServerCert(%q, %q, %q): err = %v, want ErrInvalid", c.certname, c.alt, c.keyType, err)
			}
		}
	})
}

func TestServerCertSANsRefused(t *testing.T) {
	ctx := context.Background()
	up := startUpstream(t, ca.Options{Autosign: true})
	p, _ := openProxy(t, up, Options{})
	tests := []struct {
		name    string
		alt     []string
		wantErr []string
	}{
		{"with alt names", []string{"puppet", "IP:127.0.0.1"}, []string{
			"refuses certificate requests with subject alternative names (DNS:puppet, IP:127.0.0.1)",
			"allow-subject-alt-names", "AllowSubjectAltNames", "contains extra subject alternative names"}},
		{"without alt names", nil, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certname := []string{"front1.test", "front2.test"}[i]
			c, err := p.ServerCert(ctx, certname, tt.alt, "")
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Leaf.VerifyHostname(certname); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			mustContain(t, "error", err.Error(), tt.wantErr...)
		})
	}
}

// signWhenRequested plays the upstream CA's operator: it signs certname's
// request once it shows up.
func signWhenRequested(t *testing.T, up *upstream, certname string) chan error {
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := up.ca.CertificateRequest(ctx, certname); err == nil {
				done <- up.ca.Sign(ctx, certname)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- errors.New("no request showed up")
	}()
	return done
}

func TestServerCertWaitsForOperator(t *testing.T) {
	up := startUpstream(t, ca.Options{AllowSubjectAltNames: true})

	t.Run("signed while waiting", func(t *testing.T) {
		p, logs := openProxy(t, up, Options{})
		signed := signWhenRequested(t, up, "front.test")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := p.ServerCert(ctx, "front.test", []string{"puppet"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := <-signed; err != nil {
			t.Fatal(err)
		}
		if err := c.Leaf.VerifyHostname("puppet"); err != nil {
			t.Fatal(err)
		}
		mustContain(t, "log", logs.String(),
			"waiting for the upstream CA to sign front.test; on the CA run: puppetserver ca sign --certname front.test")
	})

	t.Run("signed after giving up, picked up on restart", func(t *testing.T) {
		dir := t.TempDir()
		p, _ := openProxy(t, up, Options{Dir: dir})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := p.ServerCert(ctx, "late.test", nil, "")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		mustContain(t, "error", err.Error(), "has not signed the request", "puppetserver ca sign --certname late.test")
		pendingPEM, _ := os.ReadFile(filepath.Join(dir, dirPending, "late.test.key"))
		pending, err := pki.ParsePrivateKey(pendingPEM)
		if err != nil {
			t.Fatalf("pending key: %v", err)
		}
		if err := up.ca.Sign(context.Background(), "late.test"); err != nil {
			t.Fatal(err)
		}
		p.Close()
		p2, _ := openProxy(t, up, Options{Dir: dir})
		c, err := p2.ServerCert(context.Background(), "late.test", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if !pki.PublicKeysEqual(pending.Public(), c.Leaf.PublicKey) {
			t.Fatal("the certificate signed for the pending key was not used")
		}
	})

	t.Run("restart while pending does not submit again", func(t *testing.T) {
		dir := t.TempDir()
		p, _ := openProxy(t, up, Options{Dir: dir})
		// The first ServerCert gives up once its request is pending on the
		// upstream CA (not after a fixed time: on a loaded machine the
		// request may not have been sent by then, and the restart below
		// would then have nothing pending to find).
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			for ctx.Err() == nil {
				if _, err := up.ca.CertificateRequest(context.Background(), "again.test"); err == nil {
					cancel()
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		if _, err := p.ServerCert(ctx, "again.test", nil, ""); err == nil {
			t.Fatal("signed without the operator")
		}
		before, err := up.ca.CertificateRequest(context.Background(), "again.test")
		if err != nil {
			t.Fatalf("no request pending on the upstream CA after the first ServerCert: %v", err)
		}
		p.Close()
		p2, logs := openProxy(t, up, Options{Dir: dir})
		signed := signWhenRequested(t, up, "again.test")
		c, err := p2.ServerCert(context.Background(), "again.test", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := <-signed; err != nil {
			t.Fatal(err)
		}
		mustContain(t, "log", logs.String(), "already pending on the upstream CA")
		csr, _ := parseCSRPEM(before)
		if !pki.PublicKeysEqual(csr.PublicKey, c.Leaf.PublicKey) {
			t.Fatal("certificate is not for the first request's key")
		}
	})
}

func TestServerCertRequestRejected(t *testing.T) {
	defer func(d time.Duration) { remindEvery = d }(remindEvery)
	remindEvery = 100 * time.Millisecond
	up := startUpstream(t, ca.Options{})
	p, _ := openProxy(t, up, Options{})
	go func() {
		// The operator rejects the request: puppetserver ca clean removes it.
		for range 400 {
			if _, err := up.ca.CertificateRequest(context.Background(), "rejected.test"); err == nil {
				os.Remove(filepath.Join(up.dir, "requests", "rejected.test.pem"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := p.ServerCert(ctx, "rejected.test", nil, "")
	if !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	mustContain(t, "error", err.Error(), "no longer pending on the upstream CA")
}

// TestBootstrapMismatch: an upstream whose TLS certificate is not signed by
// the CA certificate it serves (a man in the middle, or a misconfigured
// server) is not trusted on first use.
func TestBootstrapMismatch(t *testing.T) {
	ctx := context.Background()
	a := startUpstream(t, ca.Options{})
	b := startUpstream(t, ca.Options{})
	serverCert, err := b.ca.IssueServerCert(ctx, "mitm.test", []string{"127.0.0.1"}, pki.KeyECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer((&frontdoor.Server{CA: a.ca, Revocations: a.ca, Peers: a.ca, Log: quiet()}).Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = b.ca.ServerTLSConfig(serverCert)
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	_, err = Open(ctx, Options{Upstream: srv.URL, Dir: dir, Logger: quiet()})
	if err == nil {
		t.Fatal("Open succeeded")
	}
	mustContain(t, "error", err.Error(), "not signed by the CA certificate it serves; nothing was trusted")
	if _, err := os.Stat(filepath.Join(dir, fileCACert)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CA certificate kept: %v", err)
	}
}

// TestFrontDoor serves the proxy through the real front door handler, as
// broker serve --ca-upstream does, and checks what agents see.
func TestFrontDoor(t *testing.T) {
	up := startUpstream(t, ca.Options{})
	p, _ := openProxy(t, up, Options{})
	fd := &frontdoor.Server{CA: p, Revocations: p, Peers: p, Log: quiet()}
	srv := httptest.NewServer(fd.Handler())
	defer srv.Close()
	upCA, _ := up.ca.CACertificate(context.Background())
	sans := newCSRWith(t, "agent9.test", "evil.test")
	good, _ := farmtest.NewCSR(t, "agent8.test")

	tests := []struct {
		name, method, path string
		body               []byte
		status             int
		want               string
	}{
		{"CA certificate", "GET", "/puppet-ca/v1/certificate/ca", nil, 200, string(upCA)},
		{"unknown certificate", "GET", "/puppet-ca/v1/certificate/nobody.test", nil, 404, "Could not find certificate nobody.test"},
		{"CSR refused upstream", "PUT", "/puppet-ca/v1/certificate_request/agent9.test", sans, 400, "contains extra subject alternative names"},
		{"CSR accepted", "PUT", "/puppet-ca/v1/certificate_request/agent8.test", good, 200, ""},
		{"pending CSR", "GET", "/puppet-ca/v1/certificate_request/agent8.test", nil, 200, string(good)},
		{"CRL", "GET", "/puppet-ca/v1/certificate_revocation_list/ca", nil, 200, "BEGIN X509 CRL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, bytes.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
				t.Fatalf("%s %s = %d %q, want %d containing %q", tt.method, tt.path, resp.StatusCode, b, tt.status, tt.want)
			}
		})
	}
}
