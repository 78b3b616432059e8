package puppet

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// PuppetDB is the PuppetDB that compiles query: puppetdb_query() in
// manifests and, with Options.StoreConfigs StoreConfigsPuppetDB, exported
// collectors. Each worker is configured as Puppet Server configures
// puppet-terminus-puppetdb: puppetdb.conf in its confdir and Puppet's SSL
// settings naming the client certificate.
type PuppetDB struct {
	// URLs are PuppetDB's base URLs (puppetdb.conf's server_urls), tried in
	// order: https://host:port, or http://host:port for a PuppetDB on
	// loopback. No path. At least one.
	URLs []string
	// CACert holds the CA certificates (PEM) that PuppetDB's certificate
	// must chain to: the farm's CA, or PuppetDB's own when it has another.
	// Required with an https URL.
	CACert []byte
	// Cert is the client certificate presented to PuppetDB (PEM, the
	// certificate first, then any CA certificates it chains through) and
	// Key its private key (PEM). Required with an https URL; the
	// certificate must chain to CACert or to the CAs that follow it, and
	// its common name is the certname PuppetDB sees.
	Cert, Key []byte
	// Timeout bounds one request to one URL (server_url_timeout, in whole
	// seconds). Default 30 s, as puppetdb.conf's.
	Timeout time.Duration
}

// Storeconfigs backends (Options.StoreConfigs).
const (
	// StoreConfigsFarm: exported collectors collect from
	// compiler.Request.Exported, the farm's own record of exports.
	StoreConfigsFarm = "farm"
	// StoreConfigsPuppetDB: exported collectors read PuppetDB through
	// Puppet's resource/puppetdb terminus; their queries are recorded as
	// puppetdb_query's are, and the compile reports no Collects.
	StoreConfigsPuppetDB = "puppetdb"
)

// DefaultPuppetDBTimeout is PuppetDB.Timeout's default.
const DefaultPuppetDBTimeout = 30 * time.Second

// Where a worker's PuppetDB configuration lives, under its directory.
const (
	puppetdbConf   = "conf/puppetdb.conf" // conf is the worker's confdir
	puppetdbSSLDir = "puppetdb-ssl"       // ca.pem, cert.pem, key.pem
)

// puppetdbSetup is a checked PuppetDB configuration, ready to be written.
type puppetdbSetup struct {
	conf     []byte // puppetdb.conf
	certname string // "" without a client certificate
	ca       []byte // Puppet's localcacert: CACert and the client's CAs
	cert     []byte // the client certificate alone
	key      []byte
}

// checkPuppetDB validates p; nil means no PuppetDB.
func checkPuppetDB(p *PuppetDB) (*puppetdbSetup, error) {
	if p == nil {
		return nil, nil
	}
	if len(p.URLs) == 0 {
		return nil, errors.New("no PuppetDB URL")
	}
	tlsNeeded := false
	for _, u := range p.URLs {
		https, err := checkPuppetDBURL(u)
		if err != nil {
			return nil, err
		}
		tlsNeeded = tlsNeeded || https
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultPuppetDBTimeout
	}
	secs := max(1, int(math.Ceil(timeout.Seconds())))
	s := &puppetdbSetup{conf: fmt.Appendf(nil, "# Written by compilefarm's puppet engine for this worker.\n[main]\nserver_urls = %s\nserver_url_timeout = %d\nsoft_write_failure = false\n",
		strings.Join(p.URLs, ","), secs)}
	if len(p.Cert) == 0 && len(p.Key) == 0 && len(p.CACert) == 0 {
		if tlsNeeded {
			return nil, errors.New("an https PuppetDB URL needs the CA certificate, a client certificate and its key")
		}
		return s, nil
	}
	if err := s.checkTLS(p); err != nil {
		return nil, err
	}
	return s, nil
}

// checkPuppetDBURL checks one URL and says whether it is https.
func checkPuppetDBURL(raw string) (bool, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return false, fmt.Errorf("PuppetDB URL %q: %w", raw, err)
	}
	if u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(raw, ", \t") {
		return false, fmt.Errorf("PuppetDB URL %q must be scheme://host:port, nothing more", raw)
	}
	switch u.Scheme {
	case "https":
		return true, nil
	case "http":
		if !loopback(u.Hostname()) {
			return false, fmt.Errorf("PuppetDB URL %q: plain http is only for a PuppetDB on loopback; use https", raw)
		}
		return false, nil
	}
	return false, fmt.Errorf("PuppetDB URL %q must be https:// (or http:// on loopback)", raw)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkTLS checks the client certificate, its key and the CAs, and keeps
