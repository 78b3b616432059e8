package ca

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// KeyFile is a farm.CAKeySource kept in a PEM file, mode 0600, created in
// an existing directory.
type KeyFile string

var _ farm.CAKeySource = KeyFile("")

// String names the file: "file <path>".
func (f KeyFile) String() string { return "file " + string(f) }

// LoadKey reads the file; ErrNotFound when it does not exist.
func (f KeyFile) LoadKey(ctx context.Context) ([]byte, error) {
	if err := farm.CheckLoadKey(ctx, f); err != nil {
		return nil, err
	}
	b, err := readRecord(string(f))
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	return b, nil
}

// CreateKey writes the key durably and only if the file does not exist:
// it is written to a temp file and hard-linked into place, so a crash never
// leaves half a key and two processes never both win.
func (f KeyFile) CreateKey(ctx context.Context, keyPEM []byte) error {
	if err := farm.CheckCreateKey(ctx, f, keyPEM); err != nil {
		return err
	}
	path := string(f)
	tmp, err := atomicfile.WriteTemp(path, keyPEM, 0o600)
	if err != nil {
		return fmt.Errorf("write CA key %s: %w", path, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write CA key %s: %w", path, farm.ErrConflict)
		}
		return fmt.Errorf("write CA key %s: %w", path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}
