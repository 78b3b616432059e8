package localstore

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.QueryStore = (*Store)(nil)

// bucketQueries holds the recorded PuppetDB queries, made by the first
// RecordQueries that adds one: QueryState.Key ("ENV|DIGEST") → JSON
// farm.QueryState.
var bucketQueries = []byte("queries")

// RecordQueries adds the queries not yet recorded for environment: a read
// transaction finds them, and only when there are some a write transaction
// adds those still missing.
func (s *Store) RecordQueries(ctx context.Context, environment string, queries []farm.Digest) error {
	if err := farm.CheckRecordQueries(ctx, environment, queries); err != nil {
		return err
	}
	var missing []farm.QueryState
	err := s.db.View(func(tx *bolt.Tx) error {
		missing = missingQueries(tx.Bucket(bucketQueries), environment, queries)
		return nil
	})
	if err != nil || len(missing) == 0 {
		return s.recordErr(environment, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketQueries)
		if err != nil {
			return err
		}
		for _, st := range missing {
			if b.Get([]byte(st.Key())) != nil {
				continue // added since the read
			}
			v, err := json.Marshal(st)
			if err != nil {
				return fmt.Errorf("encode query %s: %v: %w", st.Query, err, farm.ErrInvalid)
			}
			if err := b.Put([]byte(st.Key()), v); err != nil {
				return err
			}
		}
		return nil
	})
	return s.recordErr(environment, err)
}

func (s *Store) recordErr(environment string, err error) error {
	if err != nil {
		return fmt.Errorf("record queries of %s: %w", environment, s.storageErr(err))
	}
	return nil
}

// missingQueries returns the new records of the queries b (nil: none yet)
// does not hold for environment, each once.
func missingQueries(b *bolt.Bucket, environment string, queries []farm.Digest) []farm.QueryState {
	var out []farm.QueryState
	seen := map[farm.Digest]bool{}
	for _, d := range queries {
		st := farm.QueryState{Environment: environment, Query: d, Version: 1}
		if seen[d] || (b != nil && b.Get([]byte(st.Key())) != nil) {
			continue
		}
		seen[d] = true
		out = append(out, st)
	}
	return out
}

// ListQueries reads a page of the queries bucket from l.After on, in one
// read transaction.
func (s *Store) ListQueries(ctx context.Context, l farm.QueryList) (farm.QueryPage, error) {
	if err := farm.CheckListQueries(ctx, l); err != nil {
		return farm.QueryPage{}, err
	}
	var p farm.QueryPage
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketQueries)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek([]byte(l.After)); k != nil; k, v = c.Next() {
			if string(k) <= l.After {
				continue
			}
			if len(p.Queries) == l.PageSize() {
				p.Next = p.Queries[len(p.Queries)-1].Key()
				return nil
			}
			st, err := decode[farm.QueryState]("query "+string(k), v)
			if err != nil {
				return err
			}
			p.Queries = append(p.Queries, st)
		}
		return nil
	})
	if err != nil {
		return farm.QueryPage{}, fmt.Errorf("list queries: %w", s.storageErr(err))
	}
	return p, nil
}

// SetQueryState writes st over its record, in one write transaction, while
// the record is at st.Version.
func (s *Store) SetQueryState(ctx context.Context, st farm.QueryState) (farm.QueryState, error) {
	if err := farm.CheckSetQueryState(ctx, &st); err != nil {
		return farm.QueryState{}, err
	}
	key := []byte(st.Key())
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketQueries)
		var v []byte
		if b != nil {
			v = b.Get(key)
		}
		if v == nil {
			return fmt.Errorf("not recorded: %w", farm.ErrNotFound)
		}
		cur, err := decode[farm.QueryState]("query "+string(key), v)
		if err != nil {
			return err
		}
		if cur.Version != st.Version {
			return fmt.Errorf("version %d, not %d: %w", cur.Version, st.Version, farm.ErrConflict)
		}
		st.Version++
		if v, err = json.Marshal(st); err != nil {
			return fmt.Errorf("encode: %v: %w", err, farm.ErrInvalid)
		}
		return b.Put(key, v)
	})
	if err != nil {
		return farm.QueryState{}, fmt.Errorf("set state of query %s in %s: %w", st.Query, st.Environment, s.storageErr(err))
	}
	return st, nil
}
