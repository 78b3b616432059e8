// Package ca is compilefarm's built-in Puppet certificate authority: the CA
// that embedded mode (broker dev) runs in place of Puppet Server's.
//
// It issues what Puppet Server 7 issues: a self-signed RSA CA "Puppet CA:
// <name>", agent certificates with CN and SAN = certname, not-before
// backdated one day, five years of validity, basicConstraints CA:FALSE,
// digitalSignature+keyEncipherment, serverAuth+clientAuth, SKI, AKI, the
// "Puppet Server Internal Certificate" comment and the Puppet extensions the
// agent requested, and a v2 CRL re-signed on every revocation. It refuses the
// requests Puppet Server refuses, with Puppet's messages (see RequestError).
//
// Everything lives in one directory laid out like Puppet Server's cadir
// (ca_crt.pem, ca_key.pem, ca_crl.pem, serial, inventory.txt, requests/,
// signed/) plus server/ for the front door's own certificates. Every write is
// atomic (temp file, fsync, rename). A CA is safe for concurrent use, and
// several processes may open the same directory (the running broker and an
// operator's "broker ca sign"): changes are serialised with flock(2) on
// <dir>/.lock and each process picks up the others' revocations.
//
// Besides farm.CA the CA gives a TLS server what it needs: IssueServerCert
// for the front door's certificate, Pool and VerifyConnection (revocation
// check) for client certificates, and ServerTLSConfig tying them together.
package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

const (
	defaultName    = "compilefarm"
	defaultKeyBits = 4096
	// defaultValidity is Puppet's ca_ttl default, "5y" of 365-day years.
	defaultValidity = 5 * 365 * 24 * time.Hour
	// caValidity: the CA outlives the certificates it issues by a wide margin.
	caValidity  = 15 * 365 * 24 * time.Hour
	crlValidity = 5 * 365 * 24 * time.Hour
	// backdate: certificates start a day early so agents with slow clocks accept them.
	backdate = 24 * time.Hour
	// refreshEvery bounds how stale IsRevoked can be about revocations made by
	// another process sharing the directory.
	refreshEvery = time.Second
)

// Options configure a CA. The zero value is Puppet's defaults with autosign off.
type Options struct {
	// Name makes the CA's subject "Puppet CA: <Name>" when the CA is created
	// (default "compilefarm"); an existing CA keeps its name.
	Name string
	// KeyBits is the RSA key size of a new CA key and of RSA server keys
	// (default 4096, as Puppet; 2048 is the least accepted).
	KeyBits int
	// Autosign signs every valid request as it arrives.
	Autosign bool
	// AllowSubjectAltNames accepts agent requests carrying DNS or IP SANs
	// (besides the certname itself). Puppet's default, false, refuses them.
	AllowSubjectAltNames bool
	// AllowAuthorizationExtensions accepts agent requests carrying Puppet
	// authorization extensions (OIDs under 1.3.6.1.4.1.34380.1.3). Puppet's
	// default, false, refuses them; pp_cli_auth is refused always.
	AllowAuthorizationExtensions bool
	// Validity of issued certificates, counted from now (default five years);
	// not-before is one day earlier.
	Validity time.Duration
	// Now is the clock (default time.Now); tests set it.
	Now func() time.Time
	// Logger receives sign, revoke and submit events (default slog.Default()).
	Logger *slog.Logger
}

// CA is a Puppet certificate authority kept in a directory. It implements
// farm.CA; see the package documentation.
type CA struct {
	dir      string
	opts     Options
	log      *slog.Logger
	lockFile *os.File

	// Immutable after Open.
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	pool    *x509.CertPool

	// mu serialises operations that change the directory; the directory
	// lock (lockDir) serialises them with other processes.
	mu sync.Mutex

	// crl is the newest CRL seen; swapped whole, never modified.
	crl       atomic.Pointer[crlState]
	reloadMu  sync.Mutex   // one refresh from disk at a time
	lastCheck atomic.Int64 // unix nanos of the last look at the CRL file
}