// what the worker's Puppet settings name.
func (s *puppetdbSetup) checkTLS(p *PuppetDB) error {
	if len(p.CACert) == 0 || len(p.Cert) == 0 || len(p.Key) == 0 {
		return errors.New("PuppetDB's TLS needs all three: the CA certificate, a client certificate and its key")
	}
	if _, err := tls.X509KeyPair(p.Cert, p.Key); err != nil {
		return fmt.Errorf("PuppetDB client certificate and key: %w", err)
	}
	certs, err := pemCerts(p.Cert)
	if err != nil {
		return fmt.Errorf("PuppetDB client certificate: %w", err)
	}
	cas, err := pemCerts(p.CACert)
	if err != nil {
		return fmt.Errorf("PuppetDB CA certificate: %w", err)
	}
	leaf := certs[0]
	roots := x509.NewCertPool()
	for _, c := range slices.Concat(cas, certs[1:]) {
		roots.AddCert(c)
	}
	// Puppet builds its SSL context from localcacert and refuses a client
	// certificate that does not chain to it.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("PuppetDB client certificate %q does not chain to the CA certificates given (add its CA after it): %w", leaf.Subject.CommonName, err)
	}
	if err := farm.ValidateCertname(leaf.Subject.CommonName); err != nil {
		return fmt.Errorf("PuppetDB client certificate's common name is Puppet's certname: %w", err)
	}
	s.certname = leaf.Subject.CommonName
	s.cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
	s.key = p.Key
	var ca bytes.Buffer
	for _, c := range slices.Concat(cas, certs[1:]) {
		_ = pem.Encode(&ca, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	s.ca = ca.Bytes()
	return nil
}

func pemCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// write puts the configuration in a worker's directory, or removes an
// earlier one when s is nil.
func (s *puppetdbSetup) write(dir string) error {
	conf := filepath.Join(dir, filepath.FromSlash(puppetdbConf))
	ssl := filepath.Join(dir, puppetdbSSLDir)
	if s == nil {
		return errors.Join(os.RemoveAll(conf), os.RemoveAll(ssl))
	}
	if err := os.MkdirAll(filepath.Dir(conf), 0o750); err != nil {
		return err
	}
	if err := atomicfile.Write(conf, s.conf, 0o640); err != nil {
		return err
	}
	if s.certname == "" {
		return os.RemoveAll(ssl)
	}
	if err := os.MkdirAll(ssl, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"ca.pem": s.ca, "cert.pem": s.cert, "key.pem": s.key} {
		if err := atomicfile.Write(filepath.Join(ssl, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// args are the worker's command-line flags for s and storeconfigs.
func (s *puppetdbSetup) args(storeconfigs string) []string {
	if s == nil {
		return nil
	}
	out := []string{"--puppetdb"}
	if s.certname != "" {
		out = append(out, "--puppetdb-certname="+s.certname)
	}
	if storeconfigs == StoreConfigsPuppetDB {
		out = append(out, "--storeconfigs=puppetdb")
	}
	return out
}

// queryAnswer is one PuppetDB query a compile made, as the worker reports
// it: the query and PuppetDB's answer, both JSON.
type queryAnswer struct {
	Query  json.RawMessage `json:"query"`
	Result json.RawMessage `json:"result"`
}

// queryReads turns the worker's answers into the records the farm keeps,
// one per distinct query (the first answer), in the order made.
func queryReads(answers []queryAnswer) []farm.QueryRead {
	if len(answers) == 0 {
		return nil
	}
	out := make([]farm.QueryRead, 0, len(answers))
	seen := map[farm.Digest]bool{}
	for _, a := range answers {
		q := farm.QueryReadOf(a.Query, a.Result)
		if seen[q.QueryDigest] {
			continue
		}
		seen[q.QueryDigest] = true
		out = append(out, q)
	}
	return out
}

// puppetdbURLs names p's URLs for logs ("" for none).
func puppetdbURLs(p *PuppetDB) string {
	if p == nil {
		return ""
	}
	return strings.Join(p.URLs, ",")
}
