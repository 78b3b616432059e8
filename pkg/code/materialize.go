package code

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/compilefarm/compilefarm/internal/atomicfile"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Materialize writes the snapshot m out as root/<code_id>/<environment>/...
// and returns root/<code_id>, a Puppet environmentpath holding the one
// environment. The tree is built in a temporary directory under root and
// renamed into place, so a crash never leaves a half-written tree behind
// (only a .tmp-* directory that is safe to delete); when root/<code_id>
// already exists it is reused as is. Concurrent calls for the same code are
// safe: one rename wins and the others reuse its tree.
//
// Files get their recorded permission bits; directories get theirs plus
// owner read/write/search, so that the farm can always remove old trees.
// File contents are synced to disk before the rename.
func Materialize(ctx context.Context, store farm.ContentStore, m *Manifest, root string) (string, error) {
	id := m.CodeID()
	if id == "" {
		return "", fmt.Errorf("materializing code of %s: %w", m.Environment, m.err)
	}
	if err := m.validate(); err != nil {
		return "", fmt.Errorf("materializing code %s: %w", id, err)
	}
	final := filepath.Join(root, id)
	if fi, err := os.Stat(final); err == nil && fi.IsDir() {
		return final, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("materializing code %s: %w", id, err)
	}
	tmp, err := os.MkdirTemp(root, ".tmp-"+id[:16]+"-")
	if err != nil {
		return "", fmt.Errorf("materializing code %s: %w", id, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("materializing code %s: %w", id, err)
	}
	if err := writeTree(ctx, store, m, filepath.Join(tmp, m.Environment)); err != nil {
		return "", fmt.Errorf("materializing code %s (%s): %w", id, m.Environment, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if fi, serr := os.Stat(final); serr == nil && fi.IsDir() {
			return final, nil // another materializer won the race
		}
		return "", fmt.Errorf("materializing code %s: %w", id, err)
	}
	renamed = true
	_ = atomicfile.SyncDir(root)
	return final, nil
}

func writeTree(ctx context.Context, store farm.ContentStore, m *Manifest, envDir string) error {
	if err := os.Mkdir(envDir, 0o755); err != nil {
		return err
	}
	local := func(e Entry) string { return filepath.Join(envDir, filepath.FromSlash(e.Path)) }
	var dirs, files []Entry
	for _, e := range m.Entries {
		switch e.Type {
		case TypeDirectory:
			dirs = append(dirs, e)
			// Entries are sorted, so parents come before their children.
			if err := os.Mkdir(local(e), 0o700); err != nil {
				return err
			}
		case TypeLink:
			if err := os.Symlink(e.Target, local(e)); err != nil {
				return err
			}
		case TypeFile:
			files = append(files, e)
		}
	}
	err := parallel(ctx, len(files), func(ctx context.Context, i int) error {
		e := files[i]
		data, err := store.Get(ctx, farm.SpaceContent, e.SHA256)
		if err != nil {
			return fmt.Errorf("reading %s (%s): %w", e.Path, e.SHA256, err)
		}
		return writeFile(local(e), data, e.Mode)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		p := local(dirs[i])
		if err := atomicfile.SyncDir(p); err != nil {
			return err
		}
		if err := os.Chmod(p, dirs[i].Mode|0o700); err != nil {
			return err
		}
	}
	return atomicfile.SyncDir(envDir)
}

func writeFile(name string, data []byte, mode fs.FileMode) (err error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Sync()
}