var _ farm.CA = (*CA)(nil)

// crlState is one parsed, verified CRL.
type crlState struct {
	pem     []byte
	number  *big.Int
	entries []x509.RevocationListEntry
	revoked map[string]time.Time // serial (hex) → revocation time
}

func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		o.Name = defaultName
	}
	if o.KeyBits == 0 {
		o.KeyBits = defaultKeyBits
	}
	if o.KeyBits < 2048 {
		return o, fmt.Errorf("CA key size %d bits is too small (at least 2048): %w", o.KeyBits, farm.ErrInvalid)
	}
	if o.Validity == 0 {
		o.Validity = defaultValidity
	}
	if o.Validity < 0 {
		return o, fmt.Errorf("certificate validity %s is negative: %w", o.Validity, farm.ErrInvalid)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Open loads the CA kept in dir, creating the directory and a new CA (key,
// certificate, empty CRL, serial counter, inventory) on first use.
func Open(ctx context.Context, dir string, opts Options) (*CA, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open CA in %s: %w", dir, err)
	}
	if dir == "" {
		return nil, fmt.Errorf("open CA: no directory given: %w", farm.ErrInvalid)
	}
	for _, d := range []struct {
		path string
		perm fs.FileMode
	}{{dir, 0o750}, {dir + "/" + dirRequests, 0o755}, {dir + "/" + dirSigned, 0o755}, {dir + "/" + dirServer, 0o700}} {
		if err := os.MkdirAll(d.path, d.perm); err != nil {
			return nil, fmt.Errorf("open CA in %s: %w", dir, err)
		}
	}
	c := &CA{dir: dir, opts: opts, log: opts.Logger.With("component", "ca", "dir", dir)}
	c.lockFile, err = os.OpenFile(c.path(fileLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open CA in %s: %w", dir, err)
	}
	if err := c.init(ctx); err != nil {
		_ = c.lockFile.Close()
		return nil, fmt.Errorf("open CA in %s: %w", dir, err)
	}
	return c, nil
}

func (c *CA) init(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	unlock, err := c.lockDir(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	_, err = os.Stat(c.path(fileCACert))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No CA yet, or a creation cut short. But certificates without the
		// CA that signed them mean ca_crt.pem was lost: making a new CA
		// would silently cut off every agent.
		if signed, err := c.names(dirSigned); err != nil {
			return err
		} else if len(signed) > 0 {
			return fmt.Errorf("%s is missing but %s/ holds %d certificates: restore the CA certificate, or move the directory away to start a new CA",
				c.path(fileCACert), dirSigned, len(signed))
		}
		if err := c.create(); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	if err := c.load(); err != nil {
		return err
	}
	if _, err := c.refreshCRL(); err != nil {
		return err
	}
	return nil
}

// create makes a new CA. The certificate is written last: a directory
// without ca_crt.pem has no CA yet, whatever else a crash left behind.
func (c *CA) create() error {
	start := time.Now()
	key, err := rsa.GenerateKey(rand.Reader, c.opts.KeyBits)
	if err != nil {
		return fmt.Errorf("generate %d-bit CA key: %w", c.opts.KeyBits, err)
	}
	der, err := newCACert(c.opts.Name, key, c.now())
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("parse new CA certificate: %w", err)
	}
	c.cert, c.key = cert, key

	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := writeFileAtomic(c.path(fileCAKey), keyPEM, 0o600); err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encode CA public key: %w", err)
	}
	if err := writeFileAtomic(c.path(fileCAPub), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return err
	}
	if err := c.writeSerial(big.NewInt(2)); err != nil {
		return err
	}
	if err := removeFile(c.path(fileInventory)); err != nil {
		return err
	}
	if err := c.appendInventory("Puppet CA: "+c.opts.Name, cert.SerialNumber, cert.NotBefore, cert.NotAfter); err != nil {
		return err
	}
	crlPEM, err := c.newCRL(big.NewInt(0), nil)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(c.path(fileCRL), crlPEM, 0o644); err != nil {
		return err
	}
	if err := writeFileAtomic(c.path(fileCACert), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	c.log.Info("created CA", "subject", "Puppet CA: "+c.opts.Name, "key_bits", c.opts.KeyBits,
		"not_after", cert.NotAfter, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// load reads the CA certificate and key and checks they belong together.
func (c *CA) load() error {
	certPEM, err := os.ReadFile(c.path(fileCACert))
	if err != nil {
		return fmt.Errorf("read CA certificate: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("read CA certificate %s: no PEM certificate", c.path(fileCACert))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parse CA certificate %s: %w", c.path(fileCACert), err)
	}
	keyPEM, err := os.ReadFile(c.path(fileCAKey))
	if err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return fmt.Errorf("read CA key %s: %w", c.path(fileCAKey), err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return fmt.Errorf("CA key %s does not match CA certificate %s", c.path(fileCAKey), c.path(fileCACert))
	}
	if !cert.IsCA || len(cert.SubjectKeyId) == 0 {
		return fmt.Errorf("CA certificate %s is not a CA certificate with a key identifier", c.path(fileCACert))
	}
	if _, err := c.readSerial(); err != nil {
		return err
	}
	if want := "Puppet CA: " + c.opts.Name; c.opts.Name != defaultName && cert.Subject.CommonName != want {
		c.log.Warn("existing CA keeps its name", "subject", cert.Subject.CommonName, "requested", want)
	}
	c.cert, c.key = cert, key
	c.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	c.pool = x509.NewCertPool()
	c.pool.AddCert(cert)
	return nil
}

// Close releases the CA's hold on its directory. The CA must not be used
// afterwards.
func (c *CA) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.lockFile.Close(); err != nil {
		return fmt.Errorf("close CA in %s: %w", c.dir, err)
	}
	return nil
}

func (c *CA) now() time.Time { return c.opts.Now() }

// locked runs fn holding the in-process mutex and the directory lock, with
// the CRL brought up to date with the directory first.
func (c *CA) locked(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	unlock, err := c.lockDir(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := c.refreshCRL(); err != nil {
		return err
	}
	return fn()
}

// CACertificate returns the CA certificate (PEM).
func (c *CA) CACertificate(ctx context.Context) ([]byte, error) {
	return bytes.Clone(c.certPEM), nil
}

// CRL returns the current CRL (PEM), including revocations made by other
// processes sharing the directory.
func (c *CA) CRL(ctx context.Context) ([]byte, error) {
	st, err := c.refreshCRL()
	if err != nil {
		return nil, fmt.Errorf("read CRL: %w", err)
	}
	return bytes.Clone(st.pem), nil
}

// SubmitCSR validates a certificate request for certname and stores it,
// replacing a pending request for the same name, and signs it at once when
// Options.Autosign is set. It returns a RequestError wrapping farm.ErrInvalid
// for a request the CA refuses (not PEM, bad signature, CN not certname,
// weak key, SANs or extensions not allowed) and farm.ErrConflict when
// certname already has a signed, unrevoked certificate or is one of the
// front door's names. A request for a name whose certificate was revoked is
// accepted and retires the revoked certificate file (its serial stays on the
// CRL).
func (c *CA) SubmitCSR(ctx context.Context, certname string, csrPEM []byte) error {
	if err := checkCertname(certname); err != nil {
		return fmt.Errorf("submit certificate request for %q: %w", certname, err)
	}
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return fmt.Errorf("submit certificate request for %q: %w", certname, err)
	}
	v, err := c.vet(certname, csr)
	if err != nil {
		return fmt.Errorf("submit certificate request for %q: %w", certname, err)
	}
	err = c.locked(ctx, func() error {
		if err := c.checkFree(certname); err != nil {
			return err
		}
		if err := removeFile(c.signedPath(certname)); err != nil { // revoked, if any (checkFree)
			return err
		}
		if c.opts.Autosign {
			if err := c.signLocked(certname, v); err != nil {
				return err
			}
			// A pending request from before is answered by this certificate.
			return removeFile(c.requestPath(certname))
		}
		norm := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr.Raw})
		if err := writeFileAtomic(c.requestPath(certname), norm, 0o644); err != nil {
			return err
		}
		c.log.Info("certificate request stored", "certname", certname, "fingerprint", fingerprint(csr.Raw))
		return nil
	})
	if err != nil {
		return fmt.Errorf("submit certificate request for %q: %w", certname, err)
	}
	return nil
}

// checkFree returns ErrConflict when certname has a signed, unrevoked
// certificate or belongs to the front door. Caller holds the locks.
func (c *CA) checkFree(certname string) error {
	cert, err := c.readCert(certname)
	switch {
	case err == nil:
		if !c.isRevokedState(c.crl.Load(), cert.SerialNumber) {
			return conflictf("%s already has a signed certificate; ignoring certificate request", certname)
		}
	case !errors.Is(err, farm.ErrNotFound):
		return err
	}
	owner, err := c.serverNameOwner(certname)
	if err != nil {
		return err
	}
	if owner != "" {
		return conflictf("Certname %q is a name of the front door's certificate %q; an agent cannot take it", certname, owner)
	}
	return nil
}

// Sign signs the pending request of certname. It returns ErrNotFound when
// there is no request and ErrConflict when certname already has a signed,
// unrevoked certificate. The request is checked again against the CA's
// policy, which may have changed since it was submitted.
func (c *CA) Sign(ctx context.Context, certname string) error {
	if err := checkCertname(certname); err != nil {
		return fmt.Errorf("sign %q: %w", certname, err)
	}
	err := c.locked(ctx, func() error {
		data, err := os.ReadFile(c.requestPath(certname))
		if errors.Is(err, fs.ErrNotExist) {
			if held, cerr := c.readCert(certname); cerr == nil && !c.isRevokedState(c.crl.Load(), held.SerialNumber) {
				return conflictf("%s has no pending certificate request; it already has a signed certificate", certname)
			}
			return notFoundf("Could not find certificate_request %s", certname)
		}
		if err != nil {
			return fmt.Errorf("read certificate request: %w", err)
		}
		csr, err := parseCSR(data)
		if err != nil {
			return err
		}
		v, err := c.vet(certname, csr)
		if err != nil {
			return err
		}
		if err := c.checkFree(certname); err != nil {
			return err
		}
		if err := c.signLocked(certname, v); err != nil {
			return err
		}
		return removeFile(c.requestPath(certname))
	})
	if err != nil {
		return fmt.Errorf("sign %q: %w", certname, err)
	}
	return nil
}

// signLocked issues the agent certificate for a vetted request. Caller holds
// the locks.
func (c *CA) signLocked(certname string, v *vetted) error {
	serial, err := c.nextSerial()
	if err != nil {
		return err
	}
	now := c.now()
	cert, certPEM, err := c.issueLeaf(leafSpec{
		certname:  certname,
		pub:       v.csr.PublicKey,
		serial:    serial,
		dnsNames:  v.dnsNames,
		ips:       v.ips,
		keyUsage:  x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		extra:     v.extra,
		notBefore: now.Add(-backdate),
		notAfter:  now.Add(c.opts.Validity),
	})
	if err != nil {
		return err
	}
	if err := writeFileAtomic(c.signedPath(certname), certPEM, 0o644); err != nil {
		return err
	}
	if err := c.appendInventory(certname, cert.SerialNumber, cert.NotBefore, cert.NotAfter); err != nil {
		return err
	}
	c.log.Info("signed certificate", "certname", certname, "serial", formatSerial(serial),
		"not_after", cert.NotAfter, "fingerprint", fingerprint(cert.Raw))
	return nil
}

// Revoke puts the certificate of certname on the CRL and re-signs the CRL.
// Revoking a revoked certificate changes nothing. It returns ErrNotFound
// when certname has no certificate.
func (c *CA) Revoke(ctx context.Context, certname string) error {
	if err := checkCertname(certname); err != nil {
		return fmt.Errorf("revoke %q: %w", certname, err)
	}
	err := c.locked(ctx, func() error {
		cert, err := c.readCert(certname)
		if err != nil {
			return err
		}
		return c.revokeLocked(certname, cert.SerialNumber)
	})
	if err != nil {
		return fmt.Errorf("revoke %q: %w", certname, err)
	}
	return nil
}

// revokeLocked adds serial to the CRL. Caller holds the locks and has
// refreshed the CRL from disk.
func (c *CA) revokeLocked(certname string, serial *big.Int) error {
	cur := c.crl.Load()
	if _, ok := cur.revoked[serial.Text(16)]; ok {
		return nil
	}
	entries := append(append([]x509.RevocationListEntry(nil), cur.entries...),
		x509.RevocationListEntry{SerialNumber: serial, RevocationTime: c.now()})
	number := new(big.Int).Add(cur.number, big.NewInt(1))
	crlPEM, err := c.newCRL(number, entries)
	if err != nil {
		return err
	}
	st, err := c.parseCRL(crlPEM)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(c.path(fileCRL), crlPEM, 0o644); err != nil {
		return err
	}
	c.storeCRL(st)
	c.log.Info("revoked certificate", "certname", certname, "serial", formatSerial(serial), "crl_number", number)
	return nil
}

// Certificate returns the certificate of certname (PEM), revoked or not.
func (c *CA) Certificate(ctx context.Context, certname string) ([]byte, error) {
	return c.readPEM(certname, "certificate", "certificate", c.signedPath)
}

// CertificateRequest returns the pending request of certname (PEM).
func (c *CA) CertificateRequest(ctx context.Context, certname string) ([]byte, error) {
	return c.readPEM(certname, "certificate request", "certificate_request", c.requestPath)
}

// readPEM reads certname's stored file at path(certname); what names it in
// errors and puppetWhat in the not-found message agents see.
func (c *CA) readPEM(certname, what, puppetWhat string, path func(string) string) ([]byte, error) {
	if err := checkCertname(certname); err != nil {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, err)
	}
	b, err := os.ReadFile(path(certname))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, notFoundf("Could not find %s %s", puppetWhat, certname))
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, err)
	}
	return b, nil
}

