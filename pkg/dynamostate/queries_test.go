package dynamostate

import (
	"fmt"
	"testing"

	"github.com/compilefarm/compilefarm/pkg/awscalls"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestQueryStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	c := awscalls.New()
	noScans(t, c)
	farmtest.TestQueryStore(t, func(t *testing.T) farm.QueryStore { return countedStore(t, c) })
}

// TestQueryCalls pins the calls of each QueryStore operation (the cost
// model in queries.go): a compile whose queries are all recorded reads and
// writes nothing more than one BatchGetItem.
func TestQueryCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	c := awscalls.New()
	s := countedStore(t, c)
	ctx := testCtx(t)
	_, before := callsSince(c, nil)
	step := func(what, want string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var got string
		got, before = callsSince(c, before)
		if got != want {
			t.Errorf("%s made calls %q, want %q", what, got, want)
		}
	}
	qs := make([]farm.Digest, 150)
	for i := range qs {
		qs[i] = farm.DigestOf(fmt.Appendf(nil, `"nodes { certname = 'n%d' }"`, i))
	}
	step("RecordQueries of 2 new", "BatchGetItem=1 PutItem=2", s.RecordQueries(ctx, "production", qs[:2]))
	step("RecordQueries of 2 known", "BatchGetItem=1", s.RecordQueries(ctx, "production", qs[:2]))
	step("RecordQueries of 150, 2 known", "BatchGetItem=2 PutItem=148", s.RecordQueries(ctx, "production", qs))
	page, err := s.ListQueries(ctx, farm.QueryList{Limit: 100})
	step("ListQueries", "Query=1", err)
	if len(page.Queries) != 100 || page.Next != page.Queries[99].Key() {
		t.Fatalf("first page of 100 of 150: %d queries, next %q", len(page.Queries), page.Next)
	}
	st := page.Queries[0]
	st.Result = farm.DigestOf([]byte("[]"))
	_, err = s.SetQueryState(ctx, st)
	step("SetQueryState", "UpdateItem=1", err)
	_, err = s.SetQueryState(ctx, st)
	if err == nil {
		t.Fatal("a set over an old version succeeded")
	}
	step("SetQueryState over an old version", "GetItem=1 UpdateItem=1", nil)
}

// TestQueryItemLayout pins the queries item's attributes.
func TestQueryItemLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	q := farm.DigestOf([]byte(`"nodes {}"`))
	if err := s.RecordQueries(ctx, "production", []farm.Digest{q}); err != nil {
		t.Fatal(err)
	}
	item := getItem(t, s, s.opts.QueriesTable, queryItemKey("production|"+string(q)))
	if got := attrS(t, item, AttrList); got != QueriesListValue {
		t.Errorf("%s = %q, want %q", AttrList, got, QueriesListValue)
	}
	if got := attrN(t, item, AttrVersion); got != "1" {
		t.Errorf("%s = %s, want 1", AttrVersion, got)
	}
	if got, want := attrS(t, item, AttrRecord), fmt.Sprintf(`{"environment":"production","query":"%s","checked_at":"0001-01-01T00:00:00Z","changed_at":"0001-01-01T00:00:00Z","version":1}`, q); got != want {
		t.Errorf("%s = %s, want %s", AttrRecord, got, want)
	}
}
