package farmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestPresenceStore checks that a farm.PresenceStore keeps its contract.
// newStore returns a fresh, empty store for each subtest. Expiry is judged
// against the driver's clock: the suite stores records that expire an hour
// from now or expired a minute ago, so no subtest waits for time to pass.
func TestPresenceStore(t *testing.T, newStore func(t *testing.T) farm.PresenceStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.PresenceStore)
	}{
		{"UnknownIsNotFound", presenceUnknown},
		{"EveryFieldRoundTrips", presenceRoundTrip},
		{"SetReplaces", presenceReplace},
		{"ExpiredIsIgnored", presenceExpired},
		{"ClearOnlyOwnTask", presenceClear},
		{"QueryByClientType", presenceQueryType},
		{"QueryByCommonName", presenceQueryCommonName},
		{"QueryPages", presenceQueryPages},
		{"QuerySkipsExpiredAcrossPages", presenceQueryExpiredPages},
		{"QueryFollowsClear", presenceQueryFollows},
		{"ConcurrentSets", presenceConcurrent},
		{"InvalidInput", presenceInvalid},
		{"EndedContextChangesNothing", presenceEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// live returns an expiry an hour from now, with a nanosecond part so
// drivers that drop precision are caught; expired one a minute ago.
func live() time.Time    { return time.Now().Add(time.Hour).Truncate(time.Second).Add(123456789) }
func expired() time.Time { return time.Now().Add(-time.Minute) }

func agentURI(cn string) string { return "pcp://" + cn + "/agent" }

func setPresence(t *testing.T, s farm.PresenceStore, ps ...farm.Presence) {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	for _, p := range ps {
		must(t, "set presence of "+p.URI, s.SetPresence(ctx, p))
	}
}

func presenceString(p farm.Presence) string {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Sprintf("%+v", p)
	}
	return string(b)
}

func wantPresence(t *testing.T, s farm.PresenceStore, want farm.Presence) {
	t.Helper()
	got, err := s.LookupPresence(ctxFor(t, waitLong), want.URI)
	must(t, "look up "+want.URI, err)
	if g, w := normalize(got), normalize(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("look up %s:\n got  %s\n want %s", want.URI, presenceString(g), presenceString(w))
	}
}

func wantNoPresence(t *testing.T, s farm.PresenceStore, uri string) {
	t.Helper()
	_, err := s.LookupPresence(ctxFor(t, waitLong), uri)
	wantErrIs(t, "look up "+uri, err, farm.ErrNotFound)
}

// queryPresenceAll follows q's pages to the end and checks what every page
// promises: at most the page size, URIs ascending across pages, every
// record matching the query and unexpired.
func queryPresenceAll(t *testing.T, s farm.PresenceStore, q farm.PresenceQuery) []farm.Presence {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	var out []farm.Presence
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("query %+v: more than 10000 pages (Next never ends?)", q)
		}
		start := time.Now()
		page, err := s.QueryPresence(ctx, q)
		must(t, fmt.Sprintf("query presence %+v", q), err)
		if len(page.Records) > q.PageSize() {
			t.Fatalf("query %+v: page of %d records, limit %d", q, len(page.Records), q.PageSize())
		}
		for _, p := range page.Records {
			if p.URI <= q.After || (len(out) > 0 && p.URI <= out[len(out)-1].URI) {
				t.Fatalf("query %+v: %s out of URI order (after %q)", q, p.URI, q.After)
			}
			if !q.Matches(p) {
				t.Fatalf("query %+v returned %s, which does not match it", q, presenceString(p))
			}
			if !p.Expires.After(start) {
				t.Fatalf("query %+v returned an expired record %s", q, presenceString(p))
			}
			out = append(out, p)
		}
		if page.Next == "" {
			return out
		}
		if page.Next <= q.After {
			t.Fatalf("query %+v: Next %q does not move past After", q, page.Next)
		}
		q.After = page.Next
	}
}

