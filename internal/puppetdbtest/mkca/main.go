// Command mkca makes the certificate authority and certificates of a test
// PuppetDB (scripts/puppetdb.sh start): it opens (creating on first use) a
// CA with the farm's own signer in -cadir (cadir.OpenCA), the layout
// `broker dev` keeps in DATA/ca, and has it sign a server certificate for PuppetDB and a client
// certificate for tests, keeping their keys in -ssldir (Puppet's ssldir
// layout: certs/<certname>.pem, private_keys/<certname>.pem).
//
// Both are ordinary signed certificates (signed/<certname>.pem in the CA),
// as `puppetserver ca generate` makes for a PuppetDB: neither carries the
// front door's pp_cli_auth, so a broker that adopts the CA grants them
// nothing. Running it again keeps the certificates it made.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

func main() {
	cadir := flag.String("cadir", "", "the CA directory (created with a new CA when it holds none)")
	ssldir := flag.String("ssldir", "", "where the certificates and keys go: certs/<certname>.pem, private_keys/<certname>.pem")
	name := flag.String("name", "puppetdb-test", `the CA's name when it is created: "Puppet CA: NAME"`)
	server := flag.String("server", "puppetdb.test", "PuppetDB's certname")
	serverAlt := flag.String("server-alt-names", "localhost,127.0.0.1", "PuppetDB's certificate's extra names (comma separated; IP addresses become IP SANs)")
	client := flag.String("client", "puppetdb-client.test", "the test client's certname")
	bits := flag.Int("key-bits", 2048, "RSA key size of the CA key (when created) and of the certificates' keys")
	flag.Parse()
	if *cadir == "" || *ssldir == "" {
		flag.Usage()
		fmt.Fprintln(os.Stderr, "mkca: -cadir and -ssldir are required")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(context.Background(), *cadir, *ssldir, *name, *bits, log, []certSpec{
		{certname: *server, altNames: splitList(*serverAlt)},
		{certname: *client},
	}); err != nil {
		fmt.Fprintln(os.Stderr, "mkca:", err)
		os.Exit(1)
	}
}

// certSpec is a certificate to have: its certname and extra SANs.
type certSpec struct {
	certname string
	altNames []string
}

func run(ctx context.Context, caDir, ssldir, name string, bits int, log *slog.Logger, certs []certSpec) error {
	authority, err := cadir.OpenCA(ctx, caDir, ca.Options{Name: name, KeyBits: bits, AllowSubjectAltNames: true, Logger: log})
	if err != nil {
		return err
	}
	defer authority.Close()
	for _, d := range []string{"certs", "private_keys"} {
		if err := os.MkdirAll(filepath.Join(ssldir, d), 0o755); err != nil {
			return err
		}
	}
	for _, c := range certs {
		if err := ensureCert(ctx, authority, ssldir, bits, c); err != nil {
			return fmt.Errorf("certificate %s: %w", c.certname, err)
		}
	}
	return nil
}

// ensureCert keeps the certificate and key in ssldir when they are a pair
// the CA signed; otherwise it makes a key, has the CA sign a request for it
// (revoking the certificate it held for the name, whose key is lost) and
// writes both.
func ensureCert(ctx context.Context, authority *ca.CA, ssldir string, bits int, c certSpec) error {
	certPath := filepath.Join(ssldir, "certs", c.certname+".pem")
	keyPath := filepath.Join(ssldir, "private_keys", c.certname+".pem")
	if cert, _, why := pki.LoadKeyPair(certPath, keyPath); why == "" {
		if authority.VerifyClient(cert, nil) == nil {
			return nil
		}
	}
	key, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		return err
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: c.certname}}
	for _, n := range c.altNames {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if len(c.altNames) > 0 {
		tmpl.DNSNames = append(tmpl.DNSNames, c.certname)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return fmt.Errorf("make request: %w", err)
	}
	csrPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	err = authority.SubmitCSR(ctx, c.certname, csrPEM)
	if errors.Is(err, farm.ErrConflict) {
		if err := authority.Revoke(ctx, c.certname); err != nil {
			return err
		}
		err = authority.SubmitCSR(ctx, c.certname, csrPEM)
	}
	if err != nil {
		return err
	}
	if err := authority.Sign(ctx, c.certname); err != nil {
		return err
	}
	certPEM, err := authority.Certificate(ctx, c.certname)
	if err != nil {
		return err
	}
	// PKCS#1, as Puppet writes RSA keys: what PuppetDB's Jetty reads.
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return atomicfile.Write(certPath, certPEM, 0o644)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
