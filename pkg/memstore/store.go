// Package memstore holds in-memory drivers of the farm's contracts: Store
// (content, names, nodes, environments, PCP presence, task inboxes, run
// jobs, recorded PuppetDB queries), Queue, Outbox and the CA's key
// (CAKey). They keep nothing across a restart and exist for fast unit
// tests of other packages; they pass the full contract suites of
// pkg/farm/farmtest, including the embedded queue's collapsing and node
// exclusivity.
package memstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var (
	_ farm.ContentStore     = (*Store)(nil)
	_ farm.NodeStore        = (*Store)(nil)
	_ farm.EnvironmentStore = (*Store)(nil)
	_ farm.NameStore        = (*Store)(nil)
)

// Store keeps content, names, node records, environment records, PCP
// presence, task inboxes, run jobs and recorded PuppetDB queries in memory.
// The zero value is not usable; call New. Safe for concurrent use.
type Store struct {
	mu      sync.RWMutex
	content map[farm.Space]map[farm.Digest][]byte
	retired map[farm.Space]map[farm.Digest]bool // Retire's marks (retire.go), under mu

	nodeMu sync.RWMutex
	nodes  map[string][]byte              // JSON
	index  map[string]map[string]struct{} // farm index entry -> certnames
	// reports are RecordReport's summaries (report.go), under their own lock.
	reports reportStore

	envMu sync.RWMutex
	envs  map[string][]byte // JSON

	nameMu sync.RWMutex
	names  map[farm.Space]map[string]farm.Digest // made by the first PutName

	// PCP presence (presence.go), task inboxes (inbox.go) and run jobs
	// (jobs.go), each under its own lock.
	presence presenceStore
	inboxes  inboxes
	jobs     jobStore
	// Recorded PuppetDB queries (queries.go), under their own lock.
	queries queryStore
}

// New returns an empty store.
func New() *Store {
	return &Store{
		content: map[farm.Space]map[farm.Digest][]byte{},
		retired: map[farm.Space]map[farm.Digest]bool{},
		nodes:   map[string][]byte{},
		index:   map[string]map[string]struct{}{},
		envs:    map[string][]byte{},
	}
}

// Put stores a copy of data in space and returns its digest.
func (s *Store) Put(ctx context.Context, space farm.Space, data []byte) (farm.Digest, error) {
	d, _, err := s.PutNew(ctx, space, data)
	return d, err
}

// Get returns a copy of the blob with digest d in space, verified against d.
func (s *Store) Get(ctx context.Context, space farm.Space, d farm.Digest) ([]byte, error) {
	if err := farm.CheckContentGet(ctx, space, d); err != nil {
		return nil, err
	}
	s.mu.RLock()
	b, ok := s.content[space][d]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("get content %s/%s: %w", space, d, farm.ErrNotFound)
	}
	if got := farm.DigestOf(b); got != d {
		return nil, fmt.Errorf("get content %s/%s: stored bytes hash to %s: %w", space, d, got, farm.ErrInvalid)
	}
	if b == nil {
		return []byte{}, nil
	}
	return bytes.Clone(b), nil
}

// Has reports whether space holds a blob with digest d.
func (s *Store) Has(ctx context.Context, space farm.Space, d farm.Digest) (bool, error) {
	if err := farm.CheckContentHas(ctx, space, d); err != nil {
		return false, err
	}
	s.mu.RLock()
	_, ok := s.content[space][d]
	s.mu.RUnlock()
	return ok, nil
}

// Node and environment records are kept JSON encoded, as the persistent
// drivers keep them: no caller shares a stored record, new fields of the farm
// types need no change here, and what does not encode is refused the same way.

// decode reads back a record this store encoded.
func decode[T any](b []byte) T {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		panic(fmt.Sprintf("memstore: decode a %T this store encoded: %v", v, err))
	}
	return v
}

// lookup decodes the record at key in m, read under mu; false when m has
// none.
func lookup[T any](mu *sync.RWMutex, m map[string][]byte, key string) (T, bool) {
	mu.RLock()
	b, ok := m[key]
	mu.RUnlock()
	if !ok {
		var zero T
		return zero, false
	}
	return decode[T](b), true
}

// sortedPage sorts keys and keeps the first size of them: one page of a
// listing by key, and the cursor of the next page ("" after the last).
func sortedPage(keys []string, size int) ([]string, string) {
	sort.Strings(keys)
	if len(keys) <= size {
		return keys, ""
	}
	keys = keys[:size]
	return keys, keys[size-1]
}

