package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/ca"
)

// checkLoopback refuses any target that is not on this machine's loopback:
// 127.0.0.0/8, ::1, or localhost (which must resolve only to loopback).
func checkLoopback(what, hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port: %v", what, hostport, err)
	}
	if port == "" {
		return fmt.Errorf("%s %q: no port", what, hostport)
	}
	refuse := fmt.Errorf("%s %q is not a loopback address: loadgen only loads a broker on this machine (127.0.0.0/8, ::1 or localhost)", what, hostport)
	if strings.EqualFold(host, "localhost") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return fmt.Errorf("%s %q: cannot resolve localhost: %v", what, hostport, err)
		}
		for _, a := range addrs {
			if !a.Unmap().IsLoopback() {
				return refuse
			}
		}
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return refuse
	}
	return nil
}

// checkLoopbackURL applies checkLoopback to an http(s) URL's host.
func checkLoopbackURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want http://host:port/path", what, raw)
	}
	hp := u.Host
	if u.Port() == "" {
		hp = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	return checkLoopback(what, hp)
}

// node is one synthetic agent: its certname and TLS identity.
type node struct {
	name string
	cert tls.Certificate
	body *bodyTemplate
}

// farmTLS holds what every node shares: the CA and the server name.
type farmTLS struct {
	target string
	roots  *x509.CertPool
	caPEM  []byte
	// goGroups keeps Go's default key exchange groups (X25519MLKEM768
	// first) instead of the agent's.
	goGroups bool
}

// agentGroups are the key exchange groups Ruby 3.1 with OpenSSL 3.0 (puppet
// agent 7 on Debian 12) offers: no post-quantum hybrid, which Go's client
// would offer first and which costs the server more per handshake.
var agentGroups = []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521}

// tlsConfig is the agent's TLS: verify the farm with its CA, present the
// node's certificate, no session resumption (no ClientSessionCache: every
// new connection is a full handshake, as for agents, each a new process).
func (f *farmTLS) tlsConfig(n *node) *tls.Config {
	c := &tls.Config{
		Certificates:     []tls.Certificate{n.cert},
		RootCAs:          f.roots,
		ServerName:       "localhost",
		MinVersion:       tls.VersionTLS12,
		CurvePreferences: agentGroups,
	}
	if f.goGroups {
		c.CurvePreferences = nil
	}
	return c
}

// bootstrapClient is the agent's client before it has a certificate: it
// trusts the CA it is given on first use (as the agent does) and closes
// every connection (the front door closes after a CSR anyway).
func bootstrapClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}
}

func fetch(ctx context.Context, c *http.Client, method, u string, body []byte, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Puppet-Version", agentVersion)
	req.Header.Set("User-Agent", agentUA)
	if body != nil {
		req.Header.Set("Content-Type", "text/plain")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read: %w", method, u, err)
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s: %.200s", method, u, resp.Status, b)
	}
	return b, nil
}

// fetchCA gets the farm's CA certificate (trust on first use).
func fetchCA(ctx context.Context, target string) (*farmTLS, error) {
	b, err := fetch(ctx, bootstrapClient(), http.MethodGet, "https://"+target+"/puppet-ca/v1/certificate/ca", nil, http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("fetch the CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("the CA certificate from %s is not PEM", target)
	}
	return &farmTLS{target: target, roots: pool, caPEM: b}, nil
}

// enrol makes a key (keyType "ecdsa" or "rsa", as main checked) and CSR
// for name, submits it (the broker autosigns), and fetches the signed
// certificate, as a first agent run does.
func enrol(ctx context.Context, f *farmTLS, name, keyType string) (*node, error) {
	key, keyPEM, err := ca.NewServerKey(keyType, 2048) // RSA 2048 for "rsa", else ECDSA P-256
	if err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return nil, err
	}
	c := bootstrapClient()
	base := "https://" + f.target + "/puppet-ca/v1/"
	csrPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})
	if _, err := fetch(ctx, c, http.MethodPut, base+"certificate_request/"+name, csrPEM, http.StatusOK); err != nil {
		return nil, fmt.Errorf("submit CSR: %w", err)
	}
	// With autosign the certificate is there at once; poll briefly in case
	// signing is asynchronous, but never forever.
	var certPEM []byte
	for try := 0; ; try++ {
		certPEM, err = fetch(ctx, c, http.MethodGet, base+"certificate/"+name, nil, http.StatusOK)
		if err == nil {
			break
		}
		if try == 10 || ctx.Err() != nil {
			return nil, fmt.Errorf("fetch the signed certificate (is the broker started with --autosign?): %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	caPEM, err := fetch(ctx, c, http.MethodGet, base+"certificate/ca", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(caPEM, f.caPEM) {
		return nil, fmt.Errorf("the CA certificate changed during enrolment")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("signed certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: f.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("certificate for %s does not verify against the farm's CA: %w", name, err)
	}
	cert.Leaf = leaf
	return &node{name: name, cert: cert}, nil
}

// enrolAll enrols the K nodes, a few at a time.
func enrolAll(ctx context.Context, f *farmTLS, names []string, keyType string, parallel int) ([]*node, error) {
	nodes := make([]*node, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			nodes[i], errs[i] = enrol(ctx, f, name, keyType)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("enrol %s: %w", name, errs[i])
			}
		}()
	}
	wg.Wait()
	return nodes, errors.Join(errs...)
}
