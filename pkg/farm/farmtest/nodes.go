package farmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestNodeStore checks that a farm.NodeStore keeps its contract.
// newStore returns a fresh, empty store for each subtest.
func TestNodeStore(t *testing.T, newStore func(t *testing.T) farm.NodeStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.NodeStore)
	}{
		{"UnknownNodeIsNotFound", nodeUnknown},
		{"UpdateCreatesFromZeroNode", nodeCreate},
		{"UpdateSeesCurrentRecord", nodeUpdateSeesCurrent},
		{"AllFieldsRoundTrip", nodeRoundTrip},
		{"EveryFieldRoundTrips", nodeEveryField},
		{"FnErrorWritesNothingAndIsReturnedAsIs", nodeFnError},
		{"FnErrorOnNewNodeCreatesNothing", nodeFnErrorNew},
		{"SequenceCheckConflict", nodeSequenceCheck},
		{"ReturnedNodesAreCopies", nodeCopies},
		{"ConcurrentIncrementsAreAtomic", nodeConcurrentIncrements},
		{"QueryByEnvironment", nodeList},
		{"QueryPages", nodeQueryPages},
		{"QueryExportersAndCollectors", nodeQueryTypes},
		{"QueryByPuppetDBQuery", nodeQueryQueries},
		{"QueryFollowsChanges", nodeQueryFollows},
		{"QueryInvalid", nodeQueryInvalid},
		{"InvalidCertnameIsInvalid", nodeInvalidCertname},
		{"FnCannotRenameNode", nodeRename},
		{"EndedContextChangesNothing", nodeEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// fullNode has every field set, pointers included, with nanosecond times.
func fullNode(certname string) farm.Node {
	return farm.Node{
		Certname:       certname,
		Environment:    "production",
		FactsDigest:    farm.DigestOf([]byte("facts " + certname)),
		RelevantDigest: farm.DigestOf([]byte("relevant " + certname)),
		FactsAt:        base,
		RequestSeq:     7,
		Requested: &farm.CompileRequest{
			Seq:            7,
			Environment:    "production",
			CodeID:         "code-7",
			FactsDigest:    farm.DigestOf([]byte("facts " + certname)),
			RelevantDigest: farm.DigestOf([]byte("relevant " + certname)),
			Reason:         farm.ReasonFactsChanged,
			Lane:           farm.LaneUrgent,
			At:             base.Add(time.Second),
			Changes: []farm.FactChange{
				{Path: []string{"os", "release", "full"}, Kind: "value", Old: json.RawMessage(`"12.10"`), New: json.RawMessage(`"12.11"`)},
				{Path: []string{"cf_role"}, Kind: "value", Old: json.RawMessage(`"web"`), NewMissing: true},
			},
			Cause: &farm.RequestCause{Input: farm.CauseRelevant, Old: "old-digest", New: "new-digest", Note: "a note"},
		},
		Catalog: &farm.CatalogRef{
			Digest:      farm.DigestOf([]byte("catalog")),
			GzipDigest:  farm.DigestOf([]byte("catalog.gz")),
			CodeID:      string(farm.DigestOf([]byte("code"))),
			FactsDigest: farm.DigestOf([]byte("facts " + certname)),
			Seq:         6,
			CompiledAt:  base.Add(1500 * time.Millisecond),
			Duration:    1234567 * time.Microsecond,
		},
		Compile: &farm.CompileStatus{
			Result:   farm.ResultFailed,
			Error:    "Evaluation Error: Unknown variable '$foo' (file: site.pp, line: 3)",
			Seq:      7,
			CodeID:   "code-7",
			At:       base.Add(time.Minute),
			Duration: 987 * time.Millisecond,
		},
		Report: &farm.ReportSummary{
			Digest:          farm.DigestOf([]byte("report")),
			Status:          "changed",
			At:              base.Add(time.Hour),
			ConfigVersion:   "1715938212",
			CatalogUUID:     "0b9f3a52-6f3c-4c44-9d1e-2f0b1b0e7a11",
			TransactionUUID: "a8d27f5e-2a7b-4c7b-9d7e-0c1e8f0f3c22",
		},
	}
}

// normNode returns a deep copy of n with comparable times.
func normNode(n farm.Node) farm.Node { return normalize(n) }

func wantNode(t *testing.T, what string, got, want farm.Node) {
	t.Helper()
	if g, w := normNode(got), normNode(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got  %s\n want %s", what, nodeString(g), nodeString(w))
	}
}

func nodeString(n farm.Node) string {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Sprintf("%+v", n)
	}
	return string(b)
}

// suiteEnvironments are the environments the suite's nodes are in.
var suiteEnvironments = []string{"production", "test"}

// listNodes queries the suite's environments until the store holds want
// nodes in them (indexes may lag, see farm.NodeStore), and returns them
// sorted by certname; it fails when the count stays different.
func listNodes(t *testing.T, s farm.NodeStore, what string, want int) []farm.Node {
	t.Helper()
	var nodes []farm.Node
	eventually(t, "list nodes "+what, func() error {
		nodes = nil
		for _, env := range suiteEnvironments {
			nodes = append(nodes, queryAll(t, s, farm.NodeQuery{Environment: env})...)
		}
		if len(nodes) != want {
			return fmt.Errorf("%d nodes, want %d", len(nodes), want)
		}
		return nil
	})
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Certname < nodes[j].Certname })
	return nodes
}

