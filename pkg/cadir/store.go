// Package cadir keeps a Puppet CA in a directory laid out like Puppet
// Server's cadir: its records (Store, a farm.CAStore), its key (KeyFile,
// ca_key.pem, a farm.CAKeyImporter) and the opener that wires both into
// the signer of package ca (OpenCA).
//
// ca_crt.pem, ca_key.pem, ca_pub.pem, ca_crl.pem, serial, inventory.txt,
// requests/ and signed/ are Puppet Server's; server/ holds the front
// door's own certificates and keys. Every write is atomic (temp file,
// fsync, rename), and several processes may open one directory (the
// running broker and an operator's "broker ca sign"): the CA's changes are
// serialised with flock(2) on <dir>/.lock.
package cadir

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/internal/backoff"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// Files and directories of a CA directory. The names follow Puppet Server's
// cadir so an operator finds their way around (and could hand the directory
// to a Puppet Server).
const (
	fileCACert    = "ca_crt.pem"    // the self-signed CA certificate
	fileCAKey     = "ca_key.pem"    // the CA's RSA key, PKCS#1, 0600
	fileCAPub     = "ca_pub.pem"    // the CA's public key
	fileCRL       = "ca_crl.pem"    // the CRL, re-signed on every revocation
	fileSerial    = "serial"        // the next serial number, hex ("%04X")
	fileInventory = "inventory.txt" // one line per certificate ever issued
	fileLock      = ".lock"         // flock(2) target serialising processes
	dirRequests   = "requests"      // pending CSRs: requests/<certname>.pem
	dirSigned     = "signed"        // issued certificates: signed/<certname>.pem
	dirServer     = "server"        // front door certs and keys: server/<certname>.{pem,key}
)

// Store is the farm.CAStore kept in a directory laid out like Puppet
// Server's cadir. Its writes are atomic (temp file, fsync, rename) but not
// conditional: the CA takes Lock (flock(2) on <dir>/.lock) around every
// change, so processes sharing the directory on one host (or a filesystem
// with working flock) take turns.
type Store struct {
	dir      string
	mu       sync.Mutex // one holder of the file lock per process
	lockFile *os.File
}

var _ farm.CAStore = (*Store)(nil)

// Open opens the store in dir, creating dir and its subdirectories
// when missing. Close releases it.
func Open(dir string) (*Store, error) {
	for _, d := range []struct {
		path string
		perm fs.FileMode
	}{{dir, 0o750}, {filepath.Join(dir, dirRequests), 0o755}, {filepath.Join(dir, dirSigned), 0o755}, {filepath.Join(dir, dirServer), 0o700}} {
		if err := os.MkdirAll(d.path, d.perm); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, fileLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &Store{dir: dir, lockFile: f}, nil
}

// Close releases the directory's lock file.
func (d *Store) Close() error { return d.lockFile.Close() }

func (d *Store) path(elem ...string) string {
	return filepath.Join(append([]string{d.dir}, elem...)...)
}

func (d *Store) requestPath(certname string) string { return d.path(dirRequests, certname+".pem") }
func (d *Store) signedPath(certname string) string  { return d.path(dirSigned, certname+".pem") }

// Lock takes the OS lock on the directory, waiting while another process
// holds it, until ctx ends.
func (d *Store) Lock(ctx context.Context) (func(), error) {
	if err := farm.CheckCALock(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	for {
		ok, err := tryLockFile(d.lockFile)
		if err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("lock CA directory %s: %w", d.dir, err)
		}
		if ok {
			return func() {
				_ = unlockFile(d.lockFile) // closing the file releases it in any case
				d.mu.Unlock()
			}, nil
		}
		if err := backoff.Sleep(ctx, 5*time.Millisecond); err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("lock CA directory %s (held by another process): %w", d.dir, err)
		}
	}
}

// Check reads the serial counter.
func (d *Store) Check(ctx context.Context) error {
	if err := farm.CheckCACheck(ctx); err != nil {
		return err
	}
	_, err := d.readSerial()
	return err
}

