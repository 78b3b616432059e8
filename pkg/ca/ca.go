// Package ca is compilefarm's Puppet certificate authority, the signer that
// front doors run in place of Puppet Server's CA.
//
// It issues what Puppet Server 7 issues: a self-signed RSA CA "Puppet CA:
// <name>", agent certificates with CN and SAN = certname, not-before
// backdated one day, five years of validity, basicConstraints CA:FALSE,
// digitalSignature+keyEncipherment, serverAuth+clientAuth, SKI, AKI, the
// "Puppet Server Internal Certificate" comment and the Puppet extensions the
// agent requested, and a v2 CRL re-signed on every revocation. It refuses the
// requests Puppet Server refuses, with Puppet's messages (see RequestError).
//
// The CA signs: its records live in a farm.CAStore and its key in a
// farm.CAKeySource, both given to New and Init: Puppet Server's cadir
// layout (package cadir, whose OpenCA opens a CA kept in a directory),
// the DynamoDB store a fleet of front doors shares (dynamostate), a key in
// a file, Secrets Manager or KMS. The key signs where it lives, through
// its crypto.Signer. A CA is safe for concurrent use, also by several
// processes sharing a store, and picks up revocations other processes
// made.
//
// Besides farm.CA the CA gives a TLS server what it needs: IssueServerCert
// for the front door's certificate, Pool and VerifyConnection (revocation
// check) for client certificates, and ServerTLSConfig tying them together.
package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compilefarm/compilefarm/pkg/clientcert"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

const (
	defaultName    = "compilefarm"
	defaultKeyBits = 4096
	// defaultValidity is Puppet's ca_ttl default, "5y" of 365-day years.
	defaultValidity = 5 * 365 * 24 * time.Hour
	// caValidity: the CA outlives the certificates it issues by a wide margin.
	caValidity  = 15 * 365 * 24 * time.Hour
	crlValidity = 5 * 365 * 24 * time.Hour
	// backdate: certificates and CRLs start a day early so agents with slow
	// clocks accept them.
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
	// AllowAuthorizationExtensions signs agent requests carrying Puppet
	// authorization extensions (OIDs under 1.3.6.1.4.1.34380.1.3), on
	// autosign too. Puppet's default, false, leaves them to an operator's
	// SignWith(AllowAuthorizationExtensions); pp_cli_auth is never signed
	// without it.
	AllowAuthorizationExtensions bool
	// Validity of issued certificates, counted from now (default five years);
	// not-before is one day earlier.
	Validity time.Duration
	// ServerDir is where IssueServerCert keeps the front door's certificates
	// and keys: local to the process, never in the store (cadir.OpenCA: <dir>/server).
	ServerDir string
	// Now is the clock (default time.Now); tests set it.
	Now func() time.Time
	// Logger receives sign, revoke and submit events (default slog.Default()).
	Logger *slog.Logger
	// OnClose, when set, is called once by Close: the opener's hold on
	// the store (cadir.OpenCA: the directory's lock file).
	OnClose func() error
}

