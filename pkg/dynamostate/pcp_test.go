package dynamostate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/compilefarm/compilefarm/pkg/awscalls"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
)

// noScans fails the test at its end if c counted a Scan: presence and jobs
// are read through keys and indexes only.
func noScans(t *testing.T, c *awscalls.Counter) {
	t.Cleanup(func() {
		for _, n := range c.Snapshot() {
			if n.Operation == "Scan" {
				t.Errorf("%d Scan calls of %s", n.Calls, n.Resource)
			}
		}
	})
}

// countedStore returns a store on fresh tables whose calls c counts.
func countedStore(t *testing.T, c *awscalls.Counter) *Store {
	return newStoreWith(t, []func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, c.APIOption)
	}})
}

func TestPresenceStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	c := awscalls.New()
	noScans(t, c)
	farmtest.TestPresenceStore(t, func(t *testing.T) farm.PresenceStore { return countedStore(t, c) })
}

func TestRunJobStoreContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	c := awscalls.New()
	noScans(t, c)
	farmtest.TestRunJobStore(t, func(t *testing.T) farm.RunJobStore { return countedStore(t, c) })
}

// callsSince returns the calls c counted of each operation since before
// (the previous counts), as "Op=n" sorted by operation, and the counts now.
func callsSince(c *awscalls.Counter, before map[string]int64) (string, map[string]int64) {
	now := map[string]int64{}
	for _, n := range c.Snapshot() {
		now[n.Operation] += n.Calls
	}
	var parts []string
	for op, n := range now {
		if d := n - before[op]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", op, d))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " "), now
}

// TestPCPCalls pins the calls each operation makes (the package's cost
// model, in presence.go and runjobs.go).
func TestPCPCalls(t *testing.T) {
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
	p := farm.Presence{URI: "pcp://a.example.com/agent", Task: "task-a", Expires: time.Now().Add(time.Hour)}
	step("SetPresence", "PutItem=1", s.SetPresence(ctx, p))
	_, err := s.LookupPresence(ctx, p.URI)
	step("LookupPresence", "GetItem=1", err)
	_, err = s.QueryPresence(ctx, farm.PresenceQuery{ClientType: "agent"})
	step("QueryPresence", fmt.Sprintf("Query=%d", PresenceShards), err) // one per shard
	_, err = s.QueryPresence(ctx, farm.PresenceQuery{ClientType: "agent", CommonName: "a.example.com"})
	step("QueryPresence of a common name", "GetItem=1", err)
	step("ClearPresence by another task", "DeleteItem=1", s.ClearPresence(ctx, p.URI, "task-b"))
	step("ClearPresence", "DeleteItem=1", s.ClearPresence(ctx, p.URI, "task-a"))

	nodes := make([]string, 57)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%02d.example.com", i)
	}
	j := farm.RunJob{ID: "job-1", Created: time.Now(), State: farm.JobRunning, Total: len(nodes)}
	step("CreateJob of 57 nodes", "BatchWriteItem=3 PutItem=1 UpdateItem=1", s.CreateJob(ctx, j, nodes))
	step("CreateJob of no nodes", "PutItem=1", s.CreateJob(ctx, farm.RunJob{ID: "job-0", Created: time.Now()}, nil))
	_, err = s.GetJob(ctx, j.ID)
	step("GetJob", "GetItem=1", err)
	_, err = s.UpdateJob(ctx, j.ID, func(j *farm.RunJob) error { j.State = farm.JobFinished; return nil })
	step("UpdateJob", "GetItem=1 UpdateItem=1", err)
	_, err = s.UpdateJobNode(ctx, j.ID, nodes[3], func(n *farm.RunJobNode) error { n.State = farm.JobNodeRunning; return nil })
	step("UpdateJobNode", "GetItem=1 UpdateItem=1", err)
	_, err = s.ListJobs(ctx, farm.RunJobQuery{})
	step("ListJobs", "Query=1", err)
	page, err := s.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: j.ID, Limit: 50})
	step("ListJobNodes", "Query=1", err)
	if len(page.Nodes) != 50 || page.Next != nodes[49] {
		t.Errorf("first page of 50 of 57 nodes: %d nodes, next %q", len(page.Nodes), page.Next)
	}
}

