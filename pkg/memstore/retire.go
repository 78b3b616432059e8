package memstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// The store is a farm.ContentRetirer that marks and never removes: it
// keeps nothing long enough for a retention to pass.
var _ farm.ContentRetirer = (*Store)(nil)

// PutNew stores a copy of data in space, unless it is there, and returns
// its digest and whether it was there.
func (s *Store) PutNew(ctx context.Context, space farm.Space, data []byte) (farm.Digest, bool, error) {
	if err := farm.CheckContentPut(ctx, space); err != nil {
		return "", false, err
	}
	d := farm.DigestOf(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.content[space]
	if m == nil {
		m = map[farm.Digest][]byte{}
		s.content[space] = m
	}
	if _, ok := m[d]; ok {
		return d, true, nil
	}
	m[d] = bytes.Clone(data)
	return d, false, nil
}

// Retire marks the blob d of space.
func (s *Store) Retire(ctx context.Context, space farm.Space, d farm.Digest) error {
	if err := farm.CheckContentRetire(ctx, space, d); err != nil {
		return err
	}
	return s.mark(space, d, true, "retire")
}

// Keep takes the mark of the blob d of space back.
func (s *Store) Keep(ctx context.Context, space farm.Space, d farm.Digest) error {
	if err := farm.CheckContentKeep(ctx, space, d); err != nil {
		return err
	}
	return s.mark(space, d, false, "keep")
}

func (s *Store) mark(space farm.Space, d farm.Digest, retired bool, op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.content[space][d]; !ok {
		return fmt.Errorf("%s content %s/%s: %w", op, space, d, farm.ErrNotFound)
	}
	m := s.retired[space]
	if m == nil {
		m = map[farm.Digest]bool{}
		s.retired[space] = m
	}
	if retired {
		m[d] = true
	} else {
		delete(m, d)
	}
	return nil
}

// Retired reports whether the blob d of space carries a mark.
func (s *Store) Retired(ctx context.Context, space farm.Space, d farm.Digest) (bool, error) {
	if err := farm.CheckContentRetired(ctx, space, d); err != nil {
		return false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.content[space][d]; !ok {
		return false, fmt.Errorf("retired content %s/%s: %w", space, d, farm.ErrNotFound)
	}
	return s.retired[space][d], nil
}