// CA is a Puppet certificate authority whose records live in a
// farm.CAStore and whose key comes from a farm.CAKeySource. It implements farm.CA; see the package
// documentation.
type CA struct {
	store farm.CAStore
	keys  farm.CAKeySource
	opts  Options
	log   *slog.Logger

	// Immutable after New or Init.
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	pool    *x509.CertPool
	// verified remembers the client certificates that verified against pool.
	verified *clientcert.VerifiedCache

	// mu serialises this process's changes; the store's Lock (or its
	// conditional writes) serialises them with other processes.
	mu sync.Mutex

	// crl is the newest CRL seen; swapped whole, never modified.
	crl       atomic.Pointer[crlState]
	reloadMu  sync.Mutex   // one refresh from the store at a time
	lastCheck atomic.Int64 // unix nanos of the last look at the store's CRL
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

// New opens the CA kept in store, signing with the key from keys. It
// returns an error wrapping farm.ErrNotFound when the store has no CA yet:
// Init makes one.
func New(ctx context.Context, store farm.CAStore, keys farm.CAKeySource, opts Options) (*CA, error) {
	return start(ctx, store, keys, opts, false)
}

// Init is New, creating the CA first when the store has none: with the key
// keys holds, or a new key stored in keys. Several processes may Init one
// store at once; one CA results.
func Init(ctx context.Context, store farm.CAStore, keys farm.CAKeySource, opts Options) (*CA, error) {
	return start(ctx, store, keys, opts, true)
}

func start(ctx context.Context, store farm.CAStore, keys farm.CAKeySource, opts Options, create bool) (*CA, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.ServerDir == "" {
		return nil, fmt.Errorf("open CA: no directory for the front door's certificates (Options.ServerDir): %w", farm.ErrInvalid)
	}
	if err := os.MkdirAll(opts.ServerDir, 0o700); err != nil {
		return nil, fmt.Errorf("open CA: %w", err)
	}
	c := &CA{store: store, keys: keys, opts: opts, log: opts.Logger.With("component", "ca"), verified: clientcert.NewVerifiedCache(0)}
	if err := c.init(ctx, create); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *CA) init(ctx context.Context, create bool) error {
	unlock, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	certPEM, err := c.store.CACert(ctx)
	switch {
	case errors.Is(err, farm.ErrNotFound) && create:
		if certPEM, err = c.create(ctx); err != nil {
			return err
		}
	case errors.Is(err, farm.ErrNotFound):
		return fmt.Errorf("no CA here yet (create one with `broker ca init`): %w", err)
	case err != nil:
		return err
	}
	if err := c.load(ctx, certPEM); err != nil {
		return err
	}
	if err := c.store.Check(ctx); err != nil {
		return err
	}
	if _, err := c.refreshCRL(ctx); err != nil {
		return err
	}
	return nil
}

// create makes a new CA and returns its certificate, or the certificate of
// the CA another process made meanwhile. It signs with the key the key
// source holds, making one when it holds none.
func (c *CA) create(ctx context.Context) ([]byte, error) {
	start := time.Now()
	key, err := c.signer(ctx)
	if errors.Is(err, farm.ErrNotFound) {
		// GenerateKey's ErrConflict: another process made one first.
		if err := c.keys.GenerateKey(ctx, c.opts.KeyBits); err != nil && !errors.Is(err, farm.ErrConflict) {
			return nil, err
		}
		key, err = c.signer(ctx)
	} else if err == nil {
		c.log.Info("creating the CA with the key already in place", "key", c.keys.String())
	}
	if err != nil {
		return nil, err
	}
	der, err := newCACert(c.opts.Name, key, c.now())
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse new CA certificate: %w", err)
	}
	c.cert, c.key = cert, key
	crlPEM, err := c.newCRL(big.NewInt(0), nil, c.now())
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	err = c.store.Create(ctx, farm.CAGenesis{
		CertPEM: certPEM, CRLPEM: crlPEM, NextSerial: big.NewInt(2),
		Issued: farm.CertIssued{Certname: "Puppet CA: " + c.opts.Name, Serial: cert.SerialNumber, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter},
	})
	if errors.Is(err, farm.ErrConflict) {
		return c.store.CACert(ctx) // another process made the CA first
	}
	if err != nil {
		return nil, err
	}
	c.log.Info("created CA", "subject", "Puppet CA: "+c.opts.Name, "key", c.keys.String(),
		"not_after", cert.NotAfter, "took", time.Since(start).Round(time.Millisecond))
	return certPEM, nil
}