// CACert reads ca_crt.pem. A missing certificate while signed/ holds
// certificates means ca_crt.pem was lost: making a new CA would silently
// cut off every agent, so that is an error, not ErrNotFound.
func (d *Store) CACert(ctx context.Context) ([]byte, error) {
	if err := farm.CheckCACert(ctx); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(d.path(fileCACert))
	if errors.Is(err, fs.ErrNotExist) {
		signed, err := d.names(dirSigned)
		if err != nil {
			return nil, err
		}
		if len(signed) > 0 {
			return nil, fmt.Errorf("%s is missing but %s/ holds %d certificates: restore the CA certificate, or move the directory away to start a new CA",
				d.path(fileCACert), dirSigned, len(signed))
		}
		return nil, fmt.Errorf("read CA certificate %s: %w", d.path(fileCACert), farm.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	return b, nil
}

// Create writes the CA's files, the certificate last: a directory without
// ca_crt.pem has no CA yet, whatever else a crash left behind.
func (d *Store) Create(ctx context.Context, g farm.CAGenesis) error {
	if err := farm.CheckCACreate(ctx, &g); err != nil {
		return err
	}
	if _, err := os.Stat(d.path(fileCACert)); err == nil {
		return fmt.Errorf("create CA in %s: %w", d.dir, farm.ErrConflict)
	}
	cert, err := pki.ParseCertPEM(g.CertPEM)
	if err != nil {
		return fmt.Errorf("create CA in %s: %w", d.dir, err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(cert.PublicKey)
	if err != nil {
		return fmt.Errorf("encode CA public key: %w", err)
	}
	if err := atomicfile.Write(d.path(fileCAPub), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return err
	}
	if err := d.writeSerial(g.NextSerial); err != nil {
		return err
	}
	if err := atomicfile.Remove(d.path(fileInventory)); err != nil {
		return err
	}
	if err := d.RecordIssued(ctx, g.Issued); err != nil {
		return err
	}
	if err := atomicfile.Write(d.path(fileCRL), g.CRLPEM, 0o644); err != nil {
		return err
	}
	return atomicfile.Write(d.path(fileCACert), g.CertPEM, 0o644)
}

// readSerial returns the next serial number recorded in the serial file;
// ErrNotFound when there is none (no CA yet).
func (d *Store) readSerial() (*big.Int, error) {
	b, err := readRecord(d.path(fileSerial))
	if err != nil {
		return nil, fmt.Errorf("read serial counter: %w", err)
	}
	s := strings.TrimSpace(string(b))
	n, ok := new(big.Int).SetString(s, 16)
	if !ok || n.Sign() <= 0 {
		return nil, fmt.Errorf("read serial counter %s: %q is not a positive hex number", d.path(fileSerial), s)
	}
	return n, nil
}

// writeSerial records next as the next serial number to hand out.
func (d *Store) writeSerial(next *big.Int) error {
	return atomicfile.Write(d.path(fileSerial), []byte(pki.FormatSerial(next)), 0o644)
}

// NextSerial moves the counter before the certificate is written, so a
// crash can skip a serial but never hand one out twice. Caller holds Lock.
func (d *Store) NextSerial(ctx context.Context) (*big.Int, error) {
	if err := farm.CheckCANextSerial(ctx); err != nil {
		return nil, err
	}
	n, err := d.readSerial()
	if err != nil {
		return nil, err
	}
	if err := d.writeSerial(new(big.Int).Add(n, big.NewInt(1))); err != nil {
		return nil, fmt.Errorf("advance serial counter: %w", err)
	}
	return n, nil
}

// RecordIssued adds a line to inventory.txt in Puppet's format
// ("0x0003 2026-11-20T22:26:40UTC 2031-11-20T22:26:40UTC /CN=agent1"),
// rewriting the file atomically as Puppet Server does.
func (d *Store) RecordIssued(ctx context.Context, e farm.CertIssued) error {
	if err := farm.CheckCARecordIssued(ctx, &e); err != nil {
		return err
	}
	path := d.path(fileInventory)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read inventory: %w", err)
	}
	line := inventoryLine(e)
	buf := make([]byte, 0, len(old)+len(line))
	buf = append(buf, old...)
	if len(buf) > 0 && buf[len(buf)-1] != '\n' {
		buf = append(buf, '\n')
	}
	buf = append(buf, line...)
	if err := atomicfile.Write(path, buf, 0o644); err != nil {
		return fmt.Errorf("append to inventory: %w", err)
	}
	return nil
}

// inventoryLine formats e as a line of Puppet's inventory.txt.
func inventoryLine(e farm.CertIssued) string {
	const layout = "2006-01-02T15:04:05MST"
	return fmt.Sprintf("0x%s %s %s /CN=%s\n", pki.FormatSerial(e.Serial),
		e.NotBefore.UTC().Format(layout), e.NotAfter.UTC().Format(layout), e.Certname)
}

// Request reads requests/<certname>.pem.
func (d *Store) Request(ctx context.Context, certname string) ([]byte, error) {
	if err := farm.CheckCARequest(ctx, certname); err != nil {
		return nil, err
	}
	return readRecord(d.requestPath(certname))
}

// PutRequest writes requests/<certname>.pem.
func (d *Store) PutRequest(ctx context.Context, certname string, csrPEM []byte) error {
	if err := farm.CheckCAPutRequest(ctx, certname, csrPEM); err != nil {
		return err
	}
	return atomicfile.Write(d.requestPath(certname), csrPEM, 0o644)
}

// DeleteRequest removes requests/<certname>.pem.
func (d *Store) DeleteRequest(ctx context.Context, certname string) error {
	if err := farm.CheckCADeleteRequest(ctx, certname); err != nil {
		return err
	}
	return atomicfile.Remove(d.requestPath(certname))
}

// Requests reads requests/.
func (d *Store) Requests(ctx context.Context) (map[string][]byte, error) {
	if err := farm.CheckCARequests(ctx); err != nil {
		return nil, err
	}
	return d.readAll(dirRequests)
}

// Signed reads signed/<certname>.pem.
func (d *Store) Signed(ctx context.Context, certname string) ([]byte, error) {
	if err := farm.CheckCASigned(ctx, certname); err != nil {
		return nil, err
	}
	return readRecord(d.signedPath(certname))
}

// PutSigned checks replace against the file it overwrites. Caller holds
// Lock.
func (d *Store) PutSigned(ctx context.Context, certname string, certPEM []byte, replace *big.Int) error {
	if err := farm.CheckCAPutSigned(ctx, certname, certPEM, replace); err != nil {
		return err
	}
	if err := d.checkHeld(certname, replace); errors.Is(err, farm.ErrNotFound) {
		return fmt.Errorf("replace certificate %s of %s: it holds none: %w", pki.FormatSerial(replace), certname, farm.ErrConflict)
	} else if err != nil {
		return err
	}
	return atomicfile.Write(d.signedPath(certname), certPEM, 0o644)
}

// DeleteSigned checks serial against the file it removes. Caller holds
// Lock.
func (d *Store) DeleteSigned(ctx context.Context, certname string, serial *big.Int) error {
	if err := farm.CheckCADeleteSigned(ctx, certname, serial); err != nil {
		return err
	}
	if err := d.checkHeld(certname, serial); err != nil {
		if errors.Is(err, farm.ErrNotFound) {
			return nil
		}
		return err
	}
	return atomicfile.Remove(d.signedPath(certname))
}

// checkHeld returns nil when certname holds the certificate with serial
// want (none, when want is nil), ErrConflict when it holds another and
// ErrNotFound when it holds none but want is set.
func (d *Store) checkHeld(certname string, want *big.Int) error {
	data, err := os.ReadFile(d.signedPath(certname))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if want == nil {
			return nil
		}
		return fmt.Errorf("certificate of %s: %w", certname, farm.ErrNotFound)
	case err != nil:
		return fmt.Errorf("read certificate of %s: %w", certname, err)
	}
	held, err := pki.ParseCertPEM(data)
	if err != nil {
		return fmt.Errorf("read certificate of %s: %w", certname, err)
	}
	if want == nil || held.SerialNumber.Cmp(want) != 0 {
		return fmt.Errorf("%s holds certificate %s: %w", certname, pki.FormatSerial(held.SerialNumber), farm.ErrConflict)
	}
	return nil
}

// SignedCerts reads signed/.
func (d *Store) SignedCerts(ctx context.Context) (map[string][]byte, error) {
	if err := farm.CheckCASignedCerts(ctx); err != nil {
		return nil, err
	}
	return d.readAll(dirSigned)
}

// PutServerCert writes server/<certname>.pem, which is also where
// IssueServerCert keeps the certificate next to its key.
func (d *Store) PutServerCert(ctx context.Context, certname string, certPEM []byte) error {
	if err := farm.CheckCAPutServerCert(ctx, certname, certPEM); err != nil {
		return err
	}
	path := d.path(dirServer, certname+".pem")
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, certPEM) {
		return nil
	}
	return atomicfile.Write(path, certPEM, 0o644)
}

// ServerCerts reads server/ (a few files: one per front door certname).
func (d *Store) ServerCerts(ctx context.Context, dnsName string) ([][]byte, error) {
	if err := farm.CheckCAServerCerts(ctx, dnsName); err != nil {
		return nil, err
	}
	all, err := d.readAll(dirServer)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(all))
	for _, data := range all {
		if dnsName != "" {
			cert, err := pki.ParseCertPEM(data)
			if err != nil || !slices.Contains(cert.DNSNames, dnsName) {
				continue
			}
		}
		out = append(out, data)
	}
	return out, nil
}

