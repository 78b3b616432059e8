// Package caproxy is a Puppet certificate authority that forwards to an
// upstream Puppet CA over HTTPS, as Puppet Enterprise compilers do: it lets
// a front door (broker serve --ca-upstream https://HOST:8140) run without a
// CA of its own.
//
// Agents' CA requests (CA certificate, CRL, certificate requests,
// certificates) are answered from the upstream CA's HTTP API v1; signing,
// revoking and listing are done on the upstream CA, by its operator. The
// front door's own TLS certificate is requested from the upstream CA too
// (ServerCert), and client certificates are checked against the upstream
// CA certificate and its CRL (Pool, IsRevoked, VerifyConnection,
// ServerTLSConfig, built on package clientcert as package ca's are).
//
// The upstream CA certificate is either given (Options.CACertFile) or
// fetched once without verification and trusted from then on, as `puppet
// ssl bootstrap` does; every later request verifies the upstream against
// it. The CA certificate, the last good CRL and the front door's key and
// certificate are kept in Options.Dir (0700, files 0600, written
// atomically), so a restart needs the upstream only for what changed.
package caproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/clientcert"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

const (
	defaultCRLRefresh = 30 * time.Second
	defaultTimeout    = 30 * time.Second
	defaultKeyBits    = 4096
	maxBody           = 64 << 20 // CRLs of large sites are megabytes

	fileCACert = "ca_crt.pem"
	fileCRL    = "ca_crl.pem"
	dirServer  = "server"  // <certname>.pem and .key: the front door's certificates
	dirPending = "pending" // <certname>.key: keys of requests not signed yet
)

// Options configure a CA proxy.
type Options struct {
	// Upstream is the base URL of the upstream Puppet CA, such as
	// https://puppet.example.com:8140 (required, https).
	Upstream string
	// CACertFile is a PEM file holding the upstream CA certificate (or
	// bundle) to trust. When empty, the copy kept in Dir is trusted; when
	// there is none, the upstream's /puppet-ca/v1/certificate/ca is fetched
	// without verification, its fingerprint logged, and kept in Dir (trust
	// on first use).
	CACertFile string
	// Dir keeps the trusted CA certificate, the last good CRL and the front
	// door's keys and certificates (required; created 0700).
	Dir string
	// CRLRefresh is how often the CRL is fetched from the upstream
	// (default 30s).
	CRLRefresh time.Duration
	// KeyBits is the size of RSA keys ServerCert generates (default 4096,
	// at least 2048).
	KeyBits int
	// Timeout bounds each request to the upstream (default 30s).
	Timeout time.Duration
	// Logger receives bootstrap, CRL and certificate events (default
	// slog.Default()).
	Logger *slog.Logger
}