// List describes every certname the CA knows, sorted by name: one entry per
// name, the pending request when there is one, else the certificate.
func (c *CA) List(ctx context.Context) ([]farm.CertStatus, error) {
	st, err := c.refreshCRL()
	if err != nil {
		return nil, fmt.Errorf("list certificates: %w", err)
	}
	byName := map[string]farm.CertStatus{}
	signed, err := c.names(dirSigned)
	if err != nil {
		return nil, fmt.Errorf("list certificates: %w", err)
	}
	for _, name := range signed {
		cert, err := c.readCert(name)
		if errors.Is(err, farm.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list certificates: %w", err)
		}
		state := farm.CertSigned
		if c.isRevokedState(st, cert.SerialNumber) {
			state = farm.CertRevoked
		}
		byName[name] = farm.CertStatus{
			Certname:    name,
			State:       state,
			Serial:      formatSerial(cert.SerialNumber),
			Fingerprint: fingerprint(cert.Raw),
			DNSAltNames: cert.DNSNames,
			NotAfter:    cert.NotAfter,
		}
	}
	requests, err := c.names(dirRequests)
	if err != nil {
		return nil, fmt.Errorf("list certificates: %w", err)
	}
	for _, name := range requests {
		data, err := os.ReadFile(c.requestPath(name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // signed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list certificates: %w", err)
		}
		csr, err := parseCSR(data)
		if err != nil {
			c.log.Warn("unreadable certificate request on disk", "certname", name, "err", err)
			continue
		}
		if prev, ok := byName[name]; ok && prev.State == farm.CertSigned {
			continue // a request left behind by a crash between signing and cleanup
		}
		byName[name] = farm.CertStatus{
			Certname:    name,
			State:       farm.CertRequested,
			Fingerprint: fingerprint(csr.Raw),
			DNSAltNames: csr.DNSNames,
		}
	}
	out := make([]farm.CertStatus, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Certname < out[j].Certname })
	return out, nil
}

