package farm_test

import (
	"testing"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

func TestQueryReadOf(t *testing.T) {
	tests := []struct {
		name          string
		q1, r1        string
		q2, r2        string
		sameQ, sameR  bool
		wantCanonical string
	}{
		{"white space and key order do not count",
			`[ "from", "nodes", {"b":1, "a":2} ]`, `[{"certname":"a","x":1}]`,
			`["from","nodes",{"a":2,"b":1}]`, "[\n {\"x\":1, \"certname\":\"a\"}\n]",
			true, true, `["from","nodes",{"a":2,"b":1}]`},
		{"a PQL string is its JSON string",
			`"nodes { certname = 'a' }"`, `[]`,
			`"nodes { certname = 'b' }"`, `[]`,
			false, true, `"nodes { certname = 'a' }"`},
		{"row order does not count (PuppetDB sets none without order_by)",
			`"nodes {}"`, `[{"certname":"a"},{"certname":"b"}]`,
			`"nodes {}"`, `[{"certname":"b"},{"certname":"a"}]`,
			true, true, `"nodes {}"`},
		{"a row more counts",
			`"nodes {}"`, `[{"certname":"a"},{"certname":"b"}]`,
			`"nodes {}"`, `[{"certname":"b"},{"certname":"a"},{"certname":"a"}]`,
			true, false, `"nodes {}"`},
		{"an answer that is not a list is digested as it is",
			`"nodes {}"`, `{"error":"x"}`,
			`"nodes {}"`, `{ "error" : "x" }`,
			true, true, `"nodes {}"`},
		{"a number's spelling counts (1 is not 1.0)",
			`"facts {}"`, `[{"value":1}]`,
			`"facts {}"`, `[{"value":1.0}]`,
			true, false, `"facts {}"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := farm.QueryReadOf([]byte(tt.q1), []byte(tt.r1))
			b := farm.QueryReadOf([]byte(tt.q2), []byte(tt.r2))
			if string(a.Query) != tt.wantCanonical {
				t.Errorf("Query = %s, want %s", a.Query, tt.wantCanonical)
			}
			if a.QueryDigest != farm.DigestOf(a.Query) || !a.QueryDigest.Valid() || !a.ResultDigest.Valid() {
				t.Errorf("digests %+v: QueryDigest must be DigestOf(Query), both valid", a)
			}
			if (a.QueryDigest == b.QueryDigest) != tt.sameQ {
				t.Errorf("query digests equal = %v, want %v", a.QueryDigest == b.QueryDigest, tt.sameQ)
			}
			if (a.ResultDigest == b.ResultDigest) != tt.sameR {
				t.Errorf("result digests equal = %v, want %v", a.ResultDigest == b.ResultDigest, tt.sameR)
			}
			if b.ResultDigest != farm.QueryResultDigest([]byte(tt.r2)) {
				t.Errorf("ResultDigest is not QueryResultDigest of the result")
			}
		})
	}
}

func TestNodeQueryByQuery(t *testing.T) {
	d := farm.DigestOf([]byte(`"nodes {}"`))
	n := farm.Node{Certname: "a", Environment: "production", Queries: []farm.Digest{d}, Collects: []string{"Host"}}
	q := farm.NodeQuery{Environment: "production", Query: d}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := "queries|production|" + string(d); q.Entry() != want {
		t.Errorf("Entry() = %q, want %q", q.Entry(), want)
	}
	if !q.Matches(&n) {
		t.Errorf("%+v does not match %+v", q, n)
	}
	if (farm.NodeQuery{Environment: "test", Query: d}).Matches(&n) {
		t.Errorf("a query of another environment matches")
	}
	c := n.IndexCopy()
	n.Queries[0] = farm.DigestOf(nil)
	if c.Queries[0] != d {
		t.Errorf("IndexCopy shares Queries with the node")
	}
}
