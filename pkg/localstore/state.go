package localstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

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
	if err := farm.CheckGetNode(ctx, certname); err != nil {
		return farm.Node{}, err
	}
	var n farm.Node
	err := s.db.View(func(tx *bolt.Tx) error { // one transaction: the record and its report
		v := tx.Bucket(bucketNodes).Get([]byte(certname))
		if v == nil {
			return farm.ErrNotFound
		}
		var err error
		if n, err = s.nodes.decode(certname, v); err != nil {
			return err
		}
		return overlayReport(tx, &n)
	})
	if err != nil {
		return farm.Node{}, fmt.Errorf("get node %s: %w", certname, s.storageErr(err))
	}
	return n, nil
}

// QueryNodes answers q from the node_index bucket: a cursor seek to the
// entry and one record read per node returned, in one read transaction.
func (s *Store) QueryNodes(ctx context.Context, q farm.NodeQuery) (farm.NodePage, error) {
	if err := farm.CheckQueryNodes(ctx, q); err != nil {
		return farm.NodePage{}, err
	}
	page := farm.NodePage{Nodes: []farm.Node{}}
	prefix := append([]byte(q.Entry()), 0)
	err := s.db.View(func(tx *bolt.Tx) error {
		nodes := tx.Bucket(bucketNodes)
		c := tx.Bucket(bucketNodeIndex).Cursor()
		k, _ := c.Seek(append(slices.Clone(prefix), q.After...))
		for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			certname := string(k[len(prefix):])
			if certname <= q.After {
				continue
			}
			if len(page.Nodes) == q.PageSize() {
				page.Next = page.Nodes[len(page.Nodes)-1].Certname
				return nil
			}
			v := nodes.Get([]byte(certname))
			if v == nil {
				return fmt.Errorf("index entry %q names node %s, which has no record: %w", q.Entry(), certname, farm.ErrInvalid)
			}
			n, err := decode[farm.Node]("node "+certname, v)
			if err == nil {
				err = overlayReport(tx, &n)
			}
			if err != nil {
				return err
			}
			page.Nodes = append(page.Nodes, n)
		}
		return nil
	})
	if err != nil {
		return farm.NodePage{}, fmt.Errorf("query nodes %s: %w", q.Entry(), s.storageErr(err))
	}
	return page, nil
}

func indexKey(entry, certname string) []byte {
	return append(append([]byte(entry), 0), certname...)
}

// reindex moves the node from the index entries of old to those of n,
// inside the write transaction that stores n.
func reindex(tx *bolt.Tx, old, n *farm.Node) error {
	b := tx.Bucket(bucketNodeIndex)
	was, is := old.IndexEntries(), n.IndexEntries()
	for _, e := range was {
		if !slices.Contains(is, e) {
			if err := b.Delete(indexKey(e, old.Certname)); err != nil {
				return err
			}
		}
	}
	for _, e := range is {
		if !slices.Contains(was, e) {
			if err := b.Put(indexKey(e, n.Certname), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildNodeIndex indexes every node record: the one-time upgrade of a
// state.db written before the index existed.
func buildNodeIndex(tx *bolt.Tx) (int, error) {
	count := 0
	err := tx.Bucket(bucketNodes).ForEach(func(k, v []byte) error {
		n, err := decode[farm.Node]("node "+string(k), v)
		if err != nil {
			return err
		}
		count++
		return reindex(tx, &farm.Node{Certname: n.Certname}, &n)
	})
	return count, err
}

// UpdateNode runs fn on certname's record inside one bbolt write
// transaction and stores the result unless fn fails; fn's error is returned
// as is. fn runs while the database is locked for writing, so it must be
// quick and must not call back into the store. fn may not change the
// certname (farm.ErrInvalid).
func (s *Store) UpdateNode(ctx context.Context, certname string, fn func(*farm.Node) error) (farm.Node, error) {
	if err := farm.CheckUpdateNode(ctx, certname); err != nil {
		return farm.Node{}, err
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
			if n, err = s.nodes.decode(certname, v); err != nil {
				return err
			}
		}
		old := n.IndexCopy()
		if fnErr = fn(&n); fnErr != nil {
			return fnErr
		}
		if fnErr = farm.CheckUpdatedNode(certname, &n); fnErr != nil {
			return fnErr
		}
		v, err := json.Marshal(n)
		if err != nil {
			return fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid)
		}
		if err := b.Put(key, v); err != nil {
			return err
		}
		if err := reindex(tx, &old, &n); err != nil {
			return err
		}
		if out, err = decode[farm.Node]("node "+certname, v); err != nil { // a copy fn cannot reach
			return err
		}
		s.nodes.put(certname, v, out) // kept even if the commit fails: v decodes to out regardless
		return nil
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
	if err := farm.CheckGetEnvironment(ctx, name); err != nil {
		return farm.Environment{}, err
	}
	e, err := getRecord[farm.Environment](s.db, bucketEnvironments, "environment", name)
	if err != nil {
		return farm.Environment{}, fmt.Errorf("get environment %s: %w", name, s.storageErr(err))
	}
	return e, nil
}

// ListEnvironments returns every environment record, sorted by name.
func (s *Store) ListEnvironments(ctx context.Context) ([]farm.Environment, error) {
	if err := farm.CheckListEnvironments(ctx); err != nil {
		return nil, err
	}
	out, err := listRecords[farm.Environment](s.db, bucketEnvironments, "environment")
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", s.storageErr(err))
	}
	return out, nil
}

// PutEnvironment replaces the record of env.Name.
func (s *Store) PutEnvironment(ctx context.Context, env farm.Environment) error {
	if err := farm.CheckPutEnvironment(ctx, &env); err != nil {
		return err
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
