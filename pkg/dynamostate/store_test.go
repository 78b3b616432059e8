package dynamostate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

func TestNodeStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	farmtest.TestNodeStore(t, func(t *testing.T) farm.NodeStore { return newStore(t) })
	farmtest.TestNodeReports(t, func(t *testing.T) farm.NodeStore { return newStore(t) })
}

func TestEnvironmentStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	farmtest.TestEnvironmentStore(t, func(t *testing.T) farm.EnvironmentStore { return newStore(t) })
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func getItem(t *testing.T, s *Store, table string, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := s.client.GetItem(testCtx(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("raw get item: %v", err)
	}
	return out.Item
}

func attrS(t *testing.T, item map[string]types.AttributeValue, name string) string {
	t.Helper()
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		t.Fatalf("attribute %s is %T, want a string", name, item[name])
	}
	return v.Value
}

func attrN(t *testing.T, item map[string]types.AttributeValue, name string) string {
	t.Helper()
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("attribute %s is %T, want a number", name, item[name])
	}
	return v.Value
}

// TestItemLayout pins the items' attributes: what the infra stack's tables
// and operators' tools rely on.
func TestItemLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	const c = "layout.example.com"
	for i := 1; i <= 2; i++ {
		if _, err := s.UpdateNode(ctx, c, func(n *farm.Node) error { n.Environment = "production"; n.RequestSeq++; return nil }); err != nil {
			t.Fatal(err)
		}
		item := getItem(t, s, s.opts.NodesTable, nodeKey(c))
		if len(item) != 3 {
			t.Fatalf("node item has attributes %v, want certname, version, record", keys(item))
		}
		if got := attrS(t, item, "certname"); got != c {
			t.Fatalf("certname = %q", got)
		}
		if got := attrN(t, item, "version"); got != fmt.Sprint(i) {
			t.Fatalf("version after %d writes = %s", i, got)
		}
		var n farm.Node
		if err := json.Unmarshal([]byte(attrS(t, item, "record")), &n); err != nil {
			t.Fatalf("record is not a JSON node: %v", err)
		}
		if want := (farm.Node{Certname: c, Environment: "production", RequestSeq: uint64(i)}); !reflect.DeepEqual(n, want) {
			t.Fatalf("record = %+v, want %+v", n, want)
		}
	}
	// A failing fn writes nothing: the version stays.
	if _, err := s.UpdateNode(ctx, c, func(n *farm.Node) error { return errors.New("no") }); err == nil {
		t.Fatal("fn error not returned")
	}
	if got := attrN(t, getItem(t, s, s.opts.NodesTable, nodeKey(c)), "version"); got != "2" {
		t.Fatalf("version after failed fn = %s, want 2", got)
	}

	env := farm.Environment{Name: "production", CodeID: "abc", DeployedAt: time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)}
	if err := s.PutEnvironment(ctx, env); err != nil {
		t.Fatal(err)
	}
	item := getItem(t, s, s.opts.EnvironmentsTable, envKey("production"))
	if len(item) != 2 {
		t.Fatalf("environment item has attributes %v, want name, record", keys(item))
	}
	if got := attrS(t, item, "name"); got != "production" {
		t.Fatalf("name = %q", got)
	}
	var e farm.Environment
	if err := json.Unmarshal([]byte(attrS(t, item, "record")), &e); err != nil || !reflect.DeepEqual(e, env) {
		t.Fatalf("record = %+v (%v), want %+v", e, err, env)
	}
}

