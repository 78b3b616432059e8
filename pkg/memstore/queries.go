package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.QueryStore = (*Store)(nil)

// queryStore keeps the recorded PuppetDB queries by QueryState.Key. The
// zero value is ready.
type queryStore struct {
	mu     sync.RWMutex
	states map[string]farm.QueryState
}

// RecordQueries adds the queries not yet recorded for environment.
func (s *Store) RecordQueries(ctx context.Context, environment string, queries []farm.Digest) error {
	if err := farm.CheckRecordQueries(ctx, environment, queries); err != nil {
		return err
	}
	qs := &s.queries
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, d := range queries {
		st := farm.QueryState{Environment: environment, Query: d, Version: 1}
		if _, ok := qs.states[st.Key()]; ok {
			continue
		}
		if qs.states == nil {
			qs.states = map[string]farm.QueryState{}
		}
		qs.states[st.Key()] = st
	}
	return nil
}

// ListQueries returns a page of the recorded queries in Key order.
func (s *Store) ListQueries(ctx context.Context, l farm.QueryList) (farm.QueryPage, error) {
	if err := farm.CheckListQueries(ctx, l); err != nil {
		return farm.QueryPage{}, err
	}
	qs := &s.queries
	qs.mu.RLock()
	defer qs.mu.RUnlock()
	var keys []string
	for k := range qs.states {
		if k > l.After {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var p farm.QueryPage
	if len(keys) > l.PageSize() {
		keys = keys[:l.PageSize()]
		p.Next = keys[len(keys)-1]
	}
	for _, k := range keys {
		p.Queries = append(p.Queries, qs.states[k])
	}
	return p, nil
}

// SetQueryState writes st over its record while the record is at
// st.Version.
func (s *Store) SetQueryState(ctx context.Context, st farm.QueryState) (farm.QueryState, error) {
	if err := farm.CheckSetQueryState(ctx, &st); err != nil {
		return farm.QueryState{}, err
	}
	qs := &s.queries
	qs.mu.Lock()
	defer qs.mu.Unlock()
	cur, ok := qs.states[st.Key()]
	switch {
	case !ok:
		return farm.QueryState{}, fmt.Errorf("set state of query %s in %s: not recorded: %w", st.Query, st.Environment, farm.ErrNotFound)
	case cur.Version != st.Version:
		return farm.QueryState{}, fmt.Errorf("set state of query %s in %s: version %d, not %d: %w", st.Query, st.Environment, cur.Version, st.Version, farm.ErrConflict)
	}
	st.Version++
	qs.states[st.Key()] = st
	return st, nil
}
