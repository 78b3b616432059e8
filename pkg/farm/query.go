package farm

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/compilefarm/compilefarm/internal/canonjson"
)

// QueryRead is one PuppetDB query a compile made (puppetdb_query(), or an
// exported-resource collector when storeconfigs reads PuppetDB) and what it
// got: the catalog depends on its result as it depends on the facts it
// read. The compile's read record (facts.ReadRecord.Queries) holds them,
// the node record names their QueryDigests (Node.Queries), and the query
// texts are in SpaceCatalogs by QueryDigest, so that the farm can run each
// distinct query again and recompile the nodes whose result changed.
type QueryRead struct {
	// Query is the query in canonical JSON (canonjson): a PQL string, or
	// an AST array; sent as is in the body {"query": Query} of
	// POST /pdb/query/v4, it asks PuppetDB the same question again.
	Query json.RawMessage `json:"query"`
	// QueryDigest is DigestOf(Query).
	QueryDigest Digest `json:"query_digest"`
	// ResultDigest is QueryResultDigest of PuppetDB's answer.
	ResultDigest Digest `json:"result_digest"`
}

// QueryReadOf returns the record of query (a PQL string or an AST array as
// JSON, in any encoding) answered with result (PuppetDB's JSON body).
func QueryReadOf(query, result json.RawMessage) QueryRead {
	q := canonjson.Of(query)
	return QueryRead{Query: q, QueryDigest: DigestOf(q), ResultDigest: QueryResultDigest(result)}
}

// QueryResultDigest is the digest of a PuppetDB query result (its JSON
// body) in canonical JSON: equal for equal results whatever their white
// space, key order or row order. PuppetDB returns the rows of a query
// without order_by in no set order (the same two rows came back both ways
// between two calls), so a digest that kept the order would recompile
// nodes for nothing; a query with order_by changes its digest when its
// rows change, in which order they come is a function of them. A body
// that is not a JSON array is digested as it is, canonically.
func QueryResultDigest(result json.RawMessage) Digest {
	var rows []json.RawMessage
	if err := json.Unmarshal(result, &rows); err != nil {
		return DigestOf(canonjson.Of(result))
	}
	canon := make([][]byte, len(rows))
	for i, r := range rows {
		canon[i] = canonjson.Of(r)
	}
	slices.SortFunc(canon, bytes.Compare)
	return DigestOf(append(append([]byte("["), bytes.Join(canon, []byte(","))...), ']'))
}