// CA is a certificate authority that forwards to an upstream Puppet CA. It
// implements farm.CA (Sign, Revoke and List return errors that say to use
// the upstream CA) and gives a TLS server what it needs. Safe for
// concurrent use. Close stops the background CRL refresh.
type CA struct {
	upstream string // base URL, no trailing slash
	opts     Options
	log      *slog.Logger
	client   *http.Client

	// Immutable after Open.
	caPEM   []byte
	caCerts []*x509.Certificate
	pool    *x509.CertPool
	// verified remembers the client certificates that verified against pool.
	verified *clientcert.VerifiedCache

	crl       atomic.Pointer[crlState]
	refreshMu sync.Mutex // one CRL refresh at a time
	serverMu  sync.Mutex // one ServerCert at a time

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ farm.CA = (*CA)(nil)

// UpstreamError is an answer of the upstream CA other than success: its
// HTTP status and message (Puppet's words, fit for an agent). Kind is
// farm.ErrInvalid (400), farm.ErrNotFound (404), farm.ErrConflict (409, or
// a 400 saying the name already has a certificate), farm.ErrTransient (429,
// 5xx) or nil, so errors.Is works on it.
type UpstreamError struct {
	Status  int
	Message string
	Kind    error
}

func (e *UpstreamError) Error() string { return e.Message }
func (e *UpstreamError) Unwrap() error { return e.Kind }

// PuppetMessage is the upstream's response body, to pass on as is.
func (e *UpstreamError) PuppetMessage() string { return e.Message }

func (o Options) withDefaults() (Options, error) {
	if o.CRLRefresh <= 0 {
		o.CRLRefresh = defaultCRLRefresh
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.KeyBits == 0 {
		o.KeyBits = defaultKeyBits
	}
	if o.KeyBits < 2048 {
		return o, fmt.Errorf("RSA key size %d bits is too small (at least 2048): %w", o.KeyBits, farm.ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Dir == "" {
		return o, fmt.Errorf("no directory given for the upstream CA's certificate and CRL: %w", farm.ErrInvalid)
	}
	u, err := url.Parse(o.Upstream)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return o, fmt.Errorf("upstream CA %q is not an https:// base URL such as https://puppet.example.com:8140: %w", o.Upstream, farm.ErrInvalid)
	}
	return o, nil
}

// Open starts a CA proxy: it settles which upstream CA certificate to trust
// (see Options.CACertFile), fetches the CRL (the copy kept in Dir serves
// when the upstream is unreachable) and starts refreshing it every
// Options.CRLRefresh. It fails when the upstream's TLS certificate does not
// verify against the trusted CA certificate, and when the upstream is
// unreachable and nothing is kept to start from.
func Open(ctx context.Context, opts Options) (*CA, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open CA proxy: %w", err)
	}
	c := &CA{
		upstream: strings.TrimRight(opts.Upstream, "/"),
		opts:     opts,
		verified: clientcert.NewVerifiedCache(0),
	}
	c.log = opts.Logger.With("component", "caproxy", "upstream", c.upstream)
	if err := c.open(ctx); err != nil {
		return nil, fmt.Errorf("open CA proxy for %s: %w", c.upstream, err)
	}
	bg, stop := context.WithCancel(context.Background())
	c.stop, c.done = stop, make(chan struct{})
	go c.refreshLoop(bg)
	return c, nil
}

func (c *CA) open(ctx context.Context) error {
	for _, d := range []string{c.path(), c.path(dirServer), c.path(dirPending)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	bootstrapped := false
	switch {
	case c.opts.CACertFile != "":
		data, err := os.ReadFile(c.opts.CACertFile)
		if err != nil {
			return fmt.Errorf("read upstream CA certificate: %w", err)
		}
		if err := c.setCA(data); err != nil {
			return fmt.Errorf("upstream CA certificate %s: %w", c.opts.CACertFile, err)
		}
		c.log.Info("trusting the given upstream CA certificate", "file", c.opts.CACertFile, "subject", c.caCerts[0].Subject.String())
	default:
		data, err := os.ReadFile(c.path(fileCACert))
		switch {
		case err == nil:
			if err := c.setCA(data); err != nil {
				return fmt.Errorf("kept upstream CA certificate %s: %w (remove it to fetch the CA certificate again)", c.path(fileCACert), err)
			}
			c.log.Info("trusting the kept upstream CA certificate", "file", c.path(fileCACert),
				"subject", c.caCerts[0].Subject.String(), "fingerprint", pki.Fingerprint(c.caCerts[0].Raw))
		case errors.Is(err, fs.ErrNotExist):
			if err := c.bootstrap(ctx); err != nil {
				return err
			}
			bootstrapped = true
		default:
			return fmt.Errorf("read kept upstream CA certificate: %w", err)
		}
	}
	c.client = c.newClient(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.pool})

	// The CRL: the kept copy first, then the upstream's.
	kept := false
	if data, err := os.ReadFile(c.path(fileCRL)); err == nil {
		if st, err := c.parseCRL(data); err != nil {
			c.log.Warn("ignoring the kept CRL", "file", c.path(fileCRL), "err", err)
		} else {
			if fi, err := os.Stat(c.path(fileCRL)); err == nil {
				st.fetched, st.since = fi.ModTime(), fi.ModTime() // written when it was fetched
			}
			c.crl.Store(st)
			kept = true
		}
	}
	err := c.RefreshCRL(ctx)
	switch {
	case err == nil:
	case bootstrapped && isVerifyError(err):
		return fmt.Errorf("the upstream's TLS certificate is not signed by the CA certificate it serves; nothing was trusted: %w", err)
	case isVerifyError(err) || bootstrapped || !kept:
		return err
	default:
		c.log.Error("could not fetch the CRL from the upstream CA; serving the kept copy until it can", "err", err)
	}
	if bootstrapped {
		// Keep the CA certificate only once the upstream proved to hold it.
		if err := atomicfile.Write(c.path(fileCACert), c.caPEM, 0o600); err != nil {
			return fmt.Errorf("keep upstream CA certificate: %w", err)
		}
	}
	return nil
}

// bootstrap fetches the CA certificate without verifying the upstream:
// trust on first use.
func (c *CA) bootstrap(ctx context.Context) error {
	insecure := c.newClient(&tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true})
	defer insecure.CloseIdleConnections()
	status, body, err := c.do(ctx, insecure, http.MethodGet, "/puppet-ca/v1/certificate/ca", nil)
	if err != nil {
		return fmt.Errorf("fetch the upstream CA certificate: %w", err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("fetch the upstream CA certificate: %w", upstreamError(status, body))
	}
	if err := c.setCA(body); err != nil {
		return fmt.Errorf("upstream CA certificate from %s/puppet-ca/v1/certificate/ca: %w", c.upstream, err)
	}
	c.log.Warn("trusting the upstream CA certificate on first use, without verification; "+
		"compare its fingerprint with the CA's (on the CA: puppetserver ca list --all, or "+
		"openssl x509 -noout -fingerprint -sha256 -in $(puppet config print cacert))",
		"subject", c.caCerts[0].Subject.String(), "fingerprint", pki.Fingerprint(c.caCerts[0].Raw),
		"kept_in", c.path(fileCACert))
	return nil
}

// setCA parses a PEM CA certificate or bundle and makes it the trusted one.
func (c *CA) setCA(data []byte) error {
	var certs []*x509.Certificate
	var norm []byte
	for der := range pemBlocks(data, "CERTIFICATE") {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("parse certificate: %w", err)
		}
		if !cert.IsCA || !cert.BasicConstraintsValid {
			return fmt.Errorf("certificate %q is not a CA certificate", cert.Subject.String())
		}
		certs = append(certs, cert)
		norm = append(norm, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})...)
	}
	if len(certs) == 0 {
		return errors.New("no PEM certificate")
	}
	pool := x509.NewCertPool()
	for _, cert := range certs {
		pool.AddCert(cert)
	}
	c.caCerts, c.caPEM, c.pool = certs, norm, pool
	return nil
}