func keys(m map[string]types.AttributeValue) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestStaleWriterLoses: of two writers that read the same version, the
// second's conditional write loses, for new and existing items.
func TestStaleWriterLoses(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	// Without an environment a write is one UpdateItem; with one, written
	// over a record that had none, it is a transaction with its index items.
	for _, env := range []string{"", "production"} {
		c := "dup" + env + ".example.com"
		was := &farm.Node{Certname: c}
		write := func(seq, prev uint64, exists bool) error {
			_, err := s.writeNode(ctx, farm.Node{Certname: c, Environment: env, RequestSeq: seq}, prev, exists, was)
			return err
		}
		if err := write(1, 0, false); err != nil {
			t.Fatalf("first create: %v", err)
		}
		if err := write(100, 0, false); !errors.Is(err, errLost) {
			t.Fatalf("duplicate create: %v, want a lost conditional write", err)
		}
		if err := write(2, 1, true); err != nil {
			t.Fatalf("update from version 1: %v", err)
		}
		if err := write(200, 1, true); !errors.Is(err, errLost) {
			t.Fatalf("stale update from version 1: %v, want a lost conditional write", err)
		}
		n, err := s.GetNode(ctx, c)
		if err != nil || n.RequestSeq != 2 {
			t.Fatalf("stored after stale writes: %+v, %v; want RequestSeq 2", n, err)
		}
	}
}

// TestInterferingWriterRetries: a write that lands between UpdateNode's
// read and its write makes UpdateNode read again and call fn again, so
// neither change is lost.
func TestInterferingWriterRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	const c = "race.example.com"
	calls := 0
	got, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
		calls++
		if calls == 1 {
			// Another writer wins the race.
			if _, err := s.UpdateNode(ctx, c, func(o *farm.Node) error { o.Environment = "other"; o.RequestSeq = 10; return nil }); err != nil {
				return err
			}
		}
		n.RequestSeq++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("fn called %d times, want 2", calls)
	}
	want := farm.Node{Certname: c, Environment: "other", RequestSeq: 11}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("result %+v, want %+v", got, want)
	}
}

// TestConflictWhenAttemptsRunOut: when every attempt loses, UpdateNode
// gives up with ErrConflict and its own change is not written.
func TestConflictWhenAttemptsRunOut(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t, func(o *Options) { o.MaxAttempts = 3 })
	ctx := testCtx(t)
	const c = "contended.example.com"
	calls := 0
	_, err := s.UpdateNode(ctx, c, func(n *farm.Node) error {
		calls++
		if _, err := s.UpdateNode(ctx, c, func(o *farm.Node) error { o.RequestSeq += 10; return nil }); err != nil {
			return err
		}
		n.Environment = "loser"
		return nil
	})
	if !errors.Is(err, farm.ErrConflict) {
		t.Fatalf("got %v, want ErrConflict", err)
	}
	if calls != 3 {
		t.Fatalf("fn called %d times, want MaxAttempts = 3", calls)
	}
	n, err := s.GetNode(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if n.Environment != "" || n.RequestSeq != 30 {
		t.Fatalf("stored %+v, want only the three interfering writes (RequestSeq 30, no environment)", n)
	}
}

// TestListPaginates: ListEnvironments follows Scan pages (node queries
// page by the contract suite's QueryPages).
func TestListPaginates(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t, func(o *Options) { o.ScanPageSize = 2 })
	ctx := testCtx(t)
	for i := range 7 {
		if err := s.PutEnvironment(ctx, farm.Environment{Name: fmt.Sprintf("env_%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	envs, err := s.ListEnvironments(ctx)
	if err != nil || len(envs) != 7 {
		t.Fatalf("list environments: %d, %v; want 7", len(envs), err)
	}
}

// TestMissingTable: a store on tables that do not exist says so, naming
// the table, and does not claim the record is missing.
func TestMissingTable(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := New(newClient(emu.URL), Options{NodesTable: "no-such-nodes", IndexTable: "no-such-node-index", EnvironmentsTable: "no-such-environments"})
	ctx := testCtx(t)
	check := func(what string, err error, table string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), table) || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("%s: %v, want an error naming table %s", what, err, table)
		}
		for _, kind := range []error{farm.ErrNotFound, farm.ErrTransient, farm.ErrConflict} {
			if errors.Is(err, kind) {
				t.Fatalf("%s: %v wraps %v", what, err, kind)
			}
		}
	}
	_, err := s.GetNode(ctx, "a.example.com")
	check("get node", err, "no-such-nodes")
	_, err = s.UpdateNode(ctx, "a.example.com", func(*farm.Node) error { return nil })
	check("update node", err, "no-such-nodes")
	_, err = s.QueryNodes(ctx, farm.NodeQuery{Environment: "production"})
	check("query nodes", err, "no-such-node-index")
	_, err = s.GetEnvironment(ctx, "production")
	check("get environment", err, "no-such-environments")
	check("put environment", s.PutEnvironment(ctx, farm.Environment{Name: "production"}), "no-such-environments")
}

