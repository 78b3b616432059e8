// Package atomicfile writes and removes files so that a reader never sees
// half a file and a change survives a crash once the call returns: the
// one way every file-backed part of the farm (CA directory, CA proxy cache,
// embedded content store, code checkouts, worker script) changes a file.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data (mode perm): a temporary file in the same
// directory, fsync, rename, fsync of the directory.
func Write(path string, data []byte, perm fs.FileMode) error {
	tmp, err := WriteTemp(path, data, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// WriteTemp writes data with mode perm to a new file next to path, synced
// to disk, and returns its name for the caller to move into place (and to
// remove should that fail). The name starts with '.' and ends in .tmp plus
// random characters, so it is never taken for a record.
func WriteTemp(path string, data []byte, perm fs.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", err
	}
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// Remove deletes path durably; a missing file is not an error.
func Remove(path string) error {
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// MkdirAll creates dir (mode perm) and any missing parents, syncing each
// parent whose entries changed so the directories survive a crash.
func MkdirAll(dir string, perm fs.FileMode) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return SyncDir(parent)
}

// SyncDir makes the entries of dir durable. File systems that cannot sync
// a directory are let be.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