// putNode stores n as the whole record for n.Certname.
func putNode(t *testing.T, s farm.NodeStore, n farm.Node) {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	_, err := s.UpdateNode(ctx, n.Certname, func(cur *farm.Node) error {
		*cur = normNode(n)
		return nil
	})
	must(t, "update node "+n.Certname, err)
}

func nodeUnknown(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	putNode(t, s, fullNode("known.example.com"))
	_, err := s.GetNode(ctx, "unknown.example.com")
	wantErrIs(t, "get unknown node", err, farm.ErrNotFound)
}

func nodeCreate(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "new.example.com"
	calls := 0
	got, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
		calls++
		if !reflect.DeepEqual(normNode(*n), farm.Node{Certname: c}) {
			return fmt.Errorf("fn saw %s, want a zero node with Certname set", nodeString(*n))
		}
		n.Environment = "production"
		n.RequestSeq = 1
		return nil
	})
	must(t, "update new node", err)
	if calls == 0 {
		t.Fatal("fn was never called")
	}
	want := farm.Node{Certname: c, Environment: "production", RequestSeq: 1}
	wantNode(t, "update result", got, want)
	stored, err := s.GetNode(ctx, c)
	must(t, "get created node", err)
	wantNode(t, "stored node", stored, want)
}

func nodeUpdateSeesCurrent(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	want := fullNode("web01.example.com")
	putNode(t, s, want)
	got, err := s.UpdateNode(ctx, want.Certname, func(n *farm.Node) error {
		if !reflect.DeepEqual(normNode(*n), normNode(want)) {
			return fmt.Errorf("fn saw %s, want the stored %s", nodeString(normNode(*n)), nodeString(normNode(want)))
		}
		n.RequestSeq++
		n.Catalog.Seq = 7
		return nil
	})
	must(t, "update", err)
	want.RequestSeq++
	c := *want.Catalog
	c.Seq = 7
	want.Catalog = &c
	wantNode(t, "update result", got, want)
	stored, err := s.GetNode(ctx, want.Certname)
	must(t, "get", err)
	wantNode(t, "stored after update", stored, want)
}

func nodeRoundTrip(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	want := fullNode("db01.example.com")
	got, err := s.UpdateNode(ctx, want.Certname, func(n *farm.Node) error {
		*n = fullNode(want.Certname)
		return nil
	})
	must(t, "update", err)
	wantNode(t, "update result", got, want)
	stored, err := s.GetNode(ctx, want.Certname)
	must(t, "get", err)
	wantNode(t, "stored node (every field, nanosecond times)", stored, want)
	// Clearing pointer fields is stored too.
	_, err = s.UpdateNode(ctx, want.Certname, func(n *farm.Node) error {
		n.Catalog, n.Compile, n.Report = nil, nil, nil
		return nil
	})
	must(t, "clear pointers", err)
	stored, err = s.GetNode(ctx, want.Certname)
	must(t, "get", err)
	want.Catalog, want.Compile, want.Report = nil, nil, nil
	wantNode(t, "stored after clearing pointers", stored, want)
}

