package frontdoor

import (
	"context"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// An agent run that asks for its node (a first run, or an agent with
// use_last_environment off) reads the node's record twice: for the node
// request, and moments later for the catalog request, which decides
// whether to compile. The front door keeps the record the node request
// read for nodeReuse and hands it, once, to the catalog request of the
// same node (Upload.Node), so that such a run reads the record once.
// An agent keeps its connection (and so its front door) between requests
// that follow within its http_keepalive_timeout; a catalog request that
// reaches another front door reads the record itself.
//
// What can be stale: the record, by at most nodeReuse. Its catalog
// pointer may have moved meanwhile (a compile that finished, a deploy's
// request): the run is then served what it would have been served a few
// seconds earlier, and a compile still pending is waited for with fresh
// reads. Its inputs are only compared: whatever the intake writes (a
// compile request, newer facts) it writes through NodeStore.UpdateNode,
// which reads the record afresh. The node request itself reads the
// record every time.
//
// Between the two requests the agent syncs plugins and runs Facter: a few
// seconds on a quiet host, more than 10 on a busy one (seen with make
// test's eight test binaries on 2 cores, where TestAWSCallsPerRun counted
// the second read). 30 s covers a slow Facter; the staleness above is
// bounded by it.
const nodeReuse = 30 * time.Second

// maxRecentNodes bounds the records kept for reuse; past it, expired
// ones are dropped, and then all (a burst of node requests without
// catalog requests).
const maxRecentNodes = 10000

// runState is what the front door remembers between the requests of agent
// runs (Server.defaults makes it).
type runState struct {
	mu    sync.Mutex
	nodes map[string]recentNode
	facts *blobCache // facts documents by digest
}

type recentNode struct {
	node farm.Node
	at   time.Time
}

// keepNode remembers the record a node request read.
func (rs *runState) keepNode(n farm.Node) {
	now := time.Now()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.nodes == nil {
		rs.nodes = map[string]recentNode{}
	}
	if len(rs.nodes) >= maxRecentNodes {
		for k, v := range rs.nodes {
			if now.Sub(v.at) >= nodeReuse {
				delete(rs.nodes, k)
			}
		}
		if len(rs.nodes) >= maxRecentNodes {
			clear(rs.nodes)
		}
	}
	rs.nodes[n.Certname] = recentNode{node: n, at: now}
}

// takeNode returns the record a node request of certname read less than
// nodeReuse ago, once; nil when there is none.
func (rs *runState) takeNode(certname string) *farm.Node {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.nodes[certname]
	if !ok {
		return nil
	}
	delete(rs.nodes, certname)
	if time.Since(r.at) >= nodeReuse {
		return nil
	}
	return &r.node
}

// factsDoc returns the facts document d, from memory when this front door
// read it lately.
func (s *Server) factsDoc(ctx context.Context, d farm.Digest) ([]byte, error) {
	if b, ok := s.runs.facts.get(string(d)); ok {
		return b, nil
	}
	b, err := s.Content.Get(ctx, farm.SpaceFacts, d)
	if err != nil {
		return nil, err
	}
	s.runs.facts.put(string(d), b)
	return b, nil
}
