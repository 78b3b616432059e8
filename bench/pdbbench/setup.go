package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/compilefarm/compilefarm/bench/internal/loopback"
)

// sitePP is the site manifest of the environment pdbbench compiles (see
// the file): the benchmark profile, and PuppetDB queries for the nodes
// pdbbench makes.
//
//go:embed site.pp
var sitePP []byte

// groupQuery is the query site.pp makes for a node of group: its text as
// the compile records it and the refresher runs it.
func groupQuery(group string) string {
	return fmt.Sprintf("inventory[certname] { facts.pdbbench_group = '%s' }", group)
}

// puppetDB is the PuppetDB pdbbench feeds: what scripts/puppetdb.sh start
// DIR writes in DIR/env.
type puppetDB struct {
	Dir    string // the directory scripts/puppetdb.sh start made
	URL    string // http://127.0.0.1:PORT: pdbbench's queries, and the gate's target
	TLSURL string // https://127.0.0.1:PORT
	CADir  string // its CA, in broker dev's DATA/ca layout
}

// readPuppetDBEnv reads DIR/env (KEY=value lines) and checks that
// PuppetDB is on loopback.
func readPuppetDBEnv(dir string) (puppetDB, error) {
	path := filepath.Join(dir, "env")
	f, err := os.Open(path)
	if err != nil {
		return puppetDB{}, fmt.Errorf("PuppetDB settings (start one with scripts/puppetdb.sh start DIR): %w", err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			kv[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return puppetDB{}, fmt.Errorf("read %s: %w", path, err)
	}
	p := puppetDB{Dir: dir, URL: kv["COMPILEFARM_PUPPETDB_URL"], TLSURL: kv["COMPILEFARM_PUPPETDB_TLS_URL"], CADir: kv["COMPILEFARM_PUPPETDB_CADIR"]}
	if p.URL == "" || p.TLSURL == "" || p.CADir == "" {
		return puppetDB{}, fmt.Errorf("%s lacks COMPILEFARM_PUPPETDB_URL, _TLS_URL or _CADIR", path)
	}
	for what, u := range map[string]string{"COMPILEFARM_PUPPETDB_URL": p.URL, "COMPILEFARM_PUPPETDB_TLS_URL": p.TLSURL} {
		if err := loopback.CheckURL(what, u); err != nil {
			return puppetDB{}, err
		}
	}
	return p, nil
}

// httpHostPort is host:port of PuppetDB's plain-http URL (the gate's
// target).
func (p puppetDB) httpHostPort() string {
	return strings.TrimSuffix(strings.TrimPrefix(p.URL, "http://"), "/")
}

// serverCertName is the certname of PuppetDB's own certificate in a
// scripts/puppetdb.sh directory (DIR/ssl/certs/NAME.pem, its key in
// DIR/ssl/private_keys/NAME.pem).
const serverCertName = "puppetdb.test"

// gateTLS is PuppetDB's https port as scripts/puppetdb.sh configures it:
// its own certificate and key, client certificates required and checked
// against its CA.
func (p puppetDB) gateTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(p.Dir, "ssl", "certs", serverCertName+".pem"),
		filepath.Join(p.Dir, "ssl", "private_keys", serverCertName+".pem"))
	if err != nil {
		return nil, fmt.Errorf("PuppetDB's certificate: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(p.CADir, "ca_crt.pem"))
	if err != nil {
		return nil, fmt.Errorf("PuppetDB's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("PuppetDB's CA %s holds no certificate", filepath.Join(p.CADir, "ca_crt.pem"))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12}, nil
}

// assembleEnvironments makes dir/production: the benchmark environment
// (benchDir/environments/production) with the herd's counts
// (benchDir/herd/common.yaml) and pdbbench's site.pp, and returns dir.
func assembleEnvironments(benchDir, dir string) (string, error) {
	prod := filepath.Join(dir, "production")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.CopyFS(prod, os.DirFS(filepath.Join(benchDir, "environments", "production"))); err != nil {
		return "", fmt.Errorf("copy the benchmark environment: %w", err)
	}
	herd, err := os.ReadFile(filepath.Join(benchDir, "herd", "common.yaml"))
	if err != nil {
		return "", fmt.Errorf("the herd's counts: %w", err)
	}
	if err := os.WriteFile(filepath.Join(prod, "data", "common.yaml"), herd, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(prod, "manifests", "site.pp"), sitePP, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// copyCA makes PuppetDB's CA the CA of a broker whose data directory is
// data, keys and modes as they are (cp -a), so that each trusts the
// other's certificate.
func copyCA(p puppetDB, data string) error {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", p.CADir, filepath.Join(data, "ca")).CombinedOutput(); err != nil {
		return fmt.Errorf("copy PuppetDB's CA into the broker's data: %v: %s", err, out)
	}
	return nil
}