// load reads the CA certificate and key and checks they belong together.
func (c *CA) load(ctx context.Context, certPEM []byte) error {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("read CA certificate: no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := c.signer(ctx)
	if err != nil {
		return err
	}
	if !pki.PublicKeysEqual(key.Public(), cert.PublicKey) {
		return fmt.Errorf("CA key (%s) does not match CA certificate %q", c.keys, cert.Subject.CommonName)
	}
	if !cert.IsCA || len(cert.SubjectKeyId) == 0 {
		return fmt.Errorf("CA certificate %q is not a CA certificate with a key identifier", cert.Subject.CommonName)
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

// signer returns the key source's key: ErrNotFound when it holds none.
func (c *CA) signer(ctx context.Context) (crypto.Signer, error) {
	key, err := c.keys.Signer(ctx)
	if err != nil {
		return nil, fmt.Errorf("CA key in %s: %w", c.keys, err)
	}
	return key, nil
}

// Close calls Options.OnClose, once. The CA must not be used afterwards.
func (c *CA) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.OnClose == nil {
		return nil
	}
	err := c.opts.OnClose()
	c.opts.OnClose = nil
	if err != nil {
		return fmt.Errorf("close CA: %w", err)
	}
	return nil
}

func (c *CA) now() time.Time { return c.opts.Now() }

// locked runs fn holding the in-process mutex and the store's lock, with
// the CRL brought up to date with the store first.
func (c *CA) locked(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := c.refreshCRL(ctx); err != nil {
		return err
	}
	return fn()
}

// lock takes the in-process mutex, then the store's lock; the func it
// returns releases both.
func (c *CA) lock(ctx context.Context) (func(), error) {
	c.mu.Lock()
	unlock, err := c.store.Lock(ctx)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	return func() {
		unlock()
		c.mu.Unlock()
	}, nil
}

// CACertificate returns the CA certificate (PEM).
func (c *CA) CACertificate(ctx context.Context) ([]byte, error) {
	return bytes.Clone(c.certPEM), nil
}

// CRL returns the current CRL (PEM), including revocations made by other
// processes sharing the store.
func (c *CA) CRL(ctx context.Context) ([]byte, error) {
	st, err := c.refreshCRL(ctx)
	if err != nil {
		return nil, fmt.Errorf("read CRL: %w", err)
	}
	return bytes.Clone(st.pem), nil
}

// SubmitCSR validates a certificate request for certname and stores it,
// replacing a pending request for the same name, and signs it at once when
// Options.Autosign is set, unless it requests authorization extensions the
// CA does not sign on its own (pp_cli_auth, always): those wait for an
// operator (SignWith). It returns a RequestError wrapping farm.ErrInvalid
// for a request the CA refuses (not PEM, bad signature, CN not certname,
// weak key, SANs or extensions not allowed) and farm.ErrConflict when
// certname already has a signed, unrevoked certificate or is one of the
// front door's names. A request for a name whose certificate was revoked is
// accepted and retires the revoked certificate (its serial stays on the
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
		revoked, err := c.checkFree(ctx, certname)
		if err != nil {
			return err
		}
		held := c.authRefusal(certname, v, farm.SignOptions{})
		if c.opts.Autosign && held != nil {
			c.log.Warn("certificate request not autosigned: it requests authorization extensions", "certname", certname, "why", held.Error())
		}
		if c.opts.Autosign && held == nil {
			if err := c.signLocked(ctx, certname, v, revoked); err != nil {
				return err
			}
			// A pending request from before is answered by this certificate.
			return c.store.DeleteRequest(ctx, certname)
		}
		if revoked != nil {
			if err := c.store.DeleteSigned(ctx, certname, revoked); err != nil {
				return err
			}
		}
		norm := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr.Raw})
		if err := c.store.PutRequest(ctx, certname, norm); err != nil {
			return err
		}
		c.log.Info("certificate request stored", "certname", certname, "fingerprint", pki.Fingerprint(csr.Raw))
		return nil
	})
	if err != nil {
		return fmt.Errorf("submit certificate request for %q: %w", certname, err)
	}
	return nil
}

// checkFree returns ErrConflict when certname has a signed, unrevoked
// certificate or belongs to the front door. When certname holds a revoked
// certificate it returns its serial: a new certificate replaces it. Caller
// holds the locks.
func (c *CA) checkFree(ctx context.Context, certname string) (revoked *big.Int, err error) {
	cert, err := c.readCert(ctx, certname)
	switch {
	case err == nil:
		if !c.crl.Load().revokes(cert.SerialNumber) {
			return nil, conflictf("%s already has a signed certificate; ignoring certificate request", certname)
		}
		revoked = cert.SerialNumber
	case !errors.Is(err, farm.ErrNotFound):
		return nil, err
	}
	owner, err := c.serverNameOwner(ctx, certname)
	if err != nil {
		return nil, err
	}
	if owner != "" {
		return nil, conflictf("Certname %q is a name of the front door's certificate %q; an agent cannot take it", certname, owner)
	}
	return revoked, nil
}

// Sign signs the pending request of certname: SignWith with no options.
func (c *CA) Sign(ctx context.Context, certname string) error {
	return c.SignWith(ctx, certname, farm.SignOptions{})
}

