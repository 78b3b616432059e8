package farm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

const (
	// DefaultQueryPage is the page size of a QueryList with no Limit.
	DefaultQueryPage = 100
	// MaxQueryPage caps QueryList.Limit.
	MaxQueryPage = 1000
)

// QueryState is what the farm keeps of one distinct PuppetDB query that
// compiles in an environment made (QueryRead.QueryDigest; its text is in
// SpaceCatalogs under that digest): what the query refresher last learnt
// of its result. The store keeps Result, CheckedAt, ChangedAt and Recheck
// as the refresher sets them; their meaning is the refresher's
// (pkg/querywatch).
type QueryState struct {
	Environment string `json:"environment"`
	Query       Digest `json:"query"`
	// Result is QueryResultDigest of the latest answer a refresh got; ""
	// until the first.
	Result Digest `json:"result,omitempty"`
	// CheckedAt is when the refresh round that last took the query up
	// started; zero until the first.
	CheckedAt time.Time `json:"checked_at"`
	// ChangedAt is when a refresh last found Result changed.
	ChangedAt time.Time `json:"changed_at"`
	// Recheck says the nodes that made the query are to be checked again
	// once the compiles that ran it before ChangedAt have surely finished.
	Recheck bool `json:"recheck,omitempty"`
	// Version counts the record's writes: 1 when RecordQueries adds it.
	// SetQueryState writes only over the version it is given.
	Version uint64 `json:"version"`
}

// Key is the state's place in ListQueries order, and the Next of a page
// that ends with it: "ENVIRONMENT|QUERY".
func (s *QueryState) Key() string {
	return s.Environment + indexSep + string(s.Query)
}

// QueryText is query (QueryRead.Query) as PuppetDB's query API takes it
// in its query parameter, and as operators read it: a PQL string's text,
// an AST's JSON.
func QueryText(query json.RawMessage) string {
	var pql string
	if err := json.Unmarshal(query, &pql); err == nil {
		return pql
	}
	return string(query)
}

// QueryList asks for a page of recorded queries.
type QueryList struct {
	// After continues a listing: only queries whose Key is greater
	// (QueryPage.Next of the previous page; "" for the first page).
	After string
	// Limit bounds the page: DefaultQueryPage when 0, at most
	// MaxQueryPage.
	Limit int
}

// PageSize is the number of queries a page holds at most.
func (l QueryList) PageSize() int {
	if l.Limit <= 0 {
		return DefaultQueryPage
	}
	return min(l.Limit, MaxQueryPage)
}

// Validate checks a listing: a limit in range, After "" or a Key. The
// error wraps ErrInvalid.
func (l QueryList) Validate() error {
	if l.Limit < 0 || l.Limit > MaxQueryPage {
		return fmt.Errorf("list queries: limit %d is not between 0 and %d: %w", l.Limit, MaxQueryPage, ErrInvalid)
	}
	if l.After == "" {
		return nil
	}
	env, d, ok := strings.Cut(l.After, indexSep)
	if !ok || ValidateEnvironment(env) != nil || !Digest(d).Valid() {
		return fmt.Errorf("list queries: after %q is not a query's key (ENVIRONMENT|DIGEST): %w", l.After, ErrInvalid)
	}
	return nil
}

// QueryPage is one page of recorded queries.
type QueryPage struct {
	Queries []QueryState
	// Next is the After of the next page; "" on the last.
	Next string
}

// QueryStore keeps the distinct PuppetDB queries the farm's compiles made,
// per environment, and what the query refresher last learnt of each, so
// that each is run again once however many nodes made it.
//
// RecordQueries records that a compile in environment made queries (their
// QueryDigests): each not yet recorded for the environment is added as
// QueryState{Environment, Query, Version: 1}; one recorded already is left
// exactly as it is (no field, not its Version, changes). A call whose
// queries are all recorded writes nothing (drivers read before they write,
// so a steady compile costs at most a read; callers keep what they recorded
// in memory to skip even that). Repeated digests count once; an empty list
// does nothing. ErrInvalid for an invalid environment (ValidateEnvironment)
// or a query that is not a digest, and then nothing is recorded. A call
// that fails otherwise may have recorded some of the queries: calling it
// again is harmless.
//
// ListQueries returns every recorded query of every environment, in the
// byte order of their Keys, a page at a time (QueryList);
// no driver reads every record at once. Next is "" on the last page; a
// page may be shorter than the limit while Next is set. After is "" or a
// Key (only greater ones follow). ErrInvalid for a listing that fails
// QueryList.Validate.
//
// SetQueryState writes st's Result, CheckedAt, ChangedAt and Recheck over
// the record of (st.Environment, st.Query) if the record's Version is still
// st.Version, and returns the record as written, its Version one higher.
// A record written since (its Version differs) is ErrConflict, a query not
// recorded ErrNotFound, and neither changes anything; ErrInvalid for an
// invalid environment or query digest, or a Version of 0 (no record has
// it). Of several SetQueryState calls with one version exactly one
// succeeds: several refreshers (fleet tasks) share a store, and the one
// whose write succeeds is the one that took the query up.
//
// Every record returned is the caller's own copy; times keep their instant
// to the nanosecond. The checks of the arguments are CheckRecordQueries,
// CheckListQueries and CheckSetQueryState. A call whose ctx has ended
// returns an error wrapping ctx.Err(), and changes nothing.
//
// Safe for concurrent use, across processes for shared backends.
type QueryStore interface {
	RecordQueries(ctx context.Context, environment string, queries []Digest) error
	ListQueries(ctx context.Context, l QueryList) (QueryPage, error)
	SetQueryState(ctx context.Context, st QueryState) (QueryState, error)
}

// CheckRecordQueries checks a QueryStore.RecordQueries of queries in
// environment (ValidateEnvironment, Digest.Valid).
func CheckRecordQueries(ctx context.Context, environment string, queries []Digest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("record queries of %s: %w", environment, err)
	}
	if err := ValidateEnvironment(environment); err != nil {
		return fmt.Errorf("record queries: %w", err)
	}
	for _, d := range queries {
		if !d.Valid() {
			return fmt.Errorf("record queries of %s: query %q is not a digest: %w", environment, d, ErrInvalid)
		}
	}
	return nil
}

// CheckListQueries checks a QueryStore.ListQueries of l
// (QueryList.Validate).
func CheckListQueries(ctx context.Context, l QueryList) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list queries: %w", err)
	}
	return l.Validate()
}

// CheckSetQueryState checks a QueryStore.SetQueryState of st: a valid
// environment and query digest, a Version other than 0.
func CheckSetQueryState(ctx context.Context, st *QueryState) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("set state of query %s in %s: %w", st.Query, st.Environment, err)
	}
	if err := ValidateEnvironment(st.Environment); err != nil {
		return fmt.Errorf("set query state: %w", err)
	}
	if !st.Query.Valid() {
		return fmt.Errorf("set query state in %s: query %q is not a digest: %w", st.Environment, st.Query, ErrInvalid)
	}
	if st.Version == 0 {
		return fmt.Errorf("set state of query %s in %s: version 0: give the Version the record was read at: %w", st.Query, st.Environment, ErrInvalid)
	}
	return nil
}
