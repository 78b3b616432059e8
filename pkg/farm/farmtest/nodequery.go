package farmtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// eventually retries check every 50 ms until it passes, and fails the test
// with its last error after waitLong: for what drivers with eventually
// consistent indexes promise only after a delay.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still after %v: %v", what, waitLong, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// queryAll follows q's pages to the end and checks what every page
// promises: at most the page size, certnames ascending across pages,
// every record matching the query.
func queryAll(t *testing.T, s farm.NodeStore, q farm.NodeQuery) []farm.Node {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	var out []farm.Node
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("query %+v: more than 10000 pages (Next never ends?)", q)
		}
		page, err := s.QueryNodes(ctx, q)
		must(t, fmt.Sprintf("query nodes %+v", q), err)
		if len(page.Nodes) > q.PageSize() {
			t.Fatalf("query %+v: page of %d nodes, limit %d", q, len(page.Nodes), q.PageSize())
		}
		for _, n := range page.Nodes {
			if n.Certname <= q.After || (len(out) > 0 && n.Certname <= out[len(out)-1].Certname) {
				t.Fatalf("query %+v: %s out of certname order (after %q)", q, n.Certname, q.After)
			}
			if !q.Matches(&n) {
				t.Fatalf("query %+v returned %s, which does not match it: %s", q, n.Certname, nodeString(n))
			}
			out = append(out, n)
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

func certnames(nodes []farm.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Certname
	}
	return out
}

// wantQuery waits until q answers exactly want (certnames, any order given).
func wantQuery(t *testing.T, s farm.NodeStore, q farm.NodeQuery, want ...string) []farm.Node {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var got []farm.Node
	eventually(t, fmt.Sprintf("query %s", q.Entry()), func() error {
		got = queryAll(t, s, q)
		if g := certnames(got); !slices.Equal(g, want) {
			return fmt.Errorf("got [%s], want [%s]", strings.Join(g, " "), strings.Join(want, " "))
		}
		return nil
	})
	return got
}

func nodeQueryPages(t *testing.T, s farm.NodeStore) {
	var want []string
	for i := range 23 {
		n := farm.Node{Certname: fmt.Sprintf("n%02d.example.com", i), Environment: "production"}
		putNode(t, s, n)
		want = append(want, n.Certname)
	}
	putNode(t, s, farm.Node{Certname: "other.example.com", Environment: "test"})
	putNode(t, s, farm.Node{Certname: "nowhere.example.com"}) // no environment: in no index
	for _, limit := range []int{1, 5, 23, 0, farm.MaxNodePage} {
		wantQuery(t, s, farm.NodeQuery{Environment: "production", Limit: limit}, want...)
	}
	// A query may start anywhere: after a certname that is not stored too.
	wantQuery(t, s, farm.NodeQuery{Environment: "production", After: "n19.example.com", Limit: 2},
		"n20.example.com", "n21.example.com", "n22.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", After: "n195", Limit: 2},
		"n20.example.com", "n21.example.com", "n22.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "staging"})
}

func nodeQueryTypes(t *testing.T, s farm.NodeStore) {
	nodes := []farm.Node{
		{Certname: "web1.example.com", Environment: "production", ExportTypes: []string{"Sshkey", "Host"}, Collects: []string{"Sshkey"}},
		{Certname: "web2.example.com", Environment: "production", ExportTypes: []string{"Sshkey"}, Collects: []string{"Sshkey", "Nagios_host"}},
		{Certname: "mon1.example.com", Environment: "production", Collects: []string{"Nagios_host", "Host"}},
		{Certname: "test1.example.com", Environment: "test", ExportTypes: []string{"Sshkey"}, Collects: []string{"Sshkey"}},
	}
	for _, n := range nodes {
		putNode(t, s, n)
	}
	got := wantQuery(t, s, farm.NodeQuery{Environment: "production", Exports: "Sshkey"}, "web1.example.com", "web2.example.com")
	wantNode(t, "exporter's record", got[0], nodes[0])
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Exports: "Host"}, "web1.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: "Sshkey"}, "web1.example.com", "web2.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: "Host", Limit: 1}, "mon1.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: "Nagios_host", Limit: 1}, "mon1.example.com", "web2.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "test", Collects: "Sshkey"}, "test1.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Exports: "Nagios_host"})
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Exports: "Concat::Fragment"})
}