// names lists the certnames with a .pem file in a subdirectory.
func (c *CA) names(sub string) ([]string, error) {
	entries, err := os.ReadDir(c.path(sub))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pem")
		if !ok || e.IsDir() || checkCertname(name) != nil {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

// readCert reads and parses signed/<certname>.pem; ErrNotFound when absent.
func (c *CA) readCert(certname string) (*x509.Certificate, error) {
	data, err := os.ReadFile(c.signedPath(certname))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFoundf("Could not find certificate %s", certname)
	}
	if err != nil {
		return nil, fmt.Errorf("read certificate of %q: %w", certname, err)
	}
	return parseCertPEM(data)
}

func parseCertPEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return cert, nil
}

// fingerprint is the SHA-256 of der as colon-separated upper-case hex, as
// Puppet prints fingerprints.
func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// refreshCRL brings the in-memory CRL up to date with ca_crl.pem and returns
// it. A CRL older (lower CRL number) than the one in memory never replaces it.
func (c *CA) refreshCRL() (*crlState, error) {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	return c.refreshCRLLocked()
}

// refreshCRLLocked is refreshCRL for a caller holding c.reloadMu.
func (c *CA) refreshCRLLocked() (*crlState, error) {
	c.lastCheck.Store(time.Now().UnixNano())
	data, err := os.ReadFile(c.path(fileCRL))
	if err != nil {
		return nil, fmt.Errorf("read CRL: %w", err)
	}
	if cur := c.crl.Load(); cur != nil && bytes.Equal(cur.pem, data) {
		return cur, nil
	}
	st, err := c.parseCRL(data)
	if err != nil {
		return nil, err
	}
	return c.storeCRL(st), nil
}

