package puppetdb

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/internal/puppetdbtest"
)

// farmTLS is what a farm whose CA is the shared PuppetDB's presents: a
// certificate from that CA, PuppetDB's checked against it.
func farmTLS(t *testing.T, p *puppetdbtest.PuppetDB) *tls.Config {
	t.Helper()
	caPEM, err := os.ReadFile(p.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
}

func clientOf(t *testing.T, list string, conf *tls.Config) *Client {
	t.Helper()
	urls, err := ParseURLs(list)
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(urls, conf, "compilefarm.test")
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// selfSigned is a CA PuppetDB's certificate does not come from.
func selfSigned(t *testing.T) *tls.Config {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return &tls.Config{RootCAs: pool}
}

// TestClientAgainstPuppetDB: commands and queries against the real
// PuppetDB, over plain HTTP and mutual TLS; what it refuses is ErrRefused,
// what cannot reach it is not; the next URL is tried when one is down.
func TestClientAgainstPuppetDB(t *testing.T) {
	p := puppetdbtest.Shared(t)
	ctx := context.Background()
	name := puppetdbtest.Certname(t, "client")
	facts := func(v string) []byte {
		b, _ := json.Marshal(map[string]any{"certname": name, "environment": "production", "producer": "compilefarm.test",
			"producer_timestamp": time.Now().UTC().Format(time.RFC3339Nano), "values": map[string]any{"cf_probe": v}})
		return b
	}
	down := "http://" + closedPort(t)
	for _, tt := range []struct {
		name, urls string
		conf       *tls.Config
	}{
		{"plain", p.URL, nil},
		{"mutual TLS", p.TLSURL, farmTLS(t, p)},
		{"the first URL down", down + "," + p.URL, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := clientOf(t, tt.urls, tt.conf)
			if err := c.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			if err := c.Submit(ctx, "replace facts", 5, name, time.Now(), facts(tt.name)); err != nil {
				t.Fatalf("Submit: %v", err)
			}
			p.Eventually(t, "facts", `["and",["=","certname","`+name+`"],["=","name","cf_probe"],["=","value","`+tt.name+`"]]`,
				func(rows []map[string]any) bool { return len(rows) == 1 })
			out, err := c.Query(ctx, `facts[value] { certname = "`+name+`" and name = "cf_probe" }`)
			if err != nil || !strings.Contains(string(out), tt.name) {
				t.Errorf("Query: %s, %v", out, err)
			}
		})
	}

	c := clientOf(t, p.URL, nil)
	// (A command whose payload PuppetDB cannot process is accepted, 200,
	// and set aside in PuppetDB's own dead-letter office: it processes
	// commands after answering. What it refuses at once is a command it
	// does not know, or one too large.)
	if err := c.Submit(ctx, "no such command", 1, name, time.Now(), facts("x")); !errors.Is(err, ErrRefused) {
		t.Errorf("unknown command: %v, want ErrRefused", err)
	}
	if _, err := c.Query(ctx, `facts[value] { certname = `); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "HTTP 400") {
		t.Errorf("bad PQL: %v, want ErrRefused with PuppetDB's 400", err)
	}
	if err := clientOf(t, down, nil).Submit(ctx, "replace facts", 5, name, time.Now(), facts("x")); err == nil || errors.Is(err, ErrRefused) {
		t.Errorf("PuppetDB unreachable: %v, want an error worth retrying", err)
	}
	// A PuppetDB whose certificate the farm cannot check, or that does
	// not take the farm's: not delivered, and not refused either (fix the
	// configuration and the commands go through).
	for what, conf := range map[string]*tls.Config{"an unknown CA": selfSigned(t), "no client certificate": {RootCAs: farmTLS(t, p).RootCAs}} {
		err := clientOf(t, p.TLSURL, conf).Submit(ctx, "replace facts", 5, name, time.Now(), facts("x"))
		if err == nil || errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want an error worth retrying", what, err)
		}
	}
}