// nodeQueryQueries: Query finds the nodes whose catalog made a PuppetDB
// query, per environment, and follows changes of Node.Queries.
func nodeQueryQueries(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	q1 := farm.QueryReadOf([]byte(`"nodes { facts.os.family = 'Debian' }"`), []byte(`[]`)).QueryDigest
	q2 := farm.QueryReadOf([]byte(`["from","resources",["=","type","Sshkey"]]`), []byte(`[]`)).QueryDigest
	q3 := farm.DigestOf([]byte("never asked"))
	nodes := []farm.Node{
		{Certname: "mon1.example.com", Environment: "production", Queries: []farm.Digest{q1, q2}},
		{Certname: "lb1.example.com", Environment: "production", Queries: []farm.Digest{q1}, Collects: []string{"Host"}},
		{Certname: "web1.example.com", Environment: "production", ExportTypes: []string{"Host"}},
		{Certname: "mon2.example.com", Environment: "test", Queries: []farm.Digest{q1}},
	}
	for _, n := range nodes {
		putNode(t, s, n)
	}
	got := wantQuery(t, s, farm.NodeQuery{Environment: "production", Query: q1}, "lb1.example.com", "mon1.example.com")
	wantNode(t, "querier's record", got[1], nodes[0])
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Query: q2, Limit: 1}, "mon1.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "test", Query: q1}, "mon2.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Query: q3})
	// A query digest is not a type: the entries never mix.
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: string(q1)})

	_, err := s.UpdateNode(ctx, "mon1.example.com", func(n *farm.Node) error {
		n.Queries[0] = q3 // changed in place: the driver must still drop q1's entry
		return nil
	})
	must(t, "change queries", err)
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Query: q1}, "lb1.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Query: q3}, "mon1.example.com")
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Query: q2}, "mon1.example.com")
	_, err = s.UpdateNode(ctx, "lb1.example.com", func(n *farm.Node) error {
		n.Queries = nil
		return nil
	})
	must(t, "drop queries", err)
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Query: q1})
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: "Host"}, "lb1.example.com")
}

// nodeQueryFollows: a record's entries move with it when UpdateNode
// changes its environment or types.
func nodeQueryFollows(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "mover.example.com"
	putNode(t, s, farm.Node{Certname: c, Environment: "production", ExportTypes: []string{"Sshkey"}, Collects: []string{"Host"}})
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Exports: "Sshkey"}, c)
	_, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
		n.ExportTypes = []string{"Host"}
		n.Collects = append(n.Collects, "Sshkey")
		return nil
	})
	must(t, "change types", err)
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Exports: "Sshkey"})
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Exports: "Host"}, c)
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: "Sshkey"}, c)
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: "Host"}, c)
	_, err = s.UpdateNode(ctx, c, func(n *farm.Node) error {
		n.Environment = "test"
		return nil
	})
	must(t, "move to test", err)
	wantQuery(t, s, farm.NodeQuery{Environment: "production"})
	wantQuery(t, s, farm.NodeQuery{Environment: "production", Collects: "Host"})
	wantQuery(t, s, farm.NodeQuery{Environment: "test"}, c)
	got := wantQuery(t, s, farm.NodeQuery{Environment: "test", Exports: "Host"}, c)
	if got[0].Environment != "test" {
		t.Fatalf("queried record has environment %q, want test", got[0].Environment)
	}
	// A failed fn moves nothing.
	_, err = s.UpdateNode(ctx, c, func(n *farm.Node) error {
		n.Environment = "production"
		return fmt.Errorf("changed my mind: %w", farm.ErrInvalid)
	})
	wantErrIs(t, "failed move", err, farm.ErrInvalid)
	wantQuery(t, s, farm.NodeQuery{Environment: "test"}, c)
	wantQuery(t, s, farm.NodeQuery{Environment: "production"})
	// Writes that keep the entries keep the node where it is.
	_, err = s.UpdateNode(ctx, c, func(n *farm.Node) error {
		n.RequestSeq++
		return nil
	})
	must(t, "update in place", err)
	wantQuery(t, s, farm.NodeQuery{Environment: "test", Collects: "Sshkey"}, c)
}

func nodeQueryInvalid(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	for _, q := range []farm.NodeQuery{
		{},
		{Environment: "Production"},
		{Environment: "production", Exports: "Sshkey", Collects: "Host"},
		{Environment: "production", Exports: "Ssh|key"},
		{Environment: "production", Query: "not-a-digest"},
		{Environment: "production", Query: farm.DigestOf(nil), Collects: "Host"},
		{Environment: "production", Query: farm.DigestOf(nil), Exports: "Host"},
		{Environment: "production", Limit: -1},
		{Environment: "production", Limit: farm.MaxNodePage + 1},
	} {
		_, err := s.QueryNodes(ctx, q)
		wantErrIs(t, fmt.Sprintf("query %+v", q), err, farm.ErrInvalid)
	}
}
