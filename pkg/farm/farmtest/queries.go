package farmtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestQueryStore checks that a farm.QueryStore keeps its contract.
// newStore returns a fresh, empty store for each subtest.
func TestQueryStore(t *testing.T, newStore func(t *testing.T) farm.QueryStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.QueryStore)
	}{
		{"EmptyListsNothing", queryEmpty},
		{"RecordAddsNewAtVersion1", queryRecordNew},
		{"RecordLeavesKnownAlone", queryRecordKnown},
		{"RecordRepeatsCountOnce", queryRecordRepeats},
		{"RecordIsPerEnvironment", queryRecordPerEnvironment},
		{"EveryFieldRoundTrips", queryEveryField},
		{"SetOverAnOldVersionIsConflict", querySetConflict},
		{"SetUnknownIsNotFound", querySetUnknown},
		{"ConcurrentSetsOneWins", querySetConcurrent},
		{"ConcurrentRecordsAddOnce", queryRecordConcurrent},
		{"ListInKeyOrderInPages", queryListPages},
		{"ListAfterAnyKey", queryListAfter},
		{"ReturnedRecordsAreCopies", queryCopies},
		{"InvalidInput", queryInvalid},
		{"EndedContextChangesNothing", queryEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// queryDigest is the digest of the i-th test query.
func queryDigest(i int) farm.Digest {
	return farm.DigestOf(fmt.Appendf(nil, `"nodes { certname = 'node%d' }"`, i))
}

func recordQueries(t *testing.T, s farm.QueryStore, env string, qs ...farm.Digest) {
	t.Helper()
	must(t, "record queries in "+env, s.RecordQueries(ctxFor(t, waitLong), env, qs))
}

// listQueries follows the pages of a listing with limit to the end.
func listQueries(t *testing.T, s farm.QueryStore, limit int) []farm.QueryState {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	var out []farm.QueryState
	l := farm.QueryList{Limit: limit}
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			t.Fatal("list queries: no end of pages")
		}
		p, err := s.ListQueries(ctx, l)
		must(t, "list queries", err)
		if len(p.Queries) > l.PageSize() {
			t.Fatalf("a page of %d queries, limit %d", len(p.Queries), l.PageSize())
		}
		out = append(out, p.Queries...)
		if p.Next == "" {
			return out
		}
		if p.Next == l.After {
			t.Fatalf("list queries: Next %q repeats After", p.Next)
		}
		l.After = p.Next
	}
}

// queryState returns the recorded state of (env, q), failing when there is
// none.
func queryState(t *testing.T, s farm.QueryStore, env string, q farm.Digest) farm.QueryState {
	t.Helper()
	for _, st := range listQueries(t, s, 0) {
		if st.Environment == env && st.Query == q {
			return st
		}
	}
	t.Fatalf("query %s of %s is not recorded", q, env)
	return farm.QueryState{}
}

func stateKeys(sts []farm.QueryState) []string {
	out := make([]string, len(sts))
	for i := range sts {
		out[i] = sts[i].Key()
	}
	return out
}

func queryEmpty(t *testing.T, s farm.QueryStore) {
	if got := listQueries(t, s, 0); len(got) != 0 {
		t.Fatalf("an empty store lists %v", stateKeys(got))
	}
}

func queryRecordNew(t *testing.T, s farm.QueryStore) {
	q1, q2 := queryDigest(1), queryDigest(2)
	recordQueries(t, s, "production", q2, q1)
	got := listQueries(t, s, 0)
	want := []farm.QueryState{
		{Environment: "production", Query: q1, Version: 1},
		{Environment: "production", Query: q2, Version: 1},
	}
	slices.SortFunc(want, func(a, b farm.QueryState) int { return cmp.Compare(a.Key(), b.Key()) })
	wantEqual(t, "recorded queries", got, want)
}

func queryRecordKnown(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	q1, q3 := queryDigest(1), queryDigest(3)
	recordQueries(t, s, "production", q1)
	st := queryState(t, s, "production", q1)
	st.Result, st.CheckedAt, st.ChangedAt, st.Recheck = farm.DigestOf([]byte("[]")), base, base.Add(-time.Minute), true
	set, err := s.SetQueryState(ctx, st)
	must(t, "set state", err)
	recordQueries(t, s, "production", q1, q3)
	wantEqual(t, "a known query recorded again", queryState(t, s, "production", q1), set)
	wantEqual(t, "a new query beside it", queryState(t, s, "production", q3),
		farm.QueryState{Environment: "production", Query: q3, Version: 1})
	recordQueries(t, s, "production")
	recordQueries(t, s, "production", nil...)
	if got := listQueries(t, s, 0); len(got) != 2 {
		t.Fatalf("after empty records: %v", stateKeys(got))
	}
}

