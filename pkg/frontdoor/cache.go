package frontdoor

import (
	"container/list"
	"sync"
)

// blobCache keeps recently served immutable blobs (catalogs by digest,
// file metadata answers by code_id) in
// memory, evicting the least recently used past a byte budget.
type blobCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // front = most recent; values are *blobEntry
	items map[string]*list.Element
}

type blobEntry struct {
	key string
	b   []byte
}

func newBlobCache(maxBytes int) *blobCache {
	return &blobCache{max: maxBytes, order: list.New(), items: map[string]*list.Element{}}
}

func (c *blobCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*blobEntry).b, true
}

func (c *blobCache) put(key string, b []byte) {
	if len(b) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; ok {
		return
	}
	c.items[key] = c.order.PushFront(&blobEntry{key: key, b: b})
	c.size += len(b)
	for c.size > c.max {
		old := c.order.Back()
		ent := old.Value.(*blobEntry)
		c.order.Remove(old)
		delete(c.items, ent.key)
		c.size -= len(ent.b)
	}
}