// wantPresenceQuery waits until q answers exactly the URIs want (any
// order given): indexes may lag (farm.PresenceStore).
func wantPresenceQuery(t *testing.T, s farm.PresenceStore, q farm.PresenceQuery, want ...string) []farm.Presence {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var got []farm.Presence
	eventually(t, fmt.Sprintf("query presence %+v", q), func() error {
		got = queryPresenceAll(t, s, q)
		uris := make([]string, len(got))
		for i, p := range got {
			uris[i] = p.URI
		}
		if !slices.Equal(uris, want) {
			return fmt.Errorf("got [%s], want [%s]", strings.Join(uris, " "), strings.Join(want, " "))
		}
		return nil
	})
	return got
}

func presenceUnknown(t *testing.T, s farm.PresenceStore) {
	setPresence(t, s, farm.Presence{URI: agentURI("known.example.com"), Task: "task-a", Expires: live()})
	wantNoPresence(t, s, agentURI("unknown.example.com"))
	wantNoPresence(t, s, "pcp://known.example.com/controller")
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "controller"})
}

// presenceRoundTrip stores a record with every field set, found by
// reflection, so a field added to farm.Presence later is caught.
func presenceRoundTrip(t *testing.T, s farm.PresenceStore) {
	var p farm.Presence
	fillAll(&p)
	p.URI, p.Task, p.Expires = agentURI("web01.example.com"), "arn:aws:ecs:us-east-1:123456789012:task/farm/0123456789abcdef", live()
	setPresence(t, s, p)
	wantPresence(t, s, p)
	got := wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, p.URI)
	if g, w := normalize(got[0]), normalize(p); !reflect.DeepEqual(g, w) {
		t.Fatalf("queried record:\n got  %s\n want %s", presenceString(g), presenceString(w))
	}
	// The broker's own URI has an empty common name.
	server := farm.Presence{URI: "pcp:///server", Task: "task-a", Expires: live()}
	setPresence(t, s, server)
	wantPresence(t, s, server)
}

func presenceReplace(t *testing.T, s farm.PresenceStore) {
	uri := agentURI("web01.example.com")
	setPresence(t, s, farm.Presence{URI: uri, Task: "task-a", Expires: live()})
	newer := farm.Presence{URI: uri, Task: "task-b", Expires: live().Add(time.Minute)}
	setPresence(t, s, newer)
	wantPresence(t, s, newer)
	got := wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, uri)
	if got[0].Task != "task-b" {
		t.Fatalf("queried record names task %q after the replace, want task-b", got[0].Task)
	}
	// The same task again, with a later expiry (a heartbeat).
	again := farm.Presence{URI: uri, Task: "task-b", Expires: live().Add(2 * time.Minute)}
	setPresence(t, s, again)
	wantPresence(t, s, again)
}

func presenceExpired(t *testing.T, s farm.PresenceStore) {
	uri := agentURI("gone.example.com")
	setPresence(t, s, farm.Presence{URI: uri, Task: "task-a", Expires: expired()})
	wantNoPresence(t, s, uri)
	setPresence(t, s, farm.Presence{URI: agentURI("here.example.com"), Task: "task-a", Expires: live()})
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, agentURI("here.example.com"))
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", CommonName: "gone.example.com"})
	// A live record replaces an expired one, and an expired one a live one.
	p := farm.Presence{URI: uri, Task: "task-b", Expires: live()}
	setPresence(t, s, p)
	wantPresence(t, s, p)
	setPresence(t, s, farm.Presence{URI: uri, Task: "task-c", Expires: expired()})
	wantNoPresence(t, s, uri)
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, agentURI("here.example.com"))
}

func presenceClear(t *testing.T, s farm.PresenceStore) {
	ctx := ctxFor(t, waitLong)
	uri := agentURI("web01.example.com")
	p := farm.Presence{URI: uri, Task: "task-b", Expires: live()}
	setPresence(t, s, p)
	// Task a lost the client to task b: its clear leaves b's record.
	must(t, "clear by another task", s.ClearPresence(ctx, uri, "task-a"))
	wantPresence(t, s, p)
	must(t, "clear by its task", s.ClearPresence(ctx, uri, "task-b"))
	wantNoPresence(t, s, uri)
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"})
	// Clearing what is not there is no error.
	must(t, "clear again", s.ClearPresence(ctx, uri, "task-b"))
	must(t, "clear never set", s.ClearPresence(ctx, agentURI("never.example.com"), "task-b"))
	// A record comes back after a clear.
	setPresence(t, s, p)
	wantPresence(t, s, p)
}