// GetNode returns the record of certname.
func (s *Store) GetNode(ctx context.Context, certname string) (farm.Node, error) {
	if err := farm.CheckGetNode(ctx, certname); err != nil {
		return farm.Node{}, err
	}
	n, ok := lookup[farm.Node](&s.nodeMu, s.nodes, certname)
	if !ok {
		return farm.Node{}, fmt.Errorf("get node %s: %w", certname, farm.ErrNotFound)
	}
	return s.reports.overlay(n), nil
}

// QueryNodes answers q from the store's index of entries to certnames. It
// sorts the entry's members for each page: a driver for tests, not for
// 100,000 nodes.
func (s *Store) QueryNodes(ctx context.Context, q farm.NodeQuery) (farm.NodePage, error) {
	if err := farm.CheckQueryNodes(ctx, q); err != nil {
		return farm.NodePage{}, err
	}
	s.nodeMu.RLock()
	defer s.nodeMu.RUnlock()
	var names []string
	for c := range s.index[q.Entry()] {
		if c > q.After {
			names = append(names, c)
		}
	}
	var page farm.NodePage
	names, page.Next = sortedPage(names, q.PageSize())
	page.Nodes = make([]farm.Node, 0, len(names))
	for _, c := range names {
		page.Nodes = append(page.Nodes, s.reports.overlay(decode[farm.Node](s.nodes[c])))
	}
	return page, nil
}

// reindex moves certname from the index entries of old to those of n.
// The caller holds nodeMu for writing.
func (s *Store) reindex(old, n *farm.Node) {
	for _, e := range old.IndexEntries() {
		delete(s.index[e], old.Certname)
		if len(s.index[e]) == 0 {
			delete(s.index, e)
		}
	}
	for _, e := range n.IndexEntries() {
		if s.index[e] == nil {
			s.index[e] = map[string]struct{}{}
		}
		s.index[e][n.Certname] = struct{}{}
	}
}

// UpdateNode runs fn on a copy of certname's record under the store's lock
// and stores the result unless fn fails; fn's error is returned as is. fn
// must not call back into the store. fn may not change the certname
// (ErrInvalid).
func (s *Store) UpdateNode(ctx context.Context, certname string, fn func(*farm.Node) error) (farm.Node, error) {
	if err := farm.CheckUpdateNode(ctx, certname); err != nil {
		return farm.Node{}, err
	}
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	n := farm.Node{Certname: certname}
	if b, ok := s.nodes[certname]; ok {
		n = decode[farm.Node](b)
	}
	old := n.IndexCopy()
	if err := fn(&n); err != nil {
		return farm.Node{}, err
	}
	if err := farm.CheckUpdatedNode(certname, &n); err != nil {
		return farm.Node{}, err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return farm.Node{}, fmt.Errorf("update node %s: encode: %v: %w", certname, err, farm.ErrInvalid)
	}
	s.nodes[certname] = b
	s.reindex(&old, &n)
	return decode[farm.Node](b), nil
}

// GetEnvironment returns the record of environment name.
func (s *Store) GetEnvironment(ctx context.Context, name string) (farm.Environment, error) {
	if err := farm.CheckGetEnvironment(ctx, name); err != nil {
		return farm.Environment{}, err
	}
	env, ok := lookup[farm.Environment](&s.envMu, s.envs, name)
	if !ok {
		return farm.Environment{}, fmt.Errorf("get environment %s: %w", name, farm.ErrNotFound)
	}
	return env, nil
}

// ListEnvironments returns every environment record, sorted by name.
func (s *Store) ListEnvironments(ctx context.Context) ([]farm.Environment, error) {
	if err := farm.CheckListEnvironments(ctx); err != nil {
		return nil, err
	}
	s.envMu.RLock()
	out := make([]farm.Environment, 0, len(s.envs))
	for _, b := range s.envs {
		out = append(out, decode[farm.Environment](b))
	}
	s.envMu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// PutEnvironment replaces the record of env.Name.
func (s *Store) PutEnvironment(ctx context.Context, env farm.Environment) error {
	if err := farm.CheckPutEnvironment(ctx, &env); err != nil {
		return err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("put environment %s: encode: %v: %w", env.Name, err, farm.ErrInvalid)
	}
	s.envMu.Lock()
	s.envs[env.Name] = b
	s.envMu.Unlock()
	return nil
}
