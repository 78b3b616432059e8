package ca

import (
	"crypto/elliptic"
	"crypto/tls"
	"testing"
	"time"
)

// TestServerTLSConfigRemembersVerified drives real handshakes through
// ServerTLSConfig, which leaves the chain to VerifyConnection and its
// cache: an agent's certificate is verified once and remembered; a
// remembered certificate is still refused once revoked or expired, and
// still needs its private key; one of another CA is never remembered.
func TestServerTLSConfigRemembersVerified(t *testing.T) {
	clk := &clock{t: time.Now()}
	c := openCA(t, Options{Now: clk.Now})
	server, err := c.IssueServerCert(t.Context(), "puppet.test", []string{"puppet"}, "")
	if err != nil {
		t.Fatalf("IssueServerCert: %v", err)
	}
	cfg := c.ServerTLSConfig(server)
	if cfg.ClientAuth != tls.RequestClientCert || !cfg.SessionTicketsDisabled {
		t.Fatalf("ServerTLSConfig: ClientAuth %v, SessionTicketsDisabled %v; want RequestClientCert (the cache verifies) and no tickets", cfg.ClientAuth, cfg.SessionTicketsDisabled)
	}
	addr := serveTLS(t, cfg)
	good := signAgent(t, c, "good.example.test")
	later := signAgent(t, c, "revoked-later.example.test")
	expiring := signAgent(t, c, "expiring.example.test")
	other := freshCA(t, Options{Name: "stranger"})
	stranger := signAgent(t, other, "good.example.test")
	impostor := &tls.Certificate{Certificate: [][]byte{good.cert.Raw}, PrivateKey: ecKey(t, elliptic.P256()), Leaf: good.cert}

	steps := []struct {
		name   string
		before func()
		client *tls.Certificate
		want   string // body, or "" for a refused handshake
		cached int    // certificates remembered after the step
	}{
		{"no client certificate", nil, nil, "anonymous", 0},
		{"first connection of an agent", nil, good.tls(), "good.example.test", 1},
		{"its next connection", nil, good.tls(), "good.example.test", 1},
		{"its certificate with another key", nil, impostor, "", 1},
		{"an agent of another CA, same name", nil, stranger.tls(), "", 1},
		{"a second agent", nil, later.tls(), "revoked-later.example.test", 2},
		{"the second agent once revoked", func() {
			if err := c.Revoke(t.Context(), later.name); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
		}, later.tls(), "", 2},
		{"a third agent", nil, expiring.tls(), "expiring.example.test", 3},
		{"the third agent after its certificate expired", func() { clk.Add(expiring.cert.NotAfter.Sub(clk.Now()) + time.Second) }, expiring.tls(), "", 3},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		body, err := getAs(c.Pool(), addr, st.client)
		switch {
		case st.want == "" && err == nil:
			t.Errorf("%s: connected (server saw %q), want a refused handshake", st.name, body)
		case st.want != "" && (err != nil || body != st.want):
			t.Errorf("%s: server saw %q (%v), want %q", st.name, body, err, st.want)
		}
		if n := c.verified.Len(); n != st.cached {
			t.Errorf("%s: %d certificates remembered, want %d", st.name, n, st.cached)
		}
	}
}