// storeCRL makes st current unless a newer CRL already is; it returns the
// current one.
func (c *CA) storeCRL(st *crlState) *crlState {
	for {
		cur := c.crl.Load()
		if cur != nil && cur.number.Cmp(st.number) > 0 {
			return cur
		}
		if c.crl.CompareAndSwap(cur, st) {
			return st
		}
	}
}

// parseCRL parses a CRL and checks the CA signed it.
func (c *CA) parseCRL(data []byte) (*crlState, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "X509 CRL" {
		return nil, fmt.Errorf("CRL %s is not a PEM X509 CRL", c.path(fileCRL))
	}
	rl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CRL %s: %w", c.path(fileCRL), err)
	}
	if err := rl.CheckSignatureFrom(c.cert); err != nil {
		return nil, fmt.Errorf("CRL %s is not signed by this CA: %w", c.path(fileCRL), err)
	}
	if rl.Number == nil {
		return nil, fmt.Errorf("CRL %s has no CRL number", c.path(fileCRL))
	}
	st := &crlState{pem: data, number: rl.Number, entries: rl.RevokedCertificateEntries, revoked: map[string]time.Time{}}
	for _, e := range rl.RevokedCertificateEntries {
		st.revoked[e.SerialNumber.Text(16)] = e.RevocationTime
	}
	return st, nil
}

func (c *CA) isRevokedState(st *crlState, serial *big.Int) bool {
	if st == nil || serial == nil {
		return false
	}
	_, ok := st.revoked[serial.Text(16)]
	return ok
}
