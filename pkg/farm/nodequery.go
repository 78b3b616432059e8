package farm

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Page sizes of node queries.
const (
	// DefaultNodePage is the page size of a NodeQuery with no Limit.
	DefaultNodePage = 100
	// MaxNodePage caps NodeQuery.Limit: one DynamoDB BatchGetItem reads
	// 100 items, and a page is what a caller holds in memory at once.
	MaxNodePage = 1000
)

// NodeQuery selects the nodes of one environment, in certname order, a page
// at a time. With Exports (or Collects) set it selects only the nodes whose
// catalog exports (collects) resources of that type: how the farm finds
// exporters and collectors without reading every node. With Query set, only
// the nodes whose catalog's compile made that PuppetDB query (Node.Queries).
type NodeQuery struct {
	Environment string // required
	// At most one of Exports, Collects and Query.
	Exports  string // a resource type ("Sshkey")
	Collects string
	Query    Digest // a QueryRead.QueryDigest
	// After continues a query: only certnames greater than After
	// (NodePage.Next of the previous page; "" for the first page).
	After string
	// Limit bounds the nodes of the page: DefaultNodePage when 0, at most
	// MaxNodePage.
	Limit int
}

// NodePage is one page of a NodeQuery.
type NodePage struct {
	Nodes []Node
	// Next is the After of the next page; "" when there are no more.
	Next string
}

// Index entries: a node record belongs to one entry for its environment,
// one per type it exports, per type it collects and per PuppetDB query it
// made. Drivers keep an index
// from entry to certnames beside the records (bbolt buckets, a DynamoDB
// table with a global secondary index), so that these are the only queries
// over nodes and no caller reads every record.
const indexSep = "|"

func envEntry(env string) string { return "env" + indexSep + env }

// IndexEntries returns the index entries the record belongs to, sorted;
// none for a node without an environment.
func (n *Node) IndexEntries() []string {
	if n.Environment == "" {
		return nil
	}
	out := []string{envEntry(n.Environment)}
	for _, t := range n.ExportTypes {
		out = append(out, "exports"+indexSep+n.Environment+indexSep+t)
	}
	for _, t := range n.Collects {
		out = append(out, "collects"+indexSep+n.Environment+indexSep+t)
	}
	for _, d := range n.Queries {
		out = append(out, queryEntry(n.Environment, d))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func queryEntry(env string, d Digest) string {
	return "queries" + indexSep + env + indexSep + string(d)
}

// IndexCopy returns a copy of n that shares no memory that IndexEntries
// reads: what a driver keeps of a record before NodeStore.UpdateNode's fn,
// which may change the record's lists in place, runs, so that it leaves
// the entries of the record as it was.
func (n Node) IndexCopy() Node {
	n.ExportTypes, n.Collects, n.Queries = slices.Clone(n.ExportTypes), slices.Clone(n.Collects), slices.Clone(n.Queries)
	return n
}

// Validate checks a query: a valid environment, at most one of Exports,
// Collects and Query, a type name without the index separator, a query
// digest that is a digest, a limit in range. The error wraps ErrInvalid.
func (q NodeQuery) Validate() error {
	if err := ValidateEnvironment(q.Environment); err != nil {
		return fmt.Errorf("node query: %w", err)
	}
	if (q.Exports != "" && q.Collects != "") || (q.Query != "" && q.Exports+q.Collects != "") {
		return fmt.Errorf("node query: exports %q, collects %q, query %q: ask for one: %w", q.Exports, q.Collects, q.Query, ErrInvalid)
	}
	if q.Query != "" && !q.Query.Valid() {
		return fmt.Errorf("node query: query %q is not a digest: %w", q.Query, ErrInvalid)
	}
	if t := q.Exports + q.Collects; strings.Contains(t, indexSep) || len(t) > 255 {
		return fmt.Errorf("node query: %q is not a resource type: %w", t, ErrInvalid)
	}
	if q.Limit < 0 || q.Limit > MaxNodePage {
		return fmt.Errorf("node query: limit %d is not between 0 and %d: %w", q.Limit, MaxNodePage, ErrInvalid)
	}
	return nil
}

// Entry is the index entry the query reads.
func (q NodeQuery) Entry() string {
	switch {
	case q.Exports != "":
		return "exports" + indexSep + q.Environment + indexSep + q.Exports
	case q.Collects != "":
		return "collects" + indexSep + q.Environment + indexSep + q.Collects
	case q.Query != "":
		return queryEntry(q.Environment, q.Query)
	}
	return envEntry(q.Environment)
}

// PageSize is the query's Limit with the default applied.
func (q NodeQuery) PageSize() int {
	if q.Limit <= 0 {
		return DefaultNodePage
	}
	return min(q.Limit, MaxNodePage)
}

// Matches reports whether n belongs in the query's answer: drivers whose
// index may lag behind the records check each record they read with it.
func (q NodeQuery) Matches(n *Node) bool {
	return slices.Contains(n.IndexEntries(), q.Entry())
}

// NodeQuerier is the one method of NodeStore that EachNode needs.
type NodeQuerier interface {
	QueryNodes(ctx context.Context, q NodeQuery) (NodePage, error)
}

// EachNode calls fn on every node q selects, page by page (q.After and
// q.Limit set where to start and the page size): memory is bounded by one
// page. It stops at the first error, fn's returned as is.
func EachNode(ctx context.Context, s NodeQuerier, q NodeQuery, fn func(Node) error) error {
	for {
		page, err := s.QueryNodes(ctx, q)
		if err != nil {
			return err
		}
		for _, n := range page.Nodes {
			if err := fn(n); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		q.After = page.Next
	}
}