// SignWith signs the pending request of certname. It returns ErrNotFound
// when there is no request, ErrConflict when certname already has a
// signed, unrevoked certificate, and ErrInvalid when the request asks for
// authorization extensions that neither the CA's options nor opts allow.
// The request is checked again against the CA's policy, which may have
// changed since it was submitted.
func (c *CA) SignWith(ctx context.Context, certname string, opts farm.SignOptions) error {
	if err := checkCertname(certname); err != nil {
		return fmt.Errorf("sign %q: %w", certname, err)
	}
	err := c.locked(ctx, func() error {
		data, err := c.store.Request(ctx, certname)
		if errors.Is(err, farm.ErrNotFound) {
			if held, cerr := c.readCert(ctx, certname); cerr == nil && !c.crl.Load().revokes(held.SerialNumber) {
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
		if err := c.authRefusal(certname, v, opts); err != nil {
			return err
		}
		revoked, err := c.checkFree(ctx, certname)
		if err != nil {
			return err
		}
		if err := c.signLocked(ctx, certname, v, revoked); err != nil {
			return err
		}
		return c.store.DeleteRequest(ctx, certname)
	})
	if err != nil {
		return fmt.Errorf("sign %q: %w", certname, err)
	}
	return nil
}

// signLocked issues the agent certificate for a vetted request, replacing
// the revoked certificate with serial replace (nil: none). Caller holds the
// locks. Another process signing for certname at the same moment makes the
// conditional store write fail: the certificate made here is not stored and
// the caller sees ErrConflict.
func (c *CA) signLocked(ctx context.Context, certname string, v *vetted, replace *big.Int) error {
	serial, err := c.store.NextSerial(ctx)
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
	if err := c.store.PutSigned(ctx, certname, certPEM, replace); errors.Is(err, farm.ErrConflict) {
		return conflictf("%s already has a signed certificate; ignoring certificate request", certname)
	} else if err != nil {
		return err
	}
	if err := c.store.RecordIssued(ctx, farm.CertIssued{Certname: certname, Serial: cert.SerialNumber, NotBefore: cert.NotBefore, NotAfter: cert.NotAfter}); err != nil {
		return err
	}
	c.log.Info("signed certificate", "certname", certname, "serial", pki.FormatSerial(serial),
		"not_after", cert.NotAfter, "fingerprint", pki.Fingerprint(cert.Raw))
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
		cert, err := c.readCert(ctx, certname)
		if err != nil {
			return err
		}
		// Another process may re-sign the CRL between our read and write:
		// read it again and retry.
		for attempt := 1; ; attempt++ {
			err := c.revokeLocked(ctx, certname, cert.SerialNumber)
			if !errors.Is(err, farm.ErrConflict) || attempt == 20 {
				return err
			}
			if _, err := c.refreshCRL(ctx); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return fmt.Errorf("revoke %q: %w", certname, err)
	}
	return nil
}

// revokeLocked adds serial to the CRL. Caller holds the locks and has
// refreshed the CRL from the store. The new entry is dated when the CRL is
// signed: the newest date in a CRL tells when it was made (see crlDates).
func (c *CA) revokeLocked(ctx context.Context, certname string, serial *big.Int) error {
	cur := c.crl.Load()
	if cur.revokes(serial) {
		return nil
	}
	now := c.now()
	entries := append(append([]x509.RevocationListEntry(nil), cur.entries...),
		x509.RevocationListEntry{SerialNumber: serial, RevocationTime: now})
	number := new(big.Int).Add(cur.number, big.NewInt(1))
	crlPEM, err := c.newCRL(number, entries, now)
	if err != nil {
		return err
	}
	st, err := c.parseCRL(crlPEM)
	if err != nil {
		return err
	}
	if err := c.store.PutCRL(ctx, crlPEM, number, cur.number); err != nil {
		return err
	}
	c.storeCRL(st)
	c.log.Info("revoked certificate", "certname", certname, "serial", pki.FormatSerial(serial), "crl_number", number)
	return nil
}

// Certificate returns the certificate of certname (PEM), revoked or not.
func (c *CA) Certificate(ctx context.Context, certname string) ([]byte, error) {
	return c.readPEM(ctx, certname, "certificate", "certificate", c.store.Signed)
}

// CertificateRequest returns the pending request of certname (PEM).
func (c *CA) CertificateRequest(ctx context.Context, certname string) ([]byte, error) {
	return c.readPEM(ctx, certname, "certificate request", "certificate_request", c.store.Request)
}

// readPEM reads certname's record with get; what names it in errors and
// puppetWhat in the not-found message agents see.
func (c *CA) readPEM(ctx context.Context, certname, what, puppetWhat string, get func(context.Context, string) ([]byte, error)) ([]byte, error) {
	if err := checkCertname(certname); err != nil {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, err)
	}
	b, err := get(ctx, certname)
	if errors.Is(err, farm.ErrNotFound) {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, notFoundf("Could not find %s %s", puppetWhat, certname))
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %q: %w", what, certname, err)
	}
	return b, nil
}

// List describes every certname the CA knows, sorted by name: one entry per
// name, the pending request when there is one, else the certificate. Front
// door certificates recorded only as such (on stores shared by several
// front doors) are listed too, the newest per name.
func (c *CA) List(ctx context.Context) ([]farm.CertStatus, error) {
	byName, err := c.statuses(ctx)
	if err != nil {
		return nil, fmt.Errorf("list certificates: %w", err)
	}
	out := slices.AppendSeq(make([]farm.CertStatus, 0, len(byName)), maps.Values(byName))
	slices.SortFunc(out, func(a, b farm.CertStatus) int { return strings.Compare(a.Certname, b.Certname) })
	return out, nil
}