// TestPresenceItemLayout pins the presence item's attributes: the stack's
// time to live reads expires_at, in seconds, never before the expiry.
func TestPresenceItemLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	exp := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	if err := s.SetPresence(ctx, farm.Presence{URI: "pcp://a.example.com/agent", Task: "task-a", Expires: exp}); err != nil {
		t.Fatal(err)
	}
	item := getItem(t, s, s.opts.PresenceTable, uriKey("pcp://a.example.com/agent"))
	if got, want := attrN(t, item, AttrExpiresAt), fmt.Sprint(exp.Unix()+1); got != want {
		t.Errorf("%s = %s, want %s (seconds, rounded up)", AttrExpiresAt, got, want)
	}
	if got, want := attrN(t, item, AttrExpiresNS), fmt.Sprint(exp.UnixNano()); got != want {
		t.Errorf("%s = %s, want %s", AttrExpiresNS, got, want)
	}
	if got := attrS(t, item, AttrClientType); got != "agent" {
		t.Errorf("%s = %q", AttrClientType, got)
	}
	if got := attrS(t, item, AttrTask); got != "task-a" {
		t.Errorf("%s = %q", AttrTask, got)
	}
	// FNV-1a of the URI modulo 16: pinned, as moving a record to another
	// shard hides it from queries until it is written again.
	if got := attrS(t, item, AttrClientShard); got != "agent#6" {
		t.Errorf("%s = %q, want agent#6", AttrClientShard, got)
	}
}