// nodeEveryField stores a node with every field set, found by reflection,
// so a driver that drops a field added to farm.Node later fails here.
func nodeEveryField(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	var want farm.Node
	fillAll(&want)
	want.Certname = "every-field.example.com"
	_, err := s.UpdateNode(ctx, want.Certname, func(n *farm.Node) error {
		*n = normalize(want)
		return nil
	})
	must(t, "update", err)
	got, err := s.GetNode(ctx, want.Certname)
	must(t, "get", err)
	wantNode(t, "stored node", got, want)
}

func nodeFnError(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	want := fullNode("app01.example.com")
	putNode(t, s, want)
	sentinel := errors.New("fn refuses")
	_, err := s.UpdateNode(ctx, want.Certname, func(n *farm.Node) error {
		// Change everything, through the pointers too, then refuse.
		n.Environment = "changed"
		n.RequestSeq = 999
		n.Catalog.Seq = 999
		n.Compile.Result = "changed"
		n.Report.Status = "changed"
		n.Requested.Seq = 999
		return sentinel
	})
	if err != sentinel { //nolint:errorlint // the contract says the error is returned as is
		t.Fatalf("UpdateNode returned %v (%T), want fn's error itself", err, err)
	}
	stored, gerr := s.GetNode(ctx, want.Certname)
	must(t, "get", gerr)
	wantNode(t, "stored after failed fn", stored, want)
}

func nodeFnErrorNew(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "ghost.example.com"
	sentinel := fmt.Errorf("not now: %w", farm.ErrInvalid)
	_, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
		n.RequestSeq = 1
		return sentinel
	})
	if err != sentinel { //nolint:errorlint // the contract says the error is returned as is
		t.Fatalf("UpdateNode returned %v, want fn's error itself", err)
	}
	_, err = s.GetNode(ctx, c)
	wantErrIs(t, "get node whose creation failed", err, farm.ErrNotFound)
	listNodes(t, s, "after failed creation", 0)
}

// nodeSequenceCheck is how the farm moves a catalog pointer only forward.
func nodeSequenceCheck(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	const c = "seq.example.com"
	setCatalog := func(seq uint64) error {
		_, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
			if n.Catalog != nil && n.Catalog.Seq > seq {
				return fmt.Errorf("catalog seq %d is older than stored %d: %w", seq, n.Catalog.Seq, farm.ErrConflict)
			}
			n.Catalog = &farm.CatalogRef{Seq: seq, Digest: farm.DigestOf(fmt.Appendf(nil, "%d", seq))}
			return nil
		})
		return err
	}
	must(t, "set seq 5", setCatalog(5))
	err := setCatalog(3)
	wantErrIs(t, "set older seq 3", err, farm.ErrConflict)
	must(t, "set seq 8", setCatalog(8))
	n, err := s.GetNode(ctx, c)
	must(t, "get", err)
	if n.Catalog == nil || n.Catalog.Seq != 8 {
		t.Fatalf("catalog after 5, 3 (refused), 8: %+v, want seq 8", n.Catalog)
	}
}

func nodeCopies(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	want := fullNode("copy.example.com")
	var kept *farm.Node
	got, err := s.UpdateNode(ctx, want.Certname, func(n *farm.Node) error {
		*n = fullNode(want.Certname)
		kept = n
		return nil
	})
	must(t, "update", err)
	got.Catalog.Seq = 1000
	got.Report.Status = "mutated"
	got.Requested.Seq = 1000
	kept.Compile.Error = "mutated after fn returned"
	g, err := s.GetNode(ctx, want.Certname)
	must(t, "get", err)
	wantNode(t, "stored after changing the returned node and fn's node", g, want)
	g.Catalog.Seq = 2000
	g2, err := s.GetNode(ctx, want.Certname)
	must(t, "get again", err)
	wantNode(t, "stored after changing a node GetNode returned", g2, want)
	list := listNodes(t, s, "to change them", 1)
	for i := range list {
		if list[i].Catalog != nil {
			list[i].Catalog.Seq = 3000
		}
	}
	g3, err := s.GetNode(ctx, want.Certname)
	must(t, "get after list", err)
	wantNode(t, "stored after changing a node QueryNodes returned", g3, want)
}