// CRL reads ca_crl.pem.
func (d *Store) CRL(ctx context.Context) ([]byte, error) {
	if err := farm.CheckCACRL(ctx); err != nil {
		return nil, err
	}
	b, err := readRecord(d.path(fileCRL))
	if err != nil {
		return nil, fmt.Errorf("read CRL: %w", err)
	}
	return b, nil
}

// PutCRL writes ca_crl.pem if the current one's CRL number is prev.
// Caller holds Lock.
func (d *Store) PutCRL(ctx context.Context, crlPEM []byte, number, prev *big.Int) error {
	if err := farm.CheckCAPutCRL(ctx, crlPEM, number, prev); err != nil {
		return err
	}
	cur, err := d.CRL(ctx)
	if err != nil {
		return err
	}
	block, _ := pem.Decode(cur)
	if block == nil {
		return fmt.Errorf("read CRL %s: not PEM", d.path(fileCRL))
	}
	rl, err := x509.ParseRevocationList(block.Bytes)
	if err != nil {
		return fmt.Errorf("read CRL %s: %w", d.path(fileCRL), err)
	}
	if rl.Number == nil || rl.Number.Cmp(prev) != 0 {
		return fmt.Errorf("replace CRL number %s: the current CRL has number %v: %w", prev, rl.Number, farm.ErrConflict)
	}
	return atomicfile.Write(d.path(fileCRL), crlPEM, 0o644)
}

// readAll reads every <certname>.pem in a subdirectory; files removed
// meanwhile are left out.
func (d *Store) readAll(sub string) (map[string][]byte, error) {
	names, err := d.names(sub)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(names))
	for _, name := range names {
		b, err := os.ReadFile(d.path(sub, name+".pem"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s/%s.pem: %w", sub, name, err)
		}
		out[name] = b
	}
	return out, nil
}

// names lists the certnames with a .pem file in a subdirectory.
func (d *Store) names(sub string) ([]string, error) {
	entries, err := os.ReadDir(d.path(sub))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pem")
		if !ok || e.IsDir() || farm.ValidateCertname(name) != nil {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}