// pemBlocks yields the bytes of each PEM block of type typ in data, in
// order; blocks of other types and text around blocks are skipped.
func pemBlocks(data []byte, typ string) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for rest := data; ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				return
			}
			if block.Type == typ && !yield(block.Bytes) {
				return
			}
		}
	}
}

func (c *CA) newClient(conf *tls.Config) *http.Client {
	return &http.Client{
		Timeout: c.opts.Timeout,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       conf,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: c.opts.Timeout,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   8,
			ForceAttemptHTTP2:     true,
		},
		// The CA API does not redirect; following one could leave the
		// verified upstream.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Close stops the background CRL refresh.
func (c *CA) Close() error {
	c.closeOnce.Do(func() {
		c.stop()
		<-c.done
		c.client.CloseIdleConnections()
	})
	return nil
}

// path names a file (or, with no name, the directory) in Options.Dir.
func (c *CA) path(name ...string) string {
	return filepath.Join(append([]string{c.opts.Dir}, name...)...)
}

// do sends one request to the upstream and reads the answer. err is a
// transport failure: the upstream unreachable, or its certificate not
// verifying.
func (c *CA) do(ctx context.Context, client *http.Client, method, path string, body []byte) (int, []byte, error) {
	status, _, data, err := c.doHeader(ctx, client, method, path, body, nil)
	return status, data, err
}

// doHeader is do with extra request headers, returning the response's.
func (c *CA) doHeader(ctx context.Context, client *http.Client, method, path string, body []byte, header http.Header) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.upstream+path, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("build request to upstream CA: %w", err)
	}
	req.Header.Set("Accept", "text/plain")
	req.Header.Set("User-Agent", "compilefarm-caproxy")
	if body != nil {
		req.Header.Set("Content-Type", "text/plain")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, c.transportError(ctx, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return 0, nil, nil, c.transportError(ctx, method, path, err)
	}
	if len(data) > maxBody {
		return 0, nil, nil, fmt.Errorf("upstream CA %s answered %s %s with more than %d bytes", c.upstream, method, path, maxBody)
	}
	return resp.StatusCode, resp.Header, data, nil
}

// verifyError marks a failure to verify the upstream's TLS certificate.
type verifyError struct{ err error }

func (e *verifyError) Error() string { return e.err.Error() }
func (e *verifyError) Unwrap() error { return e.err }

func isVerifyError(err error) bool {
	var v *verifyError
	return errors.As(err, &v)
}

func (c *CA) transportError(ctx context.Context, method, path string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("upstream CA %s: %s %s: %w", c.upstream, method, path, ctx.Err())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // drop the repeated method and URL
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) {
		subject := ""
		if len(c.caCerts) > 0 {
			subject = c.caCerts[0].Subject.String()
		}
		hint := fmt.Sprintf("check that CACertFile %s holds the upstream's CA certificate", c.opts.CACertFile)
		if c.opts.CACertFile == "" {
			hint = fmt.Sprintf("if the upstream CA was replaced, remove %s to fetch its certificate again (trust on first use), or give it as CACertFile", c.path(fileCACert))
		}
		return &verifyError{fmt.Errorf("upstream CA %s presented a TLS certificate that does not verify against the trusted CA certificate %q: %v; %s",
			c.upstream, subject, err, hint)}
	}
	return fmt.Errorf("upstream CA %s is unreachable (%s %s): %v: %w", c.upstream, method, path, err, farm.ErrTransient)
}