func queryRecordRepeats(t *testing.T, s farm.QueryStore) {
	q1 := queryDigest(1)
	recordQueries(t, s, "production", q1, q1, q1)
	got := listQueries(t, s, 0)
	wantEqual(t, "a query recorded thrice in one call", got, []farm.QueryState{{Environment: "production", Query: q1, Version: 1}})
}

func queryRecordPerEnvironment(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	q1 := queryDigest(1)
	recordQueries(t, s, "production", q1)
	recordQueries(t, s, "test", q1)
	st := queryState(t, s, "production", q1)
	st.Result = farm.DigestOf([]byte("[1]"))
	_, err := s.SetQueryState(ctx, st)
	must(t, "set production's", err)
	got := listQueries(t, s, 0)
	if want := []string{"production|" + string(q1), "test|" + string(q1)}; !slices.Equal(stateKeys(got), want) {
		t.Fatalf("listed %v, want %v", stateKeys(got), want)
	}
	wantEqual(t, "the other environment's record", got[1], farm.QueryState{Environment: "test", Query: q1, Version: 1})
}

// fullQueryState is a state of (env, q) with every field set (found by
// reflection, so a driver that drops a field added later fails).
func fullQueryState(env string, q farm.Digest, version uint64) farm.QueryState {
	var st farm.QueryState
	fillAll(&st)
	st.Environment, st.Query, st.Version = env, q, version
	return normalize(st)
}

func queryEveryField(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	q1 := queryDigest(1)
	recordQueries(t, s, "production", q1)
	st := fullQueryState("production", q1, 1)
	got, err := s.SetQueryState(ctx, st)
	must(t, "set every field", err)
	want := st
	want.Version = 2
	wantEqual(t, "SetQueryState's answer", got, want)
	wantEqual(t, "listed", queryState(t, s, "production", q1), want)

	// Again over the new version; zero values replace set ones.
	cleared := farm.QueryState{Environment: "production", Query: q1, Version: 2}
	got, err = s.SetQueryState(ctx, cleared)
	must(t, "clear every field", err)
	cleared.Version = 3
	wantEqual(t, "cleared", got, cleared)
	wantEqual(t, "cleared, listed", queryState(t, s, "production", q1), cleared)
}

func querySetConflict(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	q1 := queryDigest(1)
	recordQueries(t, s, "production", q1)
	st := queryState(t, s, "production", q1)
	first := st
	first.Result = farm.DigestOf([]byte("first"))
	kept, err := s.SetQueryState(ctx, first)
	must(t, "first set", err)
	late := st
	late.Result, late.Recheck = farm.DigestOf([]byte("late")), true
	_, err = s.SetQueryState(ctx, late)
	wantErrIs(t, "a set over the version another set replaced", err, farm.ErrConflict)
	late.Version = 7
	_, err = s.SetQueryState(ctx, late)
	wantErrIs(t, "a set over a version never written", err, farm.ErrConflict)
	wantEqual(t, "after the refused sets", queryState(t, s, "production", q1), kept)
}

func querySetUnknown(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	recordQueries(t, s, "production", queryDigest(1))
	_, err := s.SetQueryState(ctx, farm.QueryState{Environment: "production", Query: queryDigest(2), Version: 1})
	wantErrIs(t, "set an unrecorded query", err, farm.ErrNotFound)
	_, err = s.SetQueryState(ctx, farm.QueryState{Environment: "test", Query: queryDigest(1), Version: 1})
	wantErrIs(t, "set a query recorded in another environment", err, farm.ErrNotFound)
	if got := listQueries(t, s, 0); len(got) != 1 {
		t.Fatalf("after sets of unknown queries: %v", stateKeys(got))
	}
}

func querySetConcurrent(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	q1 := queryDigest(1)
	recordQueries(t, s, "production", q1)
	st := queryState(t, s, "production", q1)
	const n = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      []farm.QueryState
		otherErr error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := st
			mine.CheckedAt = base.Add(time.Duration(i) * time.Second)
			got, err := s.SetQueryState(ctx, mine)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, got)
			case !errors.Is(err, farm.ErrConflict):
				otherErr = err
			}
		}()
	}
	wg.Wait()
	if otherErr != nil {
		t.Fatalf("a losing set: %v, want ErrConflict", otherErr)
	}
	if len(won) != 1 {
		t.Fatalf("%d of %d sets of one version succeeded, want exactly 1", len(won), n)
	}
	wantEqual(t, "the winner's state", queryState(t, s, "production", q1), won[0])
}

func queryRecordConcurrent(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	qs := []farm.Digest{queryDigest(1), queryDigest(2), queryDigest(3)}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.RecordQueries(ctx, "production", qs)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		must(t, "concurrent record", err)
	}
	got := listQueries(t, s, 0)
	if len(got) != len(qs) {
		t.Fatalf("recorded %v, want %d queries", stateKeys(got), len(qs))
	}
	for _, st := range got {
		if st.Version != 1 {
			t.Fatalf("query %s at version %d after concurrent records, want 1", st.Query, st.Version)
		}
	}
}

