// Package envcache keeps environment records in memory for a few seconds in
// front of a farm.EnvironmentStore, so that a front door reads each
// environment from the store about once per TTL, not four or five times
// per agent run (the pluginsync file_metadatas, the catalog request, the
// file_metadata of each file source).
//
// # What can be stale, and why that is safe
//
// A record read through the cache may be up to TTL old when another
// process changed it (a code deploy or a release run on another front
// door); a change made through this Store is seen at once. Stale records
// serve only decisions that write nothing and file metadata: a check-in
// within TTL of a deploy elsewhere may be served the catalog it has (the
// deploy queued its recompile anyway) and pluginsync files of the code
// before. Whatever writes must read afresh: FreshEnvironment, which
// intake.Intake calls before it records a compile request, and the
// ReadThrough view, for operators' read-modify-writes (deploys, releases).
package envcache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// DefaultTTL is how long a record read is served from memory when New is
// given no TTL.
const DefaultTTL = 10 * time.Second

// Store is a farm.EnvironmentStore answering GetEnvironment from memory for
// TTL after the record was read, one read at a time per environment (the
// requests that find a read in flight wait for it). Records not found and
// errors are not kept. Safe for concurrent use.
type Store struct {
	next farm.EnvironmentStore
	ttl  time.Duration
	now  func() time.Time

	mu     sync.Mutex
	cached map[string]cached
	flight map[string]*call
}

type cached struct {
	env farm.Environment
	at  time.Time // when the read that returned it started (or the put ended)
}

// call is a read of one environment in flight.
type call struct {
	done chan struct{}
	env  farm.Environment
	err  error
}

var _ farm.EnvironmentStore = (*Store)(nil)

// New returns a Store in front of next. A ttl of 0 is DefaultTTL; a
// negative ttl caches nothing (every read goes to next).
func New(next farm.EnvironmentStore, ttl time.Duration) *Store {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	return &Store{next: next, ttl: ttl, now: time.Now, cached: map[string]cached{}, flight: map[string]*call{}}
}

// GetEnvironment returns the record of name as read at most TTL ago.
func (s *Store) GetEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	if s.ttl < 0 {
		return s.next.GetEnvironment(ctx, name)
	}
	s.mu.Lock()
	if c, ok := s.cached[name]; ok && s.now().Sub(c.at) < s.ttl {
		s.mu.Unlock()
		return c.env, nil
	}
	if cl := s.flight[name]; cl != nil {
		s.mu.Unlock()
		select {
		case <-cl.done:
		case <-ctx.Done():
			return farm.Environment{}, ctx.Err()
		}
		if cl.err != nil && ctx.Err() == nil && (errors.Is(cl.err, context.Canceled) || errors.Is(cl.err, context.DeadlineExceeded)) {
			// The request that read gave up; this one has not.
			return s.FreshEnvironment(ctx, name)
		}
		return cl.env, cl.err
	}
	cl := &call{done: make(chan struct{})}
	s.flight[name] = cl
	s.mu.Unlock()

	started := s.now()
	cl.env, cl.err = s.next.GetEnvironment(ctx, name)
	s.mu.Lock()
	delete(s.flight, name)
	if cl.err == nil {
		s.keep(cl.env, started)
	}
	s.mu.Unlock()
	close(cl.done)
	return cl.env, cl.err
}

// FreshEnvironment reads the record of name from the store behind, and
// keeps it for later GetEnvironment calls.
func (s *Store) FreshEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	started := s.now()
	env, err := s.next.GetEnvironment(ctx, name)
	if err == nil && s.ttl >= 0 {
		s.mu.Lock()
		s.keep(env, started)
		s.mu.Unlock()
	}
	return env, err
}

// keep caches env as read at at, unless what is cached is newer. The
// caller holds s.mu.
func (s *Store) keep(env farm.Environment, at time.Time) {
	if c, ok := s.cached[env.Name]; ok && c.at.After(at) {
		return
	}
	s.cached[env.Name] = cached{env: env, at: at}
}

// ListEnvironments lists the records from the store behind (an operator's
// and the agents' rare request) and keeps them.
func (s *Store) ListEnvironments(ctx context.Context) ([]farm.Environment, error) {
	started := s.now()
	envs, err := s.next.ListEnvironments(ctx)
	if err == nil && s.ttl >= 0 {
		s.mu.Lock()
		for _, e := range envs {
			s.keep(e, started)
		}
		s.mu.Unlock()
	}
	return envs, err
}

// PutEnvironment writes env to the store behind; once it has, reads
// through this Store return it.
func (s *Store) PutEnvironment(ctx context.Context, env farm.Environment) error {
	if err := s.next.PutEnvironment(ctx, env); err != nil {
		return err
	}
	if s.ttl >= 0 {
		s.mu.Lock()
		s.cached[env.Name] = cached{env: env, at: s.now()}
		s.mu.Unlock()
	}
	return nil
}

// ReadThrough returns a view of s whose GetEnvironment always reads the
// store behind (FreshEnvironment), for read-modify-writes of environment
// records; its writes and reads still refresh s.
func (s *Store) ReadThrough() farm.EnvironmentStore { return readThrough{s} }

type readThrough struct{ *Store }

func (r readThrough) GetEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	return r.FreshEnvironment(ctx, name)
}
