package main

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/ca"
	"github.com/compilefarm/compilefarm/pkg/cadir"
)

// TestRun makes the CA and both certificates, then opens the CA directory
// as `broker dev` opens DATA/ca: the same CA, which signed PuppetDB's
// certificate (with its SANs, without the front door's pp_cli_auth) and
// the client's. A second run keeps them.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	caDir, ssldir := filepath.Join(dir, "ca"), filepath.Join(dir, "ssl")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	specs := []certSpec{{certname: "puppetdb.test", altNames: []string{"localhost", "127.0.0.1"}}, {certname: "puppetdb-client.test"}}
	if err := run(t.Context(), caDir, ssldir, "puppetdb-test", 2048, log, specs); err != nil {
		t.Fatal(err)
	}
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := map[string][]byte{}
	for _, s := range specs {
		first[s.certname] = read(filepath.Join(ssldir, "certs", s.certname+".pem"))
	}

	// A broker adopting a copy of the directory.
	adopted := filepath.Join(t.TempDir(), "data", "ca")
	if err := os.CopyFS(adopted, os.DirFS(caDir)); err != nil {
		t.Fatal(err)
	}
	broker, err := cadir.OpenCA(t.Context(), adopted, ca.Options{Name: "broker.test", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	if got := broker.CACert().Subject.CommonName; got != "Puppet CA: puppetdb-test" {
		t.Fatalf("the adopting broker's CA is %q; want the one mkca made", got)
	}
	hasCliAuth := func(c *x509.Certificate) bool {
		return slices.ContainsFunc(c.Extensions, func(e pkix.Extension) bool { return e.Id.String() == "1.3.6.1.4.1.34380.1.3.39" })
	}
	for _, s := range specs {
		block, _ := pem.Decode(first[s.certname])
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := broker.VerifyClient(cert, nil); err != nil {
			t.Errorf("%s does not verify against the adopted CA: %v", s.certname, err)
		}
		if hasCliAuth(cert) {
			t.Errorf("%s carries pp_cli_auth (a front door's privilege)", s.certname)
		}
		if s.certname == "puppetdb.test" {
			if !slices.Contains(cert.DNSNames, "localhost") || !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
				t.Errorf("PuppetDB's certificate names %v %v; want localhost and 127.0.0.1", cert.DNSNames, cert.IPAddresses)
			}
		}
	}
	// The broker's own certificate, which it presents to PuppetDB as a
	// client, comes from the CA PuppetDB trusts (ca_crt.pem).
	server, err := broker.IssueServerCert(t.Context(), "broker.test", []string{"localhost"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !hasCliAuth(server.Leaf) {
		t.Errorf("the broker's own certificate lacks pp_cli_auth: the check above proves nothing")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(read(filepath.Join(caDir, "ca_crt.pem")))
	if _, err := server.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the adopting broker's certificate does not verify as a client against ca_crt.pem: %v", err)
	}

	if err := run(t.Context(), caDir, ssldir, "puppetdb-test", 2048, log, specs); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if !bytes.Equal(read(filepath.Join(ssldir, "certs", s.certname+".pem")), first[s.certname]) {
			t.Errorf("a second run replaced %s's certificate", s.certname)
		}
	}
}
