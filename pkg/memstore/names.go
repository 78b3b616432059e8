package memstore

import (
	"context"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// PutName makes name in space point at d; a name already pointing at
// another digest is farm.ErrConflict and keeps it.
func (s *Store) PutName(ctx context.Context, space farm.Space, name string, d farm.Digest) error {
	if err := farm.CheckPutName(ctx, space, name, d); err != nil {
		return err
	}
	s.nameMu.Lock()
	defer s.nameMu.Unlock()
	if s.names == nil {
		s.names = map[farm.Space]map[string]farm.Digest{}
	}
	m := s.names[space]
	if m == nil {
		m = map[string]farm.Digest{}
		s.names[space] = m
	}
	if old, ok := m[name]; ok && old != d {
		return fmt.Errorf("put name %s/%s: it points at %s, not %s: %w", space, name, old, d, farm.ErrConflict)
	}
	m[name] = d
	return nil
}

// GetName returns the digest name in space points at.
func (s *Store) GetName(ctx context.Context, space farm.Space, name string) (farm.Digest, error) {
	if err := farm.CheckGetName(ctx, space, name); err != nil {
		return "", err
	}
	s.nameMu.RLock()
	d, ok := s.names[space][name]
	s.nameMu.RUnlock()
	if !ok {
		return "", fmt.Errorf("get name %s/%s: %w", space, name, farm.ErrNotFound)
	}
	return d, nil
}
