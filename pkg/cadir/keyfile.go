package cadir

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/pki"
)

// KeyFile is a farm.CAKeyImporter kept in a PEM file, mode 0600, created
// in an existing directory: Puppet Server's ca_key.pem. It makes RSA keys
// of any size the contract allows, written as PKCS#1, and keeps an
// imported key's bytes as given. Signer reads and parses the file on each
// call; the key then signs in memory.
type KeyFile string

var _ farm.CAKeyImporter = KeyFile("")

// String names the file: "file <path>".
func (f KeyFile) String() string { return "file " + string(f) }

// Signer reads and parses the key; ErrNotFound when the file does not
// exist.
func (f KeyFile) Signer(ctx context.Context) (crypto.Signer, error) {
	if err := farm.CheckSigner(ctx, f); err != nil {
		return nil, err
	}
	b, err := readRecord(string(f))
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	key, err := pki.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("read CA key %s: %w", string(f), err)
	}
	return key, nil
}

// GenerateKey makes an RSA key and writes it as ImportKey does; when the
// file exists it returns ErrConflict without making one.
func (f KeyFile) GenerateKey(ctx context.Context, bits int) error {
	if err := farm.CheckGenerateKey(ctx, f, bits); err != nil {
		return err
	}
	if _, err := os.Lstat(string(f)); err == nil {
		return fmt.Errorf("generate CA key in %s: it holds one: %w", f, farm.ErrConflict)
	}
	_, keyPEM, err := pki.NewRSAKey(bits)
	if err != nil {
		return fmt.Errorf("generate CA key in %s: %w", f, err)
	}
	if err := ctx.Err(); err != nil { // generating a large key takes seconds
		return fmt.Errorf("generate CA key in %s: %w", f, err)
	}
	return f.create(keyPEM)
}

// ImportKey writes keyPEM, as given, once it parses.
func (f KeyFile) ImportKey(ctx context.Context, keyPEM []byte) error {
	if err := farm.CheckImportKey(ctx, f, keyPEM); err != nil {
		return err
	}
	if _, err := pki.ParsePrivateKey(keyPEM); err != nil {
		return fmt.Errorf("import CA key into %s: %w: %w", f, err, farm.ErrInvalid)
	}
	return f.create(keyPEM)
}

// create writes the key durably and only if the file does not exist: it
// is written to a temp file and hard-linked into place, so a crash never
// leaves half a key and two processes never both win.
func (f KeyFile) create(keyPEM []byte) error {
	path := string(f)
	tmp, err := atomicfile.WriteTemp(path, keyPEM, 0o600)
	if err != nil {
		return fmt.Errorf("write CA key %s: %w", path, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write CA key %s: it holds one: %w", path, farm.ErrConflict)
		}
		return fmt.Errorf("write CA key %s: %w", path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}
