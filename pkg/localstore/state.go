package localstore

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func decodeNode(certname string, v []byte) (farm.Node, error) {
	var n farm.Node
	if err := json.Unmarshal(v, &n); err != nil {
		return farm.Node{}, fmt.Errorf("stored record of node %s is unreadable: %v: %w", certname, err, farm.ErrInvalid)
	}
	return n, nil
}

// GetNode returns the record of certname.
func (s *Store) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	if err := ctx.Err(); err != nil {
		return farm.Node{}, fmt.Errorf("get node %s: %w", certname, err)
	}
	if err := farm.ValidateCertname(certname); err != nil {
		return farm.Node{}, fmt.Errorf("get node: %w", err)
	}
	var n farm.Node
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketNodes).Get([]byte(certname))
		if v == nil {
			return farm.ErrNotFound
		}
		var err error
		n, err = decodeNode(certname, v)
		return err
	})
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
	var out []farm.Node
	err := s.db.View(func(tx *bolt.Tx) error {
		out = []farm.Node{}
		return tx.Bucket(bucketNodes).ForEach(func(k, v []byte) error {
			n, err := decodeNode(string(k), v)
			if err != nil {
				return err
			}
			out = append(out, n)
			return nil
		})
	})
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
			if n, err = decodeNode(certname, v); err != nil {
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
		out, err = decodeNode(certname, v) // a copy fn cannot reach
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
	var e farm.Environment
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketEnvironments).Get([]byte(name))
		if v == nil {
			return farm.ErrNotFound
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("stored record is unreadable: %v: %w", err, farm.ErrInvalid)
		}
		return nil
	})
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
	var out []farm.Environment
	err := s.db.View(func(tx *bolt.Tx) error {
		out = []farm.Environment{}
		return tx.Bucket(bucketEnvironments).ForEach(func(k, v []byte) error {
			var e farm.Environment
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("stored record of environment %s is unreadable: %v: %w", k, err, farm.ErrInvalid)
			}
			out = append(out, e)
			return nil
		})
	})
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
