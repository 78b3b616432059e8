// Package agentcert gives synthetic Puppet agents their TLS identities the
// way a real agent gets one from a compilefarm front door: trust the CA on
// first use, submit a CSR (the broker autosigns), fetch the certificate;
// and the agent's TLS client configuration. A Store keeps identities on
// disk so that later runs against the same CA reuse them instead of
// enrolling again.
package agentcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/compilefarm/compilefarm/bench/internal/agentwire"
)

// Farm is what every agent of one front door shares: its address and the
// CA it trusts.
type Farm struct {
	Target string // host:port of the front door
	Roots  *x509.CertPool
	CAPEM  []byte
	// GoGroups keeps Go's default key exchange groups (X25519MLKEM768
	// first) instead of the agent's.
	GoGroups bool
}

// agentGroups are the key exchange groups Ruby 3.1 with OpenSSL 3.0 (puppet
// agent 7 on Debian 12) offers: no post-quantum hybrid, which Go's client
// would offer first and which costs the server more per handshake.
var agentGroups = []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521}

// TLSConfig is the agent's TLS: verify the farm with its CA, present cert,
// no session resumption (no ClientSessionCache: every new connection is a
// full handshake, as for an agent's every run).
func (f *Farm) TLSConfig(cert tls.Certificate) *tls.Config {
	c := &tls.Config{
		Certificates:     []tls.Certificate{cert},
		RootCAs:          f.Roots,
		ServerName:       "localhost",
		MinVersion:       tls.VersionTLS12,
		CurvePreferences: agentGroups,
	}
	if f.GoGroups {
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

// fetch sends one CA request with the agent's headers and wants status want.
func fetch(ctx context.Context, c *http.Client, method, u string, body []byte, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Puppet-Version", agentwire.Version)
	req.Header.Set("User-Agent", agentwire.UserAgent)
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

// FetchCA gets the farm's CA certificate (trust on first use).
func FetchCA(ctx context.Context, target string) (*Farm, error) {
	b, err := fetch(ctx, bootstrapClient(), http.MethodGet, "https://"+target+"/puppet-ca/v1/certificate/ca", nil, http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("fetch the CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("the CA certificate from %s is not PEM", target)
	}
	return &Farm{Target: target, Roots: pool, CAPEM: b}, nil
}