func presenceQueryType(t *testing.T, s farm.PresenceStore) {
	setPresence(t, s,
		farm.Presence{URI: agentURI("b.example.com"), Task: "task-a", Expires: live()},
		farm.Presence{URI: agentURI("a.example.com"), Task: "task-b", Expires: live()},
		farm.Presence{URI: "pcp://a.example.com/controller", Task: "task-a", Expires: live()},
		farm.Presence{URI: "pcp://a.example.com/agentx", Task: "task-a", Expires: live()},
		farm.Presence{URI: "pcp:///server", Task: "task-a", Expires: live()},
	)
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, agentURI("a.example.com"), agentURI("b.example.com"))
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "controller"}, "pcp://a.example.com/controller")
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "server"}, "pcp:///server")
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agen"})
}

func presenceQueryCommonName(t *testing.T, s farm.PresenceStore) {
	setPresence(t, s,
		farm.Presence{URI: agentURI("a.example.com"), Task: "task-a", Expires: live()},
		farm.Presence{URI: agentURI("a.example.com.au"), Task: "task-a", Expires: live()},
		farm.Presence{URI: agentURI("b.example.com"), Task: "task-b", Expires: live()},
		farm.Presence{URI: "pcp://a.example.com/controller", Task: "task-a", Expires: live()},
	)
	got := wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", CommonName: "a.example.com"}, agentURI("a.example.com"))
	if got[0].Task != "task-a" {
		t.Fatalf("queried record names task %q, want task-a", got[0].Task)
	}
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "controller", CommonName: "a.example.com"}, "pcp://a.example.com/controller")
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", CommonName: "c.example.com"})
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", CommonName: "a.example.com", After: agentURI("a.example.com")})
}

func presenceQueryPages(t *testing.T, s farm.PresenceStore) {
	var want []string
	for i := range 23 {
		p := farm.Presence{URI: agentURI(fmt.Sprintf("n%02d.example.com", i)), Task: fmt.Sprintf("task-%d", i%3), Expires: live()}
		setPresence(t, s, p)
		want = append(want, p.URI)
	}
	setPresence(t, s, farm.Presence{URI: "pcp://n99.example.com/controller", Task: "task-a", Expires: live()})
	for _, limit := range []int{1, 5, 23, 0, farm.MaxNodePage} {
		wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", Limit: limit}, want...)
	}
	// A query may start anywhere: after a URI that is not stored too.
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", After: agentURI("n19.example.com"), Limit: 2},
		agentURI("n20.example.com"), agentURI("n21.example.com"), agentURI("n22.example.com"))
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", After: "pcp://n195", Limit: 2},
		agentURI("n20.example.com"), agentURI("n21.example.com"), agentURI("n22.example.com"))
}

// presenceQueryExpiredPages: expired records between live ones are skipped
// however the pages fall (a page may come back short while Next is set).
func presenceQueryExpiredPages(t *testing.T, s farm.PresenceStore) {
	var want []string
	for i := range 12 {
		p := farm.Presence{URI: agentURI(fmt.Sprintf("n%02d.example.com", i)), Task: "task-a", Expires: live()}
		if i%3 != 0 {
			p.Expires = expired()
		} else {
			want = append(want, p.URI)
		}
		setPresence(t, s, p)
	}
	for _, limit := range []int{1, 2, 5, 0} {
		wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent", Limit: limit}, want...)
	}
}

func presenceQueryFollows(t *testing.T, s farm.PresenceStore) {
	ctx := ctxFor(t, waitLong)
	a, b := agentURI("a.example.com"), agentURI("b.example.com")
	setPresence(t, s,
		farm.Presence{URI: a, Task: "task-a", Expires: live()},
		farm.Presence{URI: b, Task: "task-a", Expires: live()},
	)
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, a, b)
	must(t, "clear "+a, s.ClearPresence(ctx, a, "task-a"))
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, b)
	setPresence(t, s, farm.Presence{URI: b, Task: "task-c", Expires: live()})
	got := wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, b)
	if got[0].Task != "task-c" {
		t.Fatalf("queried record names task %q after it moved, want task-c", got[0].Task)
	}
}

