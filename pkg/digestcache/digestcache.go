// Package digestcache keeps immutable, content-addressed records (fact-read
// records, export lists, node information) decoded in memory by digest, so
// hot paths do not read and decode them from the content store again.
package digestcache

import (
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// DefaultSize is how many records a Cache holds when Max is 0.
const DefaultSize = 50_000

// Cache holds at most Max decoded records (DefaultSize when 0): when full
// it starts over, since every entry can be read again from the content
// store. The zero value is ready to use; safe for concurrent use. Values
// are shared: callers must not change them.
type Cache[T any] struct {
	Max int

	mu      sync.RWMutex
	entries map[farm.Digest]T
}

// Load returns the record with digest d, if held.
func (c *Cache[T]) Load(d farm.Digest) (T, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.entries[d]
	return v, ok
}

// Store keeps v as the record with digest d.
func (c *Cache[T]) Store(d farm.Digest, v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := c.Max
	if limit <= 0 {
		limit = DefaultSize
	}
	if c.entries == nil || len(c.entries) >= limit {
		c.entries = make(map[farm.Digest]T)
	}
	c.entries[d] = v
}

// Len is how many records the cache holds.
func (c *Cache[T]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