// upstreamError turns a non-success answer into an *UpstreamError.
func upstreamError(status int, body []byte) error {
	msg := strings.TrimSpace(string(body))
	if len(msg) > 2048 {
		msg = msg[:2048] + "..."
	}
	if msg == "" {
		msg = fmt.Sprintf("upstream CA answered %d %s", status, http.StatusText(status))
	}
	e := &UpstreamError{Status: status, Message: msg}
	switch {
	case status == http.StatusBadRequest && strings.Contains(msg, "already has a"):
		// Puppet Server: "<name> already has a signed certificate; ignoring certificate request".
		e.Kind = farm.ErrConflict
	case status == http.StatusBadRequest, status == http.StatusRequestEntityTooLarge:
		e.Kind = farm.ErrInvalid
	case status == http.StatusNotFound:
		e.Kind = farm.ErrNotFound
	case status == http.StatusConflict:
		e.Kind = farm.ErrConflict
	case status == http.StatusTooManyRequests, status >= 500:
		e.Kind = farm.ErrTransient
	}
	return e
}

func caPath(kind, certname string) string {
	return "/puppet-ca/v1/" + kind + "/" + url.PathEscape(certname)
}

// get fetches a CA API resource; 200 gives its body, anything else an error.
func (c *CA) get(ctx context.Context, kind, certname string) ([]byte, error) {
	status, body, err := c.do(ctx, c.client, http.MethodGet, caPath(kind, certname), nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, upstreamError(status, body)
	}
	return body, nil
}

// CACertificate returns the trusted upstream CA certificate (PEM; a bundle
// when the upstream has intermediate CAs).
func (c *CA) CACertificate(ctx context.Context) ([]byte, error) {
	return bytes.Clone(c.caPEM), nil
}

// SubmitCSR forwards a certificate request to the upstream CA. The
// upstream's refusals come back as *UpstreamError: farm.ErrInvalid for a
// request it refuses (its message says why), farm.ErrConflict when the name
// already has a certificate; an unreachable upstream is farm.ErrTransient.
func (c *CA) SubmitCSR(ctx context.Context, certname string, csrPEM []byte) error {
	if err := farm.ValidateCertname(certname); err != nil {
		return fmt.Errorf("submit certificate request for %q: %w", certname, err)
	}
	status, body, err := c.do(ctx, c.client, http.MethodPut, caPath("certificate_request", certname), csrPEM)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("upstream CA refused it: %w", upstreamError(status, body))
	}
	if err != nil {
		return fmt.Errorf("submit certificate request for %q: %w", certname, err)
	}
	c.log.Info("certificate request forwarded to the upstream CA", "certname", certname)
	return nil
}

// Certificate returns the upstream CA's certificate for certname (PEM);
// farm.ErrNotFound (with Puppet's message) when it has none.
func (c *CA) Certificate(ctx context.Context, certname string) ([]byte, error) {
	return c.getPEM(ctx, "certificate", certname)
}

// CertificateRequest returns the upstream CA's pending request for
// certname (PEM); farm.ErrNotFound when there is none.
func (c *CA) CertificateRequest(ctx context.Context, certname string) ([]byte, error) {
	return c.getPEM(ctx, "certificate_request", certname)
}

func (c *CA) getPEM(ctx context.Context, kind, certname string) ([]byte, error) {
	what := strings.ReplaceAll(kind, "_", " ")
	if err := farm.ValidateCertname(certname); err != nil {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, err)
	}
	b, err := c.get(ctx, kind, certname)
	if err != nil {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, err)
	}
	return b, nil
}

// Sign returns a farm.ErrInvalid error: requests are signed on the upstream CA.
func (c *CA) Sign(ctx context.Context, certname string) error {
	return c.upstreamOnly("sign "+certname, "sign", "puppetserver ca sign --certname "+certname)
}

// SignWith returns a farm.ErrInvalid error: requests are signed on the
// upstream CA, and operator certificates made there.
func (c *CA) SignWith(ctx context.Context, certname string, opts farm.SignOptions) error {
	if opts.AllowAuthorizationExtensions {
		return c.upstreamOnly("sign "+certname, "create operator certificates", "puppetserver ca generate --certname "+certname+" --ca-client")
	}
	return c.Sign(ctx, certname)
}

// Revoke returns a farm.ErrInvalid error: certificates are revoked on the
// upstream CA (this proxy picks up its CRL).
func (c *CA) Revoke(ctx context.Context, certname string) error {
	return c.upstreamOnly("revoke "+certname, "revoke", "puppetserver ca revoke --certname "+certname)
}

// List returns a farm.ErrInvalid error: certificates are listed on the
// upstream CA.
func (c *CA) List(ctx context.Context) ([]farm.CertStatus, error) {
	return nil, c.upstreamOnly("list certificates", "list certificates", "puppetserver ca list --all")
}

func (c *CA) upstreamOnly(what, verb, command string) error {
	return fmt.Errorf("%s: this front door proxies CA requests to %s; %s on the upstream CA (%s): %w",
		what, c.upstream, verb, command, farm.ErrInvalid)
}
