package compiler

import (
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// recordCache keeps immutable, content-addressed records (fact-read
// records, export lists) decoded in memory. It holds at most max entries:
// when full it starts over, since every entry can be read again from the
// content store. Safe for concurrent use.
type recordCache[T any] struct {
	mu      sync.RWMutex
	max     int
	entries map[farm.Digest]T
}

const defaultRecordCacheSize = 50_000

func (c *recordCache[T]) Load(d farm.Digest) (T, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.entries[d]
	return v, ok
}

func (c *recordCache[T]) Store(d farm.Digest, v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := c.max
	if limit <= 0 {
		limit = defaultRecordCacheSize
	}
	if c.entries == nil || len(c.entries) >= limit {
		c.entries = make(map[farm.Digest]T)
	}
	c.entries[d] = v
}
