package code

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/catalog"
	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Library serves code snapshots by code_id: checked out on disk for compile
// engines, and as Puppet file mounts and static content for the front door.
// Manifests are immutable, so each is loaded once. Safe for concurrent use.
type Library struct {
	store farm.ContentStore
	root  string // checkouts live in root/<code_id>/<environment>

	mu        sync.Mutex
	manifests map[string]*Manifest
	checkouts map[string]string // code_id -> environmentpath
}

// NewLibrary serves the snapshots in store, checking them out under root.
func NewLibrary(store farm.ContentStore, root string) *Library {
	return &Library{store: store, root: root, manifests: map[string]*Manifest{}, checkouts: map[string]string{}}
}

// Manifest returns the snapshot with this code_id; ErrNotFound when there
// is none, ErrInvalid for a malformed code_id.
func (l *Library) Manifest(ctx context.Context, codeID string) (*Manifest, error) {
	l.mu.Lock()
	m, ok := l.manifests[codeID]
	l.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := Load(ctx, l.store, codeID)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.manifests[codeID] = m
	l.mu.Unlock()
	return m, nil
}

// EnvironmentPath checks the snapshot out (once) and returns the Puppet
// environmentpath that holds it.
func (l *Library) EnvironmentPath(ctx context.Context, codeID string) (string, error) {
	l.mu.Lock()
	p, ok := l.checkouts[codeID]
	l.mu.Unlock()
	if ok {
		return p, nil
	}
	m, err := l.Manifest(ctx, codeID)
	if err != nil {
		return "", err
	}
	p, err = Materialize(ctx, l.store, m, l.root)
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	l.checkouts[codeID] = p
	l.mu.Unlock()
	return p, nil
}

// PublicDir is the path catalogs, file metadata and errors show for an
// environment's code, whatever checkout it was compiled from: stable across
// code versions, data directories and machines, like Puppet Server's
// /etc/puppetlabs/code/environments/<env>. Global modules show under
// PublicBaseDir.
func PublicDir(environment string) string { return "/compilefarm/environments/" + environment }

// files returns the file server of a snapshot, with public paths.
func (l *Library) files(ctx context.Context, codeID string) (*Files, error) {
	m, err := l.Manifest(ctx, codeID)
	if err != nil {
		return nil, err
	}
	f := NewFiles(l.store, m, PublicDir(m.Environment))
	f.BaseDirs = publicBaseDirs(len(m.BaseDirs()))
	return f, nil
}

// Publish rewrites the checkout paths of a snapshot in text (a compiled
// catalog, a compile error) to its public paths.
func (l *Library) Publish(ctx context.Context, codeID string, text []byte) ([]byte, error) {
	m, err := l.Manifest(ctx, codeID)
	if err != nil {
		return nil, err
	}
	return l.publish(m, text), nil
}

// publish shows a global module directory's files under PublicBaseDir and
// the environment's own under PublicDir.
func (l *Library) publish(m *Manifest, text []byte) []byte {
	checkout := filepath.Join(l.root, m.CodeID(), m.Environment)
	for i, d := range m.BaseDirs() {
		text = bytes.ReplaceAll(text, []byte(checkout+"/"+d+"/"), []byte(PublicBaseDir(i)+"/"))
	}
	return bytes.ReplaceAll(text, []byte(checkout+"/"), []byte(PublicDir(m.Environment)+"/"))
}

// MakeStatic shows public paths in a compiled catalog, inlines file
// metadata from the snapshot and sets code_id.
func (l *Library) MakeStatic(ctx context.Context, cat []byte, codeID string) ([]byte, error) {
	f, err := l.files(ctx, codeID)
	if err != nil {
		return nil, err
	}
	return catalog.MakeStatic(ctx, l.publish(f.Manifest, cat), codeID, f)
}

// FileMetadata answers file_metadata for a mount key (modules/<mod>/<path>,
// plugins, pluginfacts, locales) in a snapshot.
func (l *Library) FileMetadata(ctx context.Context, codeID, key string, opts catalog.MetadataOptions) (catalog.FileMetadata, error) {
	f, err := l.files(ctx, codeID)
	if err != nil {
		return catalog.FileMetadata{}, err
	}
	return f.FileMetadata(ctx, key, opts)
}

// FileMetadatas answers file_metadatas for a mount key in a snapshot.
func (l *Library) FileMetadatas(ctx context.Context, codeID, key string, opts catalog.MetadataOptions) ([]catalog.FileMetadata, error) {
	f, err := l.files(ctx, codeID)
	if err != nil {
		return nil, err
	}
	return f.FileMetadatas(ctx, key, opts)
}

// FileContent returns the bytes of a file in a mount.
func (l *Library) FileContent(ctx context.Context, codeID, key string) ([]byte, error) {
	m, err := l.Manifest(ctx, codeID)
	if err != nil {
		return nil, err
	}
	mount, rel, err := SplitKey(key)
	if err != nil {
		return nil, err
	}
	e, err := m.Lookup(mount, rel)
	if err != nil {
		return nil, err
	}
	return l.content(ctx, e)
}

// StaticFileContent returns the bytes of a file by its path in the
// environment (<moduledir>/<mod>/files/<path>), as static catalogs name it.
func (l *Library) StaticFileContent(ctx context.Context, codeID, path string) ([]byte, error) {
	m, err := l.Manifest(ctx, codeID)
	if err != nil {
		return nil, err
	}
	e, err := m.LookupStatic(path)
	if err != nil {
		return nil, err
	}
	return l.content(ctx, e)
}

// content reads a file entry's bytes (Lookup and LookupStatic give only files).
func (l *Library) content(ctx context.Context, e Entry) ([]byte, error) {
	b, err := l.store.Get(ctx, farm.SpaceContent, e.SHA256)
	if err != nil {
		return nil, fmt.Errorf("read content of %s: %w", e.Path, err)
	}
	return b, nil
}
