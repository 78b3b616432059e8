package puppetdbtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]string
		err      string
	}{
		{name: "lines", in: "A=1\nB=http://127.0.0.1:8080\n", want: map[string]string{"A": "1", "B": "http://127.0.0.1:8080"}},
		{name: "blank lines and comments", in: "\n# started by scripts/puppetdb.sh\nA=1\n\n", want: map[string]string{"A": "1"}},
		{name: "value with =", in: "A=x=y", want: map[string]string{"A": "x=y"}},
		{name: "empty value", in: "A=", want: map[string]string{"A": ""}},
		{name: "no =", in: "A=1\nnonsense\n", err: `line 2: "nonsense" is not KEY=value`},
		{name: "no key", in: "=1", err: `line 1: "=1" is not KEY=value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseEnv([]byte(tc.in))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("parseEnv = %v, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("parseEnv = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestFromEnvWantsEveryKey(t *testing.T) {
	_, err := fromEnv([]byte("COMPILEFARM_PUPPETDB_URL=http://127.0.0.1:1\n"))
	if err == nil || !strings.Contains(err.Error(), "COMPILEFARM_PUPPETDB_TLS_URL is missing") {
		t.Fatalf("fromEnv without the TLS URL = %v; want it named missing", err)
	}
}

func TestAwaitFailsAtOnceWhenStartFailed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "failed"), []byte("PuppetDB exited before it was running\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := await(t.Context(), dir)
	if err == nil || !strings.Contains(err.Error(), "PuppetDB exited before it was running") || time.Since(began) > 5*time.Second {
		t.Fatalf("await after a failed start = %v after %s; want start's message at once", err, time.Since(began))
	}
}

func TestCertname(t *testing.T) {
	a, b := Certname(t, "PDBEnv"), Certname(t, "PDBEnv")
	if !regexp.MustCompile(`^pdbenv-[0-9a-f]{10}\.test$`).MatchString(a) || a == b {
		t.Fatalf("Certname = %q, %q; want distinct pdbenv-<hex>.test", a, b)
	}
}

// TestShared submits facts to the shared PuppetDB over plain http and over
// https with the CA's client certificate, and sees them through both; the
// https port refuses clients without a certificate from the CA.
func TestShared(t *testing.T) {
	p := Shared(t)
	for _, ep := range []struct {
		name string
		e    endpoint
	}{{"http", p.plain()}, {"https", p.secure()}} {
		t.Run(ep.name, func(t *testing.T) {
			node := Certname(t, "pdbenv-"+ep.name)
			facts, err := json.Marshal(map[string]any{
				"certname": node, "environment": "production", "producer": "pdbenv.test",
				"producer_timestamp": time.Now().UTC().Format(time.RFC3339Nano),
				"values":             map[string]any{"puppetdbtest": ep.name, "os": map[string]any{"family": "Debian"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := ep.e.submit(t.Context(), "replace_facts", 5, node, facts); err != nil {
				t.Fatal(err)
			}
			q := fmt.Sprintf(`["and", ["=", "certname", %q], ["=", "name", "puppetdbtest"]]`, node)
			rows := ep.e.eventually(t, "facts", q, func(rows []map[string]any) bool { return len(rows) == 1 })
			if rows[0]["value"] != ep.name || rows[0]["environment"] != "production" {
				t.Fatalf("fact of %s = %v; want value %q in production", node, rows[0], ep.name)
			}
			// The other port sees it too; PQL through the root endpoint.
			other := p.plain()
			if ep.name == "http" {
				other = p.secure()
			}
			if rows, err := other.query(t.Context(), "", fmt.Sprintf(`facts[value] { certname = %q and name = "puppetdbtest" }`, node)); err != nil || len(rows) != 1 {
				t.Fatalf("PQL for %s's fact = %v, %v; want one row", node, rows, err)
			}
		})
	}

	t.Run("https refuses strangers", func(t *testing.T) {
		conf, err := p.clientTLS()
		if err != nil {
			t.Fatal(err)
		}
		noCert := conf.Clone()
		noCert.Certificates = nil
		foreign := conf.Clone()
		foreign.Certificates = []tls.Certificate{foreignCert(t)}
		for name, c := range map[string]*tls.Config{"the CA's client certificate": conf, "no client certificate": noCert, "another CA's certificate": foreign} {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
			_, err := endpoint{p.TLSURL, client}.query(t.Context(), "nodes", "")
			var transport *url.Error
			switch {
			case c == conf && err != nil:
				t.Errorf("%s: query over https: %v; want an answer", name, err)
			case c != conf && !errors.As(err, &transport):
				t.Errorf("%s: query over https: %v; want the connection refused", name, err)
			}
		}
	})
}

// TestAdoptedCA: a broker given a copy of the CA directory (as DATA/ca)
// presents its own server certificate as a client certificate, and
// PuppetDB's https port accepts it.
func TestAdoptedCA(t *testing.T) {
	p := Shared(t)
	data := t.TempDir()
	if err := os.CopyFS(filepath.Join(data, "ca"), os.DirFS(p.CADir)); err != nil {
		t.Fatal(err)
	}
	broker, err := cadir.OpenCA(t.Context(), filepath.Join(data, "ca"), ca.Options{Name: "pdbenv-broker.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	cert, err := broker.IssueServerCert(t.Context(), "pdbenv-broker.test", []string{"localhost", "127.0.0.1"}, pki.KeyECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := p.clientTLS()
	if err != nil {
		t.Fatal(err)
	}
	conf.Certificates = []tls.Certificate{cert}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
	if _, err := (endpoint{p.TLSURL, client}).query(t.Context(), "nodes", `["=", "certname", "pdbenv-none.test"]`); err != nil {
		t.Fatalf("PuppetDB refused the adopting broker's certificate: %v", err)
	}
}

// foreignCert is a client certificate from a CA PuppetDB does not know.
func foreignCert(t *testing.T) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Puppet CA: stranger"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "stranger.test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
