package localstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// contentPath is where the blob d of space lives.
func (s *Store) contentPath(space farm.Space, d farm.Digest) string {
	return filepath.Join(s.content, string(space), string(d[:2]), string(d))
}

// Put stores data in space under its SHA-256 and returns the digest. A blob
// already stored intact is not written again; a stored copy that fails
// verification is replaced.
func (s *Store) Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error) {
	if err := farm.CheckContentPut(ctx, space); err != nil {
		return "", err
	}
	if err := s.checkOpen(); err != nil {
		return "", fmt.Errorf("put content in %s: %w", space, err)
	}
	d := farm.DigestOf(data)
	p := s.contentPath(space, d)
	old, err := os.ReadFile(p)
	switch {
	case err == nil && bytes.Equal(old, data):
		return d, nil
	case err == nil:
		s.log.Warn("localstore: replacing corrupt content file", "path", p)
	case !errors.Is(err, fs.ErrNotExist):
		s.log.Warn("localstore: unreadable content file, writing it again", "path", p, "err", err)
	}
	if err := writeBlob(p, data); err != nil {
		return "", fmt.Errorf("put content %s/%s: %w", space, d, s.storageErr(err))
	}
	return d, nil
}

// Get reads the blob d of space and verifies its SHA-256. A file whose bytes
// do not match its name gives an error naming the file and wrapping
// farm.ErrInvalid.
func (s *Store) Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error) {
	if err := farm.CheckContentGet(ctx, space, d); err != nil {
		return nil, err
	}
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("get content %s/%s: %w", space, d, err)
	}
	p := s.contentPath(space, d)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get content %s/%s: %w", space, d, farm.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get content %s/%s: %w", space, d, s.storageErr(err))
	}
	if got := farm.DigestOf(b); got != d {
		return nil, fmt.Errorf("get content %s/%s: file %s is corrupt (its bytes hash to %s): %w", space, d, p, got, farm.ErrInvalid)
	}
	return b, nil
}

// Has reports whether space holds the blob d. It does not read the file;
// Get verifies.
func (s *Store) Has(ctx context.Context, space farm.Space, d farm.Digest) (bool, error) {
	if err := farm.CheckContentHas(ctx, space, d); err != nil {
		return false, err
	}
	if err := s.checkOpen(); err != nil {
		return false, fmt.Errorf("has content %s/%s: %w", space, d, err)
	}
	fi, err := os.Stat(s.contentPath(space, d))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("has content %s/%s: %w", space, d, s.storageErr(err))
	}
	return fi.Mode().IsRegular(), nil
}

// writeBlob writes a blob whole and durably, creating its fan-out
// directory when missing.
func writeBlob(path string, data []byte) error {
	if err := atomicfile.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
