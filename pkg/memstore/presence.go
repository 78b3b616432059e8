package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.PresenceStore = (*Store)(nil)

// presenceStore keeps the PCP presence records, indexed by client type.
// The zero value is ready.
type presenceStore struct {
	mu     sync.RWMutex
	byURI  map[string]farm.Presence
	byType map[string]map[string]struct{} // client type -> URIs
}

// SetPresence records p, replacing any record of p.URI.
func (s *Store) SetPresence(ctx context.Context, p farm.Presence) error {
	if err := farm.CheckSetPresence(ctx, &p); err != nil {
		return err
	}
	p.Expires = p.Expires.UTC().Round(0)
	ps := &s.presence
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.byURI == nil {
		ps.byURI = map[string]farm.Presence{}
		ps.byType = map[string]map[string]struct{}{}
	}
	ps.byURI[p.URI] = p
	typ := p.ClientType()
	if ps.byType[typ] == nil {
		ps.byType[typ] = map[string]struct{}{}
	}
	ps.byType[typ][p.URI] = struct{}{}
	return nil
}

// ClearPresence removes the record of uri while it names task.
func (s *Store) ClearPresence(ctx context.Context, uri, task string) error {
	if err := farm.CheckClearPresence(ctx, uri, task); err != nil {
		return err
	}
	ps := &s.presence
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.byURI[uri]; ok && p.Task == task {
		delete(ps.byURI, uri)
		typ := p.ClientType()
		delete(ps.byType[typ], uri)
		if len(ps.byType[typ]) == 0 {
			delete(ps.byType, typ)
		}
	}
	return nil
}

// LookupPresence returns the unexpired record of uri.
func (s *Store) LookupPresence(ctx context.Context, uri string) (farm.Presence, error) {
	if err := farm.CheckLookupPresence(ctx, uri); err != nil {
		return farm.Presence{}, err
	}
	now := time.Now()
	ps := &s.presence
	ps.mu.RLock()
	p, ok := ps.byURI[uri]
	ps.mu.RUnlock()
	if !ok || !p.Expires.After(now) {
		return farm.Presence{}, fmt.Errorf("look up presence of %s: %w", uri, farm.ErrNotFound)
	}
	return p, nil
}

// QueryPresence answers q from the index by client type. It sorts the
// type's URIs for each page: a driver for tests, not for 100,000 agents.
func (s *Store) QueryPresence(ctx context.Context, q farm.PresenceQuery) (farm.PresencePage, error) {
	if err := farm.CheckQueryPresence(ctx, q); err != nil {
		return farm.PresencePage{}, err
	}
	now := time.Now()
	ps := &s.presence
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	var uris []string
	for uri := range ps.byType[q.ClientType] {
		if p := ps.byURI[uri]; q.Matches(p) && p.Expires.After(now) {
			uris = append(uris, uri)
		}
	}
	var page farm.PresencePage
	uris, page.Next = sortedPage(uris, q.PageSize())
	for _, uri := range uris {
		page.Records = append(page.Records, ps.byURI[uri])
	}
	return page, nil
}