// TestUnreadableRecord: an item the driver cannot decode is ErrInvalid.
func TestUnreadableRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.opts.NodesTable),
		Item: map[string]types.AttributeValue{
			"certname": &types.AttributeValueMemberS{Value: "bad.example.com"},
			"version":  &types.AttributeValueMemberN{Value: "1"},
			"record":   &types.AttributeValueMemberS{Value: "{not json"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetNode(ctx, "bad.example.com"); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("get unreadable node: %v, want ErrInvalid", err)
	}
	called := false
	if _, err := s.UpdateNode(ctx, "bad.example.com", func(*farm.Node) error { called = true; return nil }); !errors.Is(err, farm.ErrInvalid) || called {
		t.Fatalf("update unreadable node: %v (fn called: %v), want ErrInvalid without calling fn", err, called)
	}
}

// TestServerErrorsAreTransient: throttling and 5xx answers, after the
// SDK's own retries, are ErrTransient. The server is a stand-in speaking
// DynamoDB's JSON error protocol, not a mock of the client.
func TestServerErrorsAreTransient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"Throttling", 400, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate exceeded"}`},
		{"ProvisionedThroughput", 400, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}`},
		{"InternalServerError", 500, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"oops"}`},
		{"Unavailable", 503, `unavailable`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			client := newClient(srv.URL, func(o *dynamodb.Options) {
				// The SDK retries once, at once: the test is about what
				// reaches the caller after its retries.
				o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
					so.MaxAttempts = 2
					so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
					so.RateLimiter = ratelimit.None
				})
			})
			s := New(client, Options{NodesTable: "nodes", IndexTable: "node-index", EnvironmentsTable: "environments"})
			ctx := testCtx(t)
			_, err := s.GetNode(ctx, "a.example.com")
			if !errors.Is(err, farm.ErrTransient) {
				t.Fatalf("get node: %v, want ErrTransient", err)
			}
			_, err = s.UpdateNode(ctx, "a.example.com", func(*farm.Node) error { return nil })
			if !errors.Is(err, farm.ErrTransient) {
				t.Fatalf("update node: %v, want ErrTransient", err)
			}
			if err := s.PutEnvironment(ctx, farm.Environment{Name: "x"}); !errors.Is(err, farm.ErrTransient) {
				t.Fatalf("put environment: %v, want ErrTransient", err)
			}
			if got := hits.Load(); got != 6 {
				t.Fatalf("the server saw %d requests, want 6 (3 calls, each tried twice by the SDK)", got)
			}
		})
	}
}

// TestConcurrentUpdatesOnTwoNodes: many goroutines on a few nodes, every
// increment counted (the contract suite covers one node).
func TestConcurrentUpdatesOnTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			c := fmt.Sprintf("n%d.example.com", i%2)
			for range 5 {
				if _, err := s.UpdateNode(ctx, c, func(n *farm.Node) error { n.RequestSeq++; return nil }); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range 2 {
		n, err := s.GetNode(ctx, fmt.Sprintf("n%d.example.com", i))
		if err != nil || n.RequestSeq != 125 {
			t.Fatalf("node %d: %+v, %v; want RequestSeq 125", i, n, err)
		}
	}
}

// TestCancelledContext: a cancelled context is reported as such, not as a
// kind of storage failure, and fn is not called.
func TestCancelledContext(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.GetNode(ctx, "a.example.com")
	if !errors.Is(err, context.Canceled) || errors.Is(err, farm.ErrTransient) || errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("get node: %v, want context.Canceled only", err)
	}
	called := false
	_, err = s.UpdateNode(ctx, "a.example.com", func(*farm.Node) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("update node: %v (fn called: %v), want context.Canceled without calling fn", err, called)
	}
}