// presenceConcurrent: many clients connecting at once, and one client
// reconnecting to several tasks at once: every record is kept, and the
// contested one names one of the tasks.
func presenceConcurrent(t *testing.T, s farm.PresenceStore) {
	ctx := ctxFor(t, waitLong)
	const workers = 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	var want []string
	for i := range workers {
		uri := agentURI(fmt.Sprintf("c%02d.example.com", i))
		want = append(want, uri)
		wg.Go(func() {
			errs <- s.SetPresence(ctx, farm.Presence{URI: uri, Task: "task-a", Expires: live()})
		})
		wg.Go(func() {
			errs <- s.SetPresence(ctx, farm.Presence{URI: "pcp://contested.example.com/controller", Task: fmt.Sprintf("task-%d", i), Expires: live()})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "concurrent set", err)
	}
	wantPresenceQuery(t, s, farm.PresenceQuery{ClientType: "agent"}, want...)
	p, err := s.LookupPresence(ctx, "pcp://contested.example.com/controller")
	must(t, "look up contested", err)
	if !strings.HasPrefix(p.Task, "task-") {
		t.Fatalf("contested record names task %q", p.Task)
	}
}

func presenceInvalid(t *testing.T, s farm.PresenceStore) {
	ctx := ctxFor(t, waitLong)
	for _, uri := range []string{"", "agent", "pcp://a.example.com", "pcp://a.example.com/", "pcp://*/agent",
		"pcp://a.example.com/agent/x", "http://a.example.com/agent", "pcp://a b/agent", "pcp://a.example.com/*"} {
		err := s.SetPresence(ctx, farm.Presence{URI: uri, Task: "task-a", Expires: live()})
		wantErrIs(t, fmt.Sprintf("set presence of %q", uri), err, farm.ErrInvalid)
		_, err = s.LookupPresence(ctx, uri)
		wantErrIs(t, fmt.Sprintf("look up %q", uri), err, farm.ErrInvalid)
		err = s.ClearPresence(ctx, uri, "task-a")
		wantErrIs(t, fmt.Sprintf("clear %q", uri), err, farm.ErrInvalid)
	}
	uri := agentURI("a.example.com")
	wantErrIs(t, "set presence without a task", s.SetPresence(ctx, farm.Presence{URI: uri, Expires: live()}), farm.ErrInvalid)
	wantErrIs(t, "set presence without an expiry", s.SetPresence(ctx, farm.Presence{URI: uri, Task: "task-a"}), farm.ErrInvalid)
	wantErrIs(t, "clear without a task", s.ClearPresence(ctx, uri, ""), farm.ErrInvalid)
	wantNoPresence(t, s, uri)
	for _, q := range []farm.PresenceQuery{
		{},
		{CommonName: "a.example.com"},
		{ClientType: "agent/x"},
		{ClientType: "*"},
		{ClientType: "agent", CommonName: "a/b"},
		{ClientType: "agent", Limit: -1},
		{ClientType: "agent", Limit: farm.MaxNodePage + 1},
	} {
		_, err := s.QueryPresence(ctx, q)
		wantErrIs(t, fmt.Sprintf("query %+v", q), err, farm.ErrInvalid)
	}
}

// presenceEndedContext: a call whose context has ended returns its error,
// and SetPresence and ClearPresence change nothing.
func presenceEndedContext(t *testing.T, s farm.PresenceStore) {
	kept := farm.Presence{URI: agentURI("kept.example.com"), Task: "task-a", Expires: live()}
	setPresence(t, s, kept)
	ended, cancel := context.WithCancel(ctxFor(t, waitLong))
	cancel()
	other := farm.Presence{URI: agentURI("other.example.com"), Task: "task-a", Expires: live()}
	wantErrIs(t, "set presence with an ended context", s.SetPresence(ended, other), context.Canceled)
	wantErrIs(t, "clear presence with an ended context", s.ClearPresence(ended, kept.URI, kept.Task), context.Canceled)
	_, err := s.LookupPresence(ended, kept.URI)
	wantErrIs(t, "look up with an ended context", err, context.Canceled)
	_, err = s.QueryPresence(ended, farm.PresenceQuery{ClientType: "agent"})
	wantErrIs(t, "query with an ended context", err, context.Canceled)
	wantPresence(t, s, kept)
	wantNoPresence(t, s, other.URI)
}
