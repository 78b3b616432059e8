package farm

import (
	"encoding/json"

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
// space or key order; rows keep their order (a manifest may depend on it).
func QueryResultDigest(result json.RawMessage) Digest {
	return DigestOf(canonjson.Of(result))
}