// TestPresenceShards: records of one client type spread over every shard
// of the index, which projects only what QueryPresence reads; pages of any
// size merge the shards into one URI order, none longer than its limit,
// each Next past the last.
func TestPresenceShards(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	var want []string
	for i := range 120 {
		uri := fmt.Sprintf("pcp://n%03d.example.com/agent", i)
		exp := time.Now().Add(time.Hour)
		if i%10 == 3 {
			exp = time.Now().Add(-time.Minute) // expired: never listed
		} else {
			want = append(want, uri)
		}
		if err := s.SetPresence(ctx, farm.Presence{URI: uri, Task: "task-a", Expires: exp}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetPresence(ctx, farm.Presence{URI: "pcp://n001.example.com/other", Task: "task-a", Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	for shard := range PresenceShards {
		out, err := s.client.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(s.opts.PresenceTable), IndexName: aws.String(IndexByClientShard),
			KeyConditionExpression:    aws.String("#cs = :cs"),
			ExpressionAttributeNames:  map[string]string{"#cs": AttrClientShard},
			ExpressionAttributeValues: map[string]types.AttributeValue{":cs": &types.AttributeValueMemberS{Value: shardKey("agent", shard)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Items) == 0 {
			t.Errorf("shard %d holds none of 120 agents", shard)
		}
		for _, item := range out.Items {
			var names []string
			for k := range item {
				names = append(names, k)
			}
			slices.Sort(names)
			if got := strings.Join(names, ","); got != "client_shard,expires_ns,task,uri" {
				t.Fatalf("an index item holds %s, want the keys, task and expires_ns", got)
			}
		}
	}
	for _, limit := range []int{2, 7, 50, 1000} {
		var got []string
		q := farm.PresenceQuery{ClientType: "agent", Limit: limit}
		for pages := 0; ; pages++ {
			if pages > 1000 {
				t.Fatalf("limit %d: no end after 1000 pages", limit)
			}
			page, err := s.QueryPresence(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Records) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(page.Records))
			}
			for _, p := range page.Records {
				got = append(got, p.URI)
			}
			if page.Next == "" {
				break
			}
			if page.Next <= q.After {
				t.Fatalf("limit %d: Next %q does not pass After %q", limit, page.Next, q.After)
			}
			q.After = page.Next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: %d records %v..., want the %d live agents in URI order", limit, len(got), got[:min(len(got), 3)], len(want))
		}
	}
}

// TestJobItemsExpire pins the jobs table's time to live: no expires_at on
// a running job nor on a queued or running node; JobRetention after the
// write that ended a job, JobNodeRetention after the one that ended a
// node's run (Unix seconds); none again when a job runs again.
func TestJobItemsExpire(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the DynamoDB emulator; skipped with -short")
	}
	s := newStore(t)
	ctx := testCtx(t)
	table := s.opts.JobsTable
	// expiry returns the item's expires_at, or 0 when it has none.
	expiry := func(item string) int64 {
		t.Helper()
		it := getItem(t, s, table, jobItemKey("j1", item))
		if _, ok := it[AttrExpiresAt]; !ok {
			return 0
		}
		var n int64
		fmt.Sscan(attrN(t, it, AttrExpiresAt), &n)
		return n
	}
	// within fails unless got is retention after a time in [from, now].
	within := func(what string, got int64, from time.Time, retention time.Duration) {
		t.Helper()
		lo, hi := from.Add(retention).Unix(), time.Now().Add(retention).Unix()+1
		if got < lo || got > hi {
			t.Errorf("%s expires_at = %d, want %d to %d (%v after the write)", what, got, lo, hi, retention)
		}
	}
	job := farm.RunJob{ID: "j1", Created: time.Now(), State: farm.JobRunning, Total: 2}
	if err := s.CreateJob(ctx, job, []string{"a.example.com", "b.example.com"}); err != nil {
		t.Fatal(err)
	}
	for _, item := range []string{ItemJob, ItemNodePrefix + "a.example.com"} {
		if x := expiry(item); x != 0 {
			t.Errorf("item %s of a running job has expires_at %d", item, x)
		}
	}
	setNode := func(node, state string) {
		t.Helper()
		if _, err := s.UpdateJobNode(ctx, "j1", node, func(n *farm.RunJobNode) error { n.State = state; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	setNode("a.example.com", farm.JobNodeRunning)
	if x := expiry(ItemNodePrefix + "a.example.com"); x != 0 {
		t.Errorf("a running node's item has expires_at %d", x)
	}
	ended := time.Now()
	setNode("a.example.com", farm.JobNodeFinished)
	within("a finished node's item", expiry(ItemNodePrefix+"a.example.com"), ended, JobNodeRetention)
	setNode("b.example.com", farm.JobNodeUnreachable)
	within("an unreachable node's item", expiry(ItemNodePrefix+"b.example.com"), ended, JobNodeRetention)
	setJob := func(state string) {
		t.Helper()
		if _, err := s.UpdateJob(ctx, "j1", func(j *farm.RunJob) error { j.State = state; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	setJob(farm.JobRunning) // a heartbeat
	if x := expiry(ItemJob); x != 0 {
		t.Errorf("a running job's item has expires_at %d after a heartbeat", x)
	}
	ended = time.Now()
	setJob(farm.JobFailed)
	within("a failed job's item", expiry(ItemJob), ended, JobRetention)
	if JobNodeRetention <= JobRetention {
		t.Errorf("node items (%v) do not outlive their job's (%v)", JobNodeRetention, JobRetention)
	}
	setJob(farm.JobRunning) // resumed
	if x := expiry(ItemJob); x != 0 {
		t.Errorf("a job running again keeps expires_at %d", x)
	}
	// A job created ended (no nodes to run) expires from its creation.
	created := time.Now()
	if err := s.CreateJob(ctx, farm.RunJob{ID: "j2", Created: created, State: farm.JobFinished}, nil); err != nil {
		t.Fatal(err)
	}
	it := getItem(t, s, table, jobItemKey("j2", ItemJob))
	var n int64
	fmt.Sscan(attrN(t, it, AttrExpiresAt), &n)
	within("a job created finished", n, created, JobRetention)
}

// A store without the presence or jobs table says which option is missing.
func TestPCPTablesNotConfigured(t *testing.T) {
	s := New(newClient("http://127.0.0.1:1"), Options{NodesTable: "n", IndexTable: "i", EnvironmentsTable: "e"})
	ctx := context.Background()
	err := s.SetPresence(ctx, farm.Presence{URI: "pcp://a/agent", Task: "t", Expires: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "Options.PresenceTable") {
		t.Errorf("set presence without a table: %v", err)
	}
	_, err = s.GetJob(ctx, "x")
	if err == nil || !strings.Contains(err.Error(), "Options.JobsTable") {
		t.Errorf("get job without a table: %v", err)
	}
}