// statuses is List's entries, by certname.
func (c *CA) statuses(ctx context.Context) (map[string]farm.CertStatus, error) {
	st, err := c.refreshCRL(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]farm.CertStatus{}
	certStatus := func(name string, cert *x509.Certificate) farm.CertStatus {
		state := farm.CertSigned
		if st.revokes(cert.SerialNumber) {
			state = farm.CertRevoked
		}
		return farm.CertStatus{
			Certname:    name,
			State:       state,
			Serial:      pki.FormatSerial(cert.SerialNumber),
			Fingerprint: pki.Fingerprint(cert.Raw),
			DNSAltNames: cert.DNSNames,
			NotAfter:    cert.NotAfter,
		}
	}
	signed, err := c.store.SignedCerts(ctx)
	if err != nil {
		return nil, err
	}
	for name, cert := range readable(c.log, "certificate", signed, pki.ParseCertPEM) {
		byName[name] = certStatus(name, cert)
	}
	servers, err := c.serverCerts(ctx, "")
	if err != nil {
		return nil, err
	}
	newest := map[string]*x509.Certificate{}
	for _, cert := range servers {
		name := cert.Subject.CommonName
		if old := newest[name]; old == nil || cert.NotBefore.After(old.NotBefore) {
			newest[name] = cert
		}
	}
	for name, cert := range newest {
		if _, ok := byName[name]; !ok && checkCertname(name) == nil {
			byName[name] = certStatus(name, cert)
		}
	}
	requests, err := c.store.Requests(ctx)
	if err != nil {
		return nil, err
	}
	for name, csr := range readable(c.log, "certificate request", requests, parseCSR) {
		if prev, ok := byName[name]; ok && prev.State == farm.CertSigned {
			continue // a request left behind by a crash between signing and cleanup
		}
		byName[name] = farm.CertStatus{
			Certname:    name,
			State:       farm.CertRequested,
			Fingerprint: pki.Fingerprint(csr.Raw),
			DNSAltNames: csr.DNSNames,
		}
	}
	return byName, nil
}

// readable yields the entries of a CA store's listing (PEM by certname)
// that parse reads; the others it logs as unreadable (what names their
// kind) and skips.
func readable[T any](log *slog.Logger, what string, entries map[string][]byte, parse func([]byte) (T, error)) iter.Seq2[string, T] {
	return func(yield func(string, T) bool) {
		for name, data := range entries {
			v, err := parse(data)
			if err != nil {
				log.Warn("unreadable "+what+" in the CA's store", "certname", name, "err", err)
				continue
			}
			if !yield(name, v) {
				return
			}
		}
	}
}

// readCert reads and parses certname's certificate; ErrNotFound when absent.
func (c *CA) readCert(ctx context.Context, certname string) (*x509.Certificate, error) {
	data, err := c.store.Signed(ctx, certname)
	if errors.Is(err, farm.ErrNotFound) {
		return nil, notFoundf("Could not find certificate %s", certname)
	}
	if err != nil {
		return nil, fmt.Errorf("read certificate of %q: %w", certname, err)
	}
	return pki.ParseCertPEM(data)
}

// refreshCRL brings the in-memory CRL up to date with the store and returns
// it. A CRL older (lower CRL number) than the one in memory never replaces it.
func (c *CA) refreshCRL(ctx context.Context) (*crlState, error) {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	return c.refreshCRLLocked(ctx)
}

// refreshCRLLocked is refreshCRL for a caller holding c.reloadMu.
func (c *CA) refreshCRLLocked(ctx context.Context) (*crlState, error) {
	c.lastCheck.Store(time.Now().UnixNano())
	data, err := c.store.CRL(ctx)
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
		return nil, errors.New("the stored CRL is not a PEM X509 CRL")
	}
	rl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CRL: %w", err)
	}
	if err := rl.CheckSignatureFrom(c.cert); err != nil {
		return nil, fmt.Errorf("the stored CRL is not signed by this CA: %w", err)
	}
	if rl.Number == nil {
		return nil, errors.New("the stored CRL has no CRL number")
	}
	st := &crlState{pem: data, number: rl.Number, entries: rl.RevokedCertificateEntries, revoked: map[string]time.Time{}}
	for _, e := range rl.RevokedCertificateEntries {
		st.revoked[e.SerialNumber.Text(16)] = e.RevocationTime
	}
	return st, nil
}

// revokes reports whether st lists serial; a nil st lists nothing.
func (st *crlState) revokes(serial *big.Int) bool {
	if st == nil || serial == nil {
		return false
	}
	_, ok := st.revoked[serial.Text(16)]
	return ok
}