func nodeConcurrentIncrements(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, 5*waitLong)
	const c = "busy.example.com"
	const workers, each = 50, 20
	seen := make([]uint64, 0, workers*each)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				n, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
					n.RequestSeq++
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen = append(seen, n.RequestSeq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent update: %v", err)
	}
	n, err := s.GetNode(ctx, c)
	must(t, "get", err)
	if n.RequestSeq != workers*each {
		t.Fatalf("RequestSeq after %d×%d increments = %d", workers, each, n.RequestSeq)
	}
	// Every update saw a different record: the returned values are 1..1000.
	slices.Sort(seen)
	for i, v := range seen {
		if v != uint64(i+1) {
			t.Fatalf("returned RequestSeq values are not 1..%d: position %d holds %d", workers*each, i, v)
		}
	}
}

func nodeList(t *testing.T, s farm.NodeStore) {
	listNodes(t, s, "of an empty store", 0)
	want := []farm.Node{fullNode("c.example.com"), fullNode("a.example.com"), {Certname: "b.example.com", Environment: "test"}}
	for _, n := range want {
		putNode(t, s, n)
	}
	nodes := listNodes(t, s, "after puts", len(want))
	sort.Slice(want, func(i, j int) bool { return want[i].Certname < want[j].Certname })
	for i := range want {
		wantNode(t, "listed node", nodes[i], want[i])
	}
}

// nodeInvalidCertname: names that cannot be Puppet certnames
// (farm.ValidateCertname) are ErrInvalid, so no driver stores a key another
// could not, and UpdateNode does not call fn.
func nodeInvalidCertname(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	for _, c := range []string{"", "Upper.example.com", "../etc", "a/b", ".hidden"} {
		_, err := s.GetNode(ctx, c)
		wantErrIs(t, fmt.Sprintf("get node %q", c), err, farm.ErrInvalid)
		called := false
		_, err = s.UpdateNode(ctx, c, func(n *farm.Node) error { called = true; return nil })
		wantErrIs(t, fmt.Sprintf("update node %q", c), err, farm.ErrInvalid)
		if called {
			t.Fatalf("update node %q called fn", c)
		}
	}
	listNodes(t, s, "after invalid certnames", 0)
}

// nodeRename: a record is keyed by its certname, so fn changing n.Certname
// is refused with ErrInvalid and nothing is written.
func nodeRename(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	want := fullNode("stay.example.com")
	putNode(t, s, want)
	_, err := s.UpdateNode(ctx, want.Certname, func(n *farm.Node) error {
		n.Certname = "moved.example.com"
		n.RequestSeq = 100
		return nil
	})
	wantErrIs(t, "update that renames the node", err, farm.ErrInvalid)
	got, err := s.GetNode(ctx, want.Certname)
	must(t, "get", err)
	wantNode(t, "stored after refused rename", got, want)
	_, err = s.GetNode(ctx, "moved.example.com")
	wantErrIs(t, "get rename target", err, farm.ErrNotFound)
}

// nodeEndedContext: a call whose context has ended returns its error, and
// UpdateNode neither calls fn nor writes.
func nodeEndedContext(t *testing.T, s farm.NodeStore) {
	ctx := ctxFor(t, waitLong)
	want := fullNode("ended.example.com")
	putNode(t, s, want)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err := s.GetNode(ended, want.Certname)
	wantErrIs(t, "get with an ended context", err, context.Canceled)
	_, err = s.QueryNodes(ended, farm.NodeQuery{Environment: want.Environment})
	wantErrIs(t, "query with an ended context", err, context.Canceled)
	called := false
	_, err = s.UpdateNode(ended, want.Certname, func(n *farm.Node) error { called = true; n.RequestSeq++; return nil })
	wantErrIs(t, "update with an ended context", err, context.Canceled)
	if called {
		t.Fatal("update with an ended context called fn")
	}
	_, err = s.UpdateNode(ended, "new.example.com", func(n *farm.Node) error { n.Environment = "production"; return nil })
	wantErrIs(t, "update of a new node with an ended context", err, context.Canceled)
	got, err := s.GetNode(ctx, want.Certname)
	must(t, "get", err)
	wantNode(t, "record after an update with an ended context", got, want)
	_, err = s.GetNode(ctx, "new.example.com")
	wantErrIs(t, "get the node an update with an ended context would have made", err, farm.ErrNotFound)
}
