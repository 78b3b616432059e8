package localstore

import (
	"hash/maphash"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// nodeCacheEntries bounds the decoded node records a Store keeps: about
// 2 KB each (a record of 1.7 KB of JSON decoded), so at most about 40 MB.
// A herd of 10,000 agents fits; beyond that the cache holds a random part
// of the fleet and the rest decode as before.
const nodeCacheEntries = 20_000

// nodeCache remembers node records decoded, keyed by node and checked
// against a hash of the stored bytes, so a read of a record that has not
// changed since it was last read or written costs a hash and a copy
// instead of a JSON decode (the largest cost of a catalog request with
// fresh facts after the facts themselves). It maps bytes to their decoding
// and never needs invalidating: a rewritten record hashes differently.
// Entries are evicted at random when full. Safe for concurrent use.
type nodeCache struct {
	seed maphash.Seed
	max  int

	mu sync.Mutex
	m  map[string]cachedNode
}

type cachedNode struct {
	sum  uint64 // maphash of the stored JSON, with a per-process seed
	size int    // its length
	node farm.Node
}

func newNodeCache(entries int) *nodeCache {
	return &nodeCache{seed: maphash.MakeSeed(), max: entries, m: make(map[string]cachedNode)}
}

// decode returns the node stored as v: a clone of the cached decoding when
// v is the record last seen for certname, a fresh decoding otherwise.
func (c *nodeCache) decode(certname string, v []byte) (farm.Node, error) {
	sum := maphash.Bytes(c.seed, v)
	c.mu.Lock()
	e, ok := c.m[certname]
	c.mu.Unlock()
	if ok && e.sum == sum && e.size == len(v) {
		return e.node.Clone(), nil
	}
	n, err := decode[farm.Node]("node "+certname, v)
	if err != nil {
		return n, err
	}
	c.keep(certname, sum, len(v), n.Clone())
	return n, nil
}

// put records that v encodes n (a record just written), without a decode.
func (c *nodeCache) put(certname string, v []byte, n farm.Node) {
	c.keep(certname, maphash.Bytes(c.seed, v), len(v), n.Clone())
}

func (c *nodeCache) keep(certname string, sum uint64, size int, n farm.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[certname]; !ok && len(c.m) >= c.max {
		for k := range c.m { // map order is random enough to evict by
			delete(c.m, k)
			break
		}
	}
	c.m[certname] = cachedNode{sum: sum, size: size, node: n}
}
