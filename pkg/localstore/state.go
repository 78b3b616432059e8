package localstore

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// decode reads a stored JSON record; what names it in errors ("node
// web01.example.com").
func decode[T any](what string, v []byte) (T, error) {
	var r T
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("stored record of %s is unreadable: %v: %w", what, err, farm.ErrInvalid)
	}
	return r, nil
}

// getRecord reads the record of the kind ("node") under key in bucket;
// farm.ErrNotFound when there is none.
func getRecord[T any](db *bolt.DB, bucket []byte, kind, key string) (T, error) {
	var r T
	err := db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return farm.ErrNotFound
		}
		var err error
		r, err = decode[T](kind+" "+key, v)
		return err
	})
	return r, err
}

// listRecords reads every record in bucket, in key order.
func listRecords[T any](db *bolt.DB, bucket []byte, kind string) ([]T, error) {
	out := []T{}
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			r, err := decode[T](kind+" "+string(k), v)
			if err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// GetNode returns the record of certname.
func (s *Store) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	if err := ctx.Err(); err != nil {
		return farm.Node{}, fmt.Errorf("get node %s: %w", certname, err)
	}
	if err := farm.ValidateCertname(certname); err != nil {
		return farm.Node{}, fmt.Errorf("get node: %w", err)
	}
	n, err := getRecord[farm.Node](s.db, bucketNodes, "node", certname)
	if err != nil {
		return farm.Node{}, fmt.Errorf("get node %s: %w", certname, s.storageErr(err))
	}
	return n, nil
}

// ListNodes returns every node record, sorted by certname.
func (s *Store) ListNodes(ctx context.Context) ([]farm.Node, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out, err := listRecords[farm.Node](s.db, bucketNodes, "node")
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", s.storageErr(err))
	}
	return out, nil
}

// UpdateNode runs fn on certname's record inside one bbolt write
// transaction and stores the result unless fn fails; fn's error is returned
// as is. fn runs while the database is locked for writing, so it must be
// quick and must not call back into the store. fn may not change the
// certname (farm.ErrInvalid).
func (s *Store) UpdateNode(ctx context.Context, certname string, fn func(*farm.Node) error) (farm.Node, error) {
	if err := ctx.Err(); err != nil {
		return farm.Node{}, fmt.Errorf("update node %s: %w", certname, err)
	}
	if err := farm.ValidateCertname(certname); err != nil {
		return farm.Node{}, fmt.Errorf("update node: %w", err)
	}
	var (
		out   farm.Node
		fnErr error
	)
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketNodes)
		key := []byte(certname)
		n := farm.Node{Certname: certname}
		if v := b.Get(key); v != nil {
			var err error
			if n, err = decode[farm.Node]("node "+certname, v); err != nil {
				return err
			}
		}
		if fnErr = fn(&n); fnErr != nil {
			return fnErr
		}
		if n.Certname != certname {
			return fmt.Errorf("fn renamed it to %q: %w", n.Certname, farm.ErrInvalid)
		}
		v, err := json.Marshal(n)
		if err != nil {
			return fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid)
		}
		if err := b.Put(key, v); err != nil {
			return err
		}
		out, err = decode[farm.Node]("node "+certname, v) // a copy fn cannot reach
		return err
	})
	if fnErr != nil {
		return farm.Node{}, fnErr
	}
	if err != nil {
		return farm.Node{}, fmt.Errorf("update node %s: %w", certname, s.storageErr(err))
	}
	return out, nil
}

// GetEnvironment returns the record of environment name.
func (s *Store) GetEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	if err := ctx.Err(); err != nil {
		return farm.Environment{}, fmt.Errorf("get environment %s: %w", name, err)
	}
	if err := farm.ValidateEnvironment(name); err != nil {
		return farm.Environment{}, fmt.Errorf("get environment: %w", err)
	}
	e, err := getRecord[farm.Environment](s.db, bucketEnvironments, "environment", name)
	if err != nil {
		return farm.Environment{}, fmt.Errorf("get environment %s: %w", name, s.storageErr(err))
	}
	return e, nil
}

// ListEnvironments returns every environment record, sorted by name.
func (s *Store) ListEnvironments(ctx context.Context) ([]farm.Environment, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	out, err := listRecords[farm.Environment](s.db, bucketEnvironments, "environment")
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", s.storageErr(err))
	}
	return out, nil
}

// PutEnvironment replaces the record of env.Name.
func (s *Store) PutEnvironment(ctx context.Context, env farm.Environment) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put environment %s: %w", env.Name, err)
	}
	if err := farm.ValidateEnvironment(env.Name); err != nil {
		return fmt.Errorf("put environment: %w", err)
	}
	v, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("put environment %s: encode: %v: %w", env.Name, err, farm.ErrInvalid)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEnvironments).Put([]byte(env.Name), v)
	})
	if err != nil {
		return fmt.Errorf("put environment %s: %w", env.Name, s.storageErr(err))
	}
	return nil
}
