package localstore

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// nameKey is the key of name in the "names" bucket: a space has no '/',
// so "<space>/<name>" is unambiguous.
func nameKey(space farm.Space, name string) []byte {
	return []byte(string(space) + "/" + name)
}

// PutName makes name in space point at d, in one synced transaction; a name
// already pointing at another digest is farm.ErrConflict and keeps it.
func (s *Store) PutName(ctx context.Context, space farm.Space, name string, d farm.Digest) error {
	if err := farm.CheckPutName(ctx, space, name, d); err != nil {
		return err
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketNames)
		k := nameKey(space, name)
		if old := b.Get(k); old != nil {
			if bytes.Equal(old, []byte(d)) {
				return nil
			}
			return fmt.Errorf("it points at %s, not %s: %w", old, d, farm.ErrConflict)
		}
		return b.Put(k, []byte(d))
	})
	if err != nil {
		return fmt.Errorf("put name %s/%s: %w", space, name, s.storageErr(err))
	}
	return nil
}

// GetName returns the digest name in space points at.
func (s *Store) GetName(ctx context.Context, space farm.Space, name string) (farm.Digest, error) {
	if err := farm.CheckGetName(ctx, space, name); err != nil {
		return "", err
	}
	if err := s.checkOpen(); err != nil {
		return "", err
	}
	var d farm.Digest
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketNames).Get(nameKey(space, name))
		if v == nil {
			return farm.ErrNotFound
		}
		d = farm.Digest(v) // copies: v is only valid in the transaction
		if !d.Valid() {
			return fmt.Errorf("stored digest %q is malformed: %w", v, farm.ErrInvalid)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("get name %s/%s: %w", space, name, s.storageErr(err))
	}
	return d, nil
}