func queryListPages(t *testing.T, s farm.QueryStore) {
	var want []string
	for _, env := range []string{"production", "prod_eu", "test"} {
		var qs []farm.Digest
		for i := range 9 {
			d := queryDigest(i)
			qs = append(qs, d)
			want = append(want, env+"|"+string(d))
		}
		recordQueries(t, s, env, qs...)
	}
	slices.Sort(want)
	for _, limit := range []int{0, 1, 4, 27, farm.MaxQueryPage} {
		if got := stateKeys(listQueries(t, s, limit)); !slices.Equal(got, want) {
			t.Fatalf("limit %d: listed\n %v\nwant\n %v", limit, got, want)
		}
	}
}

func queryListAfter(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	var keys []string
	for i := range 6 {
		recordQueries(t, s, "production", queryDigest(i))
		keys = append(keys, "production|"+string(queryDigest(i)))
	}
	slices.Sort(keys)
	for _, after := range []string{
		keys[2], // a recorded key
		"production|" + string(farm.DigestOf([]byte("not recorded"))),
		"abc|" + string(queryDigest(0)), // before every key
		"zzz|" + string(queryDigest(0)), // after every key
	} {
		var got []string
		l := farm.QueryList{After: after, Limit: 2}
		for {
			p, err := s.ListQueries(ctx, l)
			must(t, "list after "+after, err)
			got = append(got, stateKeys(p.Queries)...)
			if p.Next == "" {
				break
			}
			l.After = p.Next
		}
		var want []string
		for _, k := range keys {
			if k > after {
				want = append(want, k)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("after %s: listed %v, want %v", after, got, want)
		}
	}
}

func queryCopies(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	q1 := queryDigest(1)
	recordQueries(t, s, "production", q1)
	p, err := s.ListQueries(ctx, farm.QueryList{})
	must(t, "list", err)
	p.Queries[0].Result, p.Queries[0].Version = farm.DigestOf([]byte("changed by the caller")), 99
	got, err := s.SetQueryState(ctx, farm.QueryState{Environment: "production", Query: q1, Version: 1, Recheck: true})
	must(t, "set", err)
	got.Recheck = false
	wantEqual(t, "after changes to returned records", queryState(t, s, "production", q1),
		farm.QueryState{Environment: "production", Query: q1, Version: 2, Recheck: true})
}

func queryInvalid(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	good := queryDigest(1)
	for _, tt := range []struct {
		env string
		qs  []farm.Digest
	}{
		{"Production", []farm.Digest{good}},
		{"", []farm.Digest{good}},
		{"production", []farm.Digest{good, "not-a-digest"}},
		{"production", []farm.Digest{""}},
	} {
		wantErrIs(t, fmt.Sprintf("record %v in %q", tt.qs, tt.env), s.RecordQueries(ctx, tt.env, tt.qs), farm.ErrInvalid)
	}
	if got := listQueries(t, s, 0); len(got) != 0 {
		t.Fatalf("invalid records recorded %v", stateKeys(got))
	}
	for _, l := range []farm.QueryList{
		{Limit: -1},
		{Limit: farm.MaxQueryPage + 1},
		{After: "production"},
		{After: "production|not-a-digest"},
		{After: "Production|" + string(good)},
	} {
		_, err := s.ListQueries(ctx, l)
		wantErrIs(t, fmt.Sprintf("list %+v", l), err, farm.ErrInvalid)
	}
	recordQueries(t, s, "production", good)
	for _, st := range []farm.QueryState{
		{Environment: "production", Query: good},
		{Environment: "Production", Query: good, Version: 1},
		{Environment: "production", Query: "not-a-digest", Version: 1},
	} {
		_, err := s.SetQueryState(ctx, st)
		wantErrIs(t, fmt.Sprintf("set %+v", st), err, farm.ErrInvalid)
	}
	wantEqual(t, "after invalid sets", queryState(t, s, "production", good),
		farm.QueryState{Environment: "production", Query: good, Version: 1})
}

func queryEndedContext(t *testing.T, s farm.QueryStore) {
	ctx := ctxFor(t, waitLong)
	q1 := queryDigest(1)
	recordQueries(t, s, "production", q1)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	wantErrIs(t, "record with an ended context", s.RecordQueries(ended, "production", []farm.Digest{queryDigest(2)}), context.Canceled)
	_, err := s.ListQueries(ended, farm.QueryList{})
	wantErrIs(t, "list with an ended context", err, context.Canceled)
	_, err = s.SetQueryState(ended, farm.QueryState{Environment: "production", Query: q1, Version: 1, Recheck: true})
	wantErrIs(t, "set with an ended context", err, context.Canceled)
	wantEqual(t, "after calls with an ended context", listQueries(t, s, 0),
		[]farm.QueryState{{Environment: "production", Query: q1, Version: 1}})
}
