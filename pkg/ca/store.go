package ca

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
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

// writeFileAtomic replaces path with data so that readers see either the old
// or the new content, never a mix, and the new content survives a crash once
// writeFileAtomic returns: temp file in the same directory, fsync, rename,
// fsync of the directory.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// The temp name starts with '.' so it is never taken for a certname.
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// removeFile deletes path durably; a missing file is not an error.
func removeFile(path string) error {
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// lockDir takes the OS lock on the CA directory, waiting while another
// process holds it, until ctx ends. Callers hold c.mu, so within one process
// only one goroutine ever uses the lock file.
func (c *CA) lockDir(ctx context.Context) (unlock func(), err error) {
	for {
		ok, err := tryLockFile(c.lockFile)
		if err != nil {
			return nil, fmt.Errorf("lock CA directory %s: %w", c.dir, err)
		}
		if ok {
			return func() {
				if err := unlockFile(c.lockFile); err != nil {
					c.log.Error("unlock CA directory", "dir", c.dir, "err", err)
				}
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock CA directory %s (held by another process): %w", c.dir, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readSerial returns the next serial number recorded in the serial file.
func (c *CA) readSerial() (*big.Int, error) {
	b, err := os.ReadFile(c.path(fileSerial))
	if err != nil {
		return nil, fmt.Errorf("read serial counter: %w", err)
	}
	s := strings.TrimSpace(string(b))
	n, ok := new(big.Int).SetString(s, 16)
	if !ok || n.Sign() <= 0 {
		return nil, fmt.Errorf("read serial counter %s: %q is not a positive hex number", c.path(fileSerial), s)
	}
	return n, nil
}

// writeSerial records next as the next serial number to hand out.
func (c *CA) writeSerial(next *big.Int) error {
	return writeFileAtomic(c.path(fileSerial), []byte(formatSerial(next)), 0o644)
}

// nextSerial takes a serial number from the counter. The counter moves
// before the certificate is written, so a crash can skip a serial but never
// hand one out twice. Caller holds c.mu and the directory lock.
func (c *CA) nextSerial() (*big.Int, error) {
	n, err := c.readSerial()
	if err != nil {
		return nil, err
	}
	if err := c.writeSerial(new(big.Int).Add(n, big.NewInt(1))); err != nil {
		return nil, fmt.Errorf("advance serial counter: %w", err)
	}
	return n, nil
}

// formatSerial writes a serial as Puppet does: upper-case hex, at least four
// digits.
func formatSerial(n *big.Int) string {
	s := strings.ToUpper(n.Text(16))
	for len(s) < 4 {
		s = "0" + s
	}
	return s
}

// appendInventory adds a line for cert to inventory.txt in Puppet's format
// ("0x0003 2026-11-20T22:26:40UTC 2031-11-20T22:26:40UTC /CN=agent1"),
// rewriting the file atomically as Puppet Server does.
func (c *CA) appendInventory(certname string, serial *big.Int, notBefore, notAfter time.Time) error {
	path := c.path(fileInventory)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read inventory: %w", err)
	}
	const layout = "2006-01-02T15:04:05MST"
	line := fmt.Sprintf("0x%s %s %s /CN=%s\n", formatSerial(serial),
		notBefore.UTC().Format(layout), notAfter.UTC().Format(layout), certname)
	buf := make([]byte, 0, len(old)+len(line))
	buf = append(buf, old...)
	if len(buf) > 0 && buf[len(buf)-1] != '\n' {
		buf = append(buf, '\n')
	}
	buf = append(buf, line...)
	if err := writeFileAtomic(path, buf, 0o644); err != nil {
		return fmt.Errorf("append to inventory: %w", err)
	}
	return nil
}

func (c *CA) path(elem ...string) string {
	return filepath.Join(append([]string{c.dir}, elem...)...)
}

func (c *CA) requestPath(certname string) string { return c.path(dirRequests, certname+".pem") }
func (c *CA) signedPath(certname string) string  { return c.path(dirSigned, certname+".pem") }
