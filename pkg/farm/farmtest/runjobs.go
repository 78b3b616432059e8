package farmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// TestRunJobStore checks that a farm.RunJobStore keeps its contract.
// newStore returns a fresh, empty store for each subtest.
func TestRunJobStore(t *testing.T, newStore func(t *testing.T) farm.RunJobStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s farm.RunJobStore)
	}{
		{"UnknownIsNotFound", jobUnknown},
		{"CreateStoresJobAndQueuedNodes", jobCreate},
		{"EveryFieldRoundTrips", jobEveryField},
		{"DuplicateIDIsConflict", jobDuplicate},
		{"ConcurrentCreatesOneWins", jobConcurrentCreate},
		{"UpdateJobSeesCurrent", jobUpdate},
		{"UpdateJobFnErrorWritesNothing", jobUpdateFnError},
		{"UpdateJobNodeSeesCurrent", jobNodeUpdate},
		{"UpdateJobNodeFnErrorWritesNothing", jobNodeUpdateFnError},
		{"FnCannotMoveRecords", jobRename},
		{"ConcurrentJobIncrementsAreAtomic", jobConcurrentIncrements},
		{"ConcurrentNodeIncrementsAreAtomic", jobNodeConcurrentIncrements},
		{"ReturnedRecordsAreCopies", jobCopies},
		{"ListJobsNewestFirstInPages", jobListPages},
		{"ListJobNodesInCertnameOrder", jobNodePages},
		{"InvalidInput", jobInvalid},
		{"EndedContextChangesNothing", jobEndedContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// newRunJob returns a job as `broker job run` creates it.
func newRunJob(id string, created time.Time, nodes int) farm.RunJob {
	return farm.RunJob{
		ID: id, Created: created, Updated: created, State: farm.JobRunning,
		Environment: "production", Concurrency: 10, Timeout: 15 * time.Minute, Owner: "operator.example.com",
		Runner: "task-a", Total: nodes, Counts: map[string]int{farm.JobNodeQueued: nodes},
	}
}

func jobNodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node%03d.example.com", i)
	}
	return out
}

func createJob(t *testing.T, s farm.RunJobStore, j farm.RunJob, nodes []string) {
	t.Helper()
	must(t, "create job "+j.ID, s.CreateJob(ctxFor(t, waitLong), j, nodes))
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

func wantEqual[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if g, w := normalize(got), normalize(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got  %s\n want %s", what, jsonString(g), jsonString(w))
	}
}

func wantRunJob(t *testing.T, s farm.RunJobStore, want farm.RunJob) {
	t.Helper()
	got, err := s.GetJob(ctxFor(t, waitLong), want.ID)
	must(t, "get job "+want.ID, err)
	wantEqual(t, "job "+want.ID, got, want)
}

// listJobNodes follows a job's node pages to the end, checking each page's
// size and the certname order, and returns every node.
func listJobNodes(t *testing.T, s farm.RunJobStore, q farm.RunJobNodeQuery) []farm.RunJobNode {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	var out []farm.RunJobNode
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("list job nodes %+v: more than 10000 pages (Next never ends?)", q)
		}
		page, err := s.ListJobNodes(ctx, q)
		must(t, fmt.Sprintf("list job nodes %+v", q), err)
		if len(page.Nodes) > q.PageSize() {
			t.Fatalf("list job nodes %+v: page of %d nodes, limit %d", q, len(page.Nodes), q.PageSize())
		}
		for _, n := range page.Nodes {
			if n.Node <= q.After || (len(out) > 0 && n.Node <= out[len(out)-1].Node) {
				t.Fatalf("list job nodes %+v: %s out of certname order", q, n.Node)
			}
			if n.Job != q.Job {
				t.Fatalf("list job nodes %+v: node %s of job %q", q, n.Node, n.Job)
			}
			out = append(out, n)
		}
		if page.Next == "" {
			return out
		}
		if page.Next <= q.After {
			t.Fatalf("list job nodes %+v: Next %q does not move past After", q, page.Next)
		}
		q.After = page.Next
	}
}

// listJobs follows the job pages to the end, checking each page's size and
// the newest-first order, and returns every job.
func listJobs(t *testing.T, s farm.RunJobStore, q farm.RunJobQuery) []farm.RunJob {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	var out []farm.RunJob
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("list jobs %+v: more than 10000 pages (Next never ends?)", q)
		}
		page, err := s.ListJobs(ctx, q)
		must(t, fmt.Sprintf("list jobs %+v", q), err)
		if len(page.Jobs) > q.PageSize() {
			t.Fatalf("list jobs %+v: page of %d jobs, limit %d", q, len(page.Jobs), q.PageSize())
		}
		for _, j := range page.Jobs {
			if seen[j.ID] {
				t.Fatalf("list jobs %+v: job %s listed twice", q, j.ID)
			}
			seen[j.ID] = true
			if len(out) > 0 {
				prev := out[len(out)-1]
				if c := j.Created.Compare(prev.Created); c > 0 || c == 0 && j.ID > prev.ID {
					t.Fatalf("list jobs %+v: %s (%v) listed after %s (%v): not newest first, then greater id",
						q, j.ID, j.Created, prev.ID, prev.Created)
				}
			}
			out = append(out, j)
		}
		if page.Next == "" {
			return out
		}
		if page.Next == q.After {
			t.Fatalf("list jobs %+v: Next does not move", q)
		}
		q.After = page.Next
	}
}

func jobIDs(jobs []farm.RunJob) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// wantJobList waits until ListJobs answers exactly want, in that order
// (indexes may lag).
func wantJobList(t *testing.T, s farm.RunJobStore, q farm.RunJobQuery, want ...string) []farm.RunJob {
	t.Helper()
	var got []farm.RunJob
	eventually(t, fmt.Sprintf("list jobs %+v", q), func() error {
		got = listJobs(t, s, q)
		if ids := jobIDs(got); !slices.Equal(ids, want) {
			return fmt.Errorf("got [%s], want [%s]", strings.Join(ids, " "), strings.Join(want, " "))
		}
		return nil
	})
	return got
}

func jobUnknown(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	createJob(t, s, newRunJob("known", base, 1), jobNodeNames(1))
	_, err := s.GetJob(ctx, "unknown")
	wantErrIs(t, "get unknown job", err, farm.ErrNotFound)
	called := false
	_, err = s.UpdateJob(ctx, "unknown", func(*farm.RunJob) error { called = true; return nil })
	wantErrIs(t, "update unknown job", err, farm.ErrNotFound)
	if called {
		t.Fatal("update of an unknown job called fn")
	}
	_, err = s.GetJob(ctx, "unknown")
	wantErrIs(t, "get unknown job after update", err, farm.ErrNotFound)
	_, err = s.UpdateJobNode(ctx, "unknown", "node000.example.com", func(*farm.RunJobNode) error { called = true; return nil })
	wantErrIs(t, "update a node of an unknown job", err, farm.ErrNotFound)
	_, err = s.UpdateJobNode(ctx, "known", "stranger.example.com", func(*farm.RunJobNode) error { called = true; return nil })
	wantErrIs(t, "update a node not in the job", err, farm.ErrNotFound)
	if called {
		t.Fatal("update of an unknown node called fn")
	}
	if nodes := listJobNodes(t, s, farm.RunJobNodeQuery{Job: "known"}); len(nodes) != 1 {
		t.Fatalf("job known has %d nodes after updates of strangers, want 1", len(nodes))
	}
	if nodes := listJobNodes(t, s, farm.RunJobNodeQuery{Job: "unknown"}); len(nodes) != 0 {
		t.Fatalf("unknown job lists %d nodes", len(nodes))
	}
	wantJobList(t, s, farm.RunJobQuery{}, "known")
}

func jobCreate(t *testing.T, s farm.RunJobStore) {
	j := newRunJob("job-1", base, 3)
	nodes := []string{"web02.example.com", "db01.example.com", "web01.example.com"}
	createJob(t, s, j, nodes)
	wantRunJob(t, s, j)
	got := listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID})
	var want []farm.RunJobNode
	for _, n := range slices.Sorted(slices.Values(nodes)) {
		want = append(want, farm.RunJobNode{Job: j.ID, Node: n, State: farm.JobNodeQueued, Updated: j.Created})
	}
	wantEqual(t, "nodes of a new job", got, want)
	listed := wantJobList(t, s, farm.RunJobQuery{}, j.ID)
	wantEqual(t, "listed job", listed[0], j)
	// A job of no nodes.
	empty := newRunJob("job-0", base.Add(time.Second), 0)
	createJob(t, s, empty, nil)
	wantRunJob(t, s, empty)
	if n := listJobNodes(t, s, farm.RunJobNodeQuery{Job: empty.ID}); len(n) != 0 {
		t.Fatalf("job of no nodes lists %d", len(n))
	}
	wantJobList(t, s, farm.RunJobQuery{}, empty.ID, j.ID)
}

// jobEveryField stores a job and a node with every field set, found by
// reflection, so a driver that drops a field added later fails here.
func jobEveryField(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	var j farm.RunJob
	fillAll(&j)
	j.ID = "every-field"
	createJob(t, s, j, []string{"a.example.com"})
	wantRunJob(t, s, j)
	listed := wantJobList(t, s, farm.RunJobQuery{}, j.ID)
	wantEqual(t, "listed job", listed[0], j)

	var n farm.RunJobNode
	fillAll(&n)
	n.Job, n.Node = j.ID, "a.example.com"
	got, err := s.UpdateJobNode(ctx, j.ID, n.Node, func(cur *farm.RunJobNode) error {
		*cur = normalize(n)
		return nil
	})
	must(t, "update node", err)
	wantEqual(t, "update result", got, n)
	nodes := listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID})
	wantEqual(t, "stored node", nodes, []farm.RunJobNode{n})
	// Clearing fields is stored too.
	_, err = s.UpdateJobNode(ctx, j.ID, n.Node, func(cur *farm.RunJobNode) error {
		*cur = farm.RunJobNode{Job: cur.Job, Node: cur.Node, State: farm.JobNodeRunning}
		return nil
	})
	must(t, "clear node fields", err)
	nodes = listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID})
	wantEqual(t, "stored node after clearing", nodes, []farm.RunJobNode{{Job: j.ID, Node: n.Node, State: farm.JobNodeRunning}})
	_, err = s.UpdateJob(ctx, j.ID, func(cur *farm.RunJob) error {
		*cur = farm.RunJob{ID: cur.ID, Created: cur.Created, State: farm.JobFinished}
		return nil
	})
	must(t, "clear job fields", err)
	wantRunJob(t, s, farm.RunJob{ID: j.ID, Created: j.Created, State: farm.JobFinished})
}

func jobDuplicate(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	j := newRunJob("dup", base, 2)
	createJob(t, s, j, []string{"a.example.com", "b.example.com"})
	other := newRunJob("dup", base.Add(time.Hour), 2)
	other.Owner = "someone-else.example.com"
	err := s.CreateJob(ctx, other, []string{"b.example.com", "c.example.com"})
	wantErrIs(t, "create a job with an existing id", err, farm.ErrConflict)
	wantRunJob(t, s, j)
	got := listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID})
	wantEqual(t, "nodes after a refused create", got, []farm.RunJobNode{
		{Job: j.ID, Node: "a.example.com", State: farm.JobNodeQueued, Updated: base},
		{Job: j.ID, Node: "b.example.com", State: farm.JobNodeQueued, Updated: base},
	})
	wantJobList(t, s, farm.RunJobQuery{}, j.ID)
}

// jobConcurrentCreate: of several creations of one id exactly one wins,
// and the job and its nodes are the winner's.
func jobConcurrentCreate(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	const racers = 5
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			j := newRunJob("race", base, 2)
			j.Owner = fmt.Sprintf("owner%d.example.com", i)
			errs[i] = s.CreateJob(ctx, j, []string{fmt.Sprintf("r%d-a.example.com", i), fmt.Sprintf("r%d-b.example.com", i)})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("creations %d and %d of one id both succeeded", winner, i)
		case err == nil:
			winner = i
		default:
			wantErrIs(t, fmt.Sprintf("losing creation %d", i), err, farm.ErrConflict)
		}
	}
	if winner < 0 {
		t.Fatal("no creation succeeded")
	}
	j, err := s.GetJob(ctx, "race")
	must(t, "get", err)
	if want := fmt.Sprintf("owner%d.example.com", winner); j.Owner != want {
		t.Fatalf("job owner %q, want the winner's %q", j.Owner, want)
	}
	nodes := listJobNodes(t, s, farm.RunJobNodeQuery{Job: "race"})
	wantNodes := []string{fmt.Sprintf("r%d-a.example.com", winner), fmt.Sprintf("r%d-b.example.com", winner)}
	var got []string
	for _, n := range nodes {
		got = append(got, n.Node)
	}
	if !slices.Equal(got, wantNodes) {
		t.Fatalf("nodes of the job: %v, want the winner's %v", got, wantNodes)
	}
}

func jobUpdate(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	j := newRunJob("upd", base, 2)
	createJob(t, s, j, jobNodeNames(2))
	want := j
	want.State = farm.JobFinished
	want.Updated = base.Add(time.Minute + time.Nanosecond)
	want.Counts = map[string]int{farm.JobNodeFinished: 1, farm.JobNodeFailed: 1}
	got, err := s.UpdateJob(ctx, j.ID, func(cur *farm.RunJob) error {
		if !reflect.DeepEqual(normalize(*cur), normalize(j)) {
			return fmt.Errorf("fn saw %s, want the stored %s", jsonString(*cur), jsonString(j))
		}
		cur.State, cur.Updated = want.State, want.Updated
		delete(cur.Counts, farm.JobNodeQueued)
		cur.Counts[farm.JobNodeFinished] = 1
		cur.Counts[farm.JobNodeFailed] = 1
		return nil
	})
	must(t, "update job", err)
	wantEqual(t, "update result", got, want)
	wantRunJob(t, s, want)
	wantEqual(t, "listed after update", wantJobList(t, s, farm.RunJobQuery{}, j.ID)[0], want)
}

func jobUpdateFnError(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	j := newRunJob("fnerr", base, 1)
	createJob(t, s, j, jobNodeNames(1))
	sentinel := errors.New("fn refuses")
	_, err := s.UpdateJob(ctx, j.ID, func(cur *farm.RunJob) error {
		cur.State = farm.JobFailed
		cur.Counts[farm.JobNodeFailed] = 1
		cur.Total = 100
		return sentinel
	})
	if err != sentinel { //nolint:errorlint // the contract says the error is returned as is
		t.Fatalf("UpdateJob returned %v (%T), want fn's error itself", err, err)
	}
	wantRunJob(t, s, j)
}

func jobNodeUpdate(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	j := newRunJob("nodeupd", base, 3)
	names := jobNodeNames(3)
	createJob(t, s, j, names)
	code := 2
	want := farm.RunJobNode{
		Job: j.ID, Node: names[1], State: farm.JobNodeFinished, Updated: base.Add(time.Minute),
		TransactionID: "pxp-tx-1", ExitCode: &code, Status: "changed",
		ReportURL: "https://farm.example.com/reports/x", TransactionUUID: "a8d27f5e-2a7b-4c7b-9d7e-0c1e8f0f3c22",
	}
	got, err := s.UpdateJobNode(ctx, j.ID, names[1], func(n *farm.RunJobNode) error {
		if w := (farm.RunJobNode{Job: j.ID, Node: names[1], State: farm.JobNodeQueued, Updated: base}); !reflect.DeepEqual(normalize(*n), normalize(w)) {
			return fmt.Errorf("fn saw %s, want the stored %s", jsonString(*n), jsonString(w))
		}
		c := code
		*n = want
		n.ExitCode = &c
		return nil
	})
	must(t, "update node", err)
	wantEqual(t, "update result", got, want)
	// A second update sees the first; the other nodes and the job are untouched.
	_, err = s.UpdateJobNode(ctx, j.ID, names[1], func(n *farm.RunJobNode) error {
		if n.ExitCode == nil || *n.ExitCode != 2 || n.Status != "changed" {
			return fmt.Errorf("fn saw %s, want the first update", jsonString(*n))
		}
		n.Error = "second"
		return nil
	})
	must(t, "update node again", err)
	want.Error = "second"
	wantEqual(t, "nodes", listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID}), []farm.RunJobNode{
		{Job: j.ID, Node: names[0], State: farm.JobNodeQueued, Updated: base},
		want,
		{Job: j.ID, Node: names[2], State: farm.JobNodeQueued, Updated: base},
	})
	wantRunJob(t, s, j)
}

func jobNodeUpdateFnError(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	j := newRunJob("nodefnerr", base, 1)
	createJob(t, s, j, []string{"a.example.com"})
	sentinel := fmt.Errorf("not now: %w", farm.ErrConflict)
	_, err := s.UpdateJobNode(ctx, j.ID, "a.example.com", func(n *farm.RunJobNode) error {
		code := 1
		n.State, n.ExitCode = farm.JobNodeFailed, &code
		return sentinel
	})
	if err != sentinel { //nolint:errorlint // the contract says the error is returned as is
		t.Fatalf("UpdateJobNode returned %v, want fn's error itself", err)
	}
	wantEqual(t, "nodes", listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID}), []farm.RunJobNode{
		{Job: j.ID, Node: "a.example.com", State: farm.JobNodeQueued, Updated: base},
	})
}

// jobRename: records are keyed by job id (and created time, in the list
// index) and by job and certname: fn cannot change them.
func jobRename(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	j := newRunJob("stay", base, 1)
	createJob(t, s, j, []string{"a.example.com"})
	for what, fn := range map[string]func(*farm.RunJob){
		"id":      func(cur *farm.RunJob) { cur.ID = "moved" },
		"created": func(cur *farm.RunJob) { cur.Created = cur.Created.Add(time.Second) },
	} {
		_, err := s.UpdateJob(ctx, j.ID, func(cur *farm.RunJob) error {
			fn(cur)
			cur.Total = 100
			return nil
		})
		wantErrIs(t, "update that changes the job's "+what, err, farm.ErrInvalid)
	}
	wantRunJob(t, s, j)
	_, err := s.GetJob(ctx, "moved")
	wantErrIs(t, "get rename target", err, farm.ErrNotFound)
	for what, fn := range map[string]func(*farm.RunJobNode){
		"job":  func(n *farm.RunJobNode) { n.Job = "moved" },
		"node": func(n *farm.RunJobNode) { n.Node = "b.example.com" },
	} {
		_, err := s.UpdateJobNode(ctx, j.ID, "a.example.com", func(n *farm.RunJobNode) error {
			fn(n)
			n.State = farm.JobNodeFailed
			return nil
		})
		wantErrIs(t, "update that changes the node's "+what, err, farm.ErrInvalid)
	}
	wantEqual(t, "nodes", listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID}), []farm.RunJobNode{
		{Job: j.ID, Node: "a.example.com", State: farm.JobNodeQueued, Updated: base},
	})
	wantJobList(t, s, farm.RunJobQuery{}, j.ID)
}

// incrementConcurrently runs workers×each calls of inc at once and checks
// that the values they return are exactly 1..workers×each: every update saw
// a different record.
func incrementConcurrently(t *testing.T, what string, inc func() (int, error)) {
	t.Helper()
	const workers, each = 10, 10
	var mu sync.Mutex
	var seen []int
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				v, err := inc()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen = append(seen, v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent %s: %v", what, err)
	}
	slices.Sort(seen)
	for i, v := range seen {
		if v != i+1 {
			t.Fatalf("concurrent %s: returned values are not 1..%d: position %d holds %d", what, workers*each, i, v)
		}
	}
}

func jobConcurrentIncrements(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, 5*waitLong)
	createJob(t, s, newRunJob("busy", base, 0), nil)
	incrementConcurrently(t, "job updates", func() (int, error) {
		j, err := s.UpdateJob(ctx, "busy", func(j *farm.RunJob) error {
			j.Total++
			j.Counts[farm.JobNodeFinished]++
			return nil
		})
		return j.Total, err
	})
	j, err := s.GetJob(ctx, "busy")
	must(t, "get", err)
	if j.Total != 100 || j.Counts[farm.JobNodeFinished] != 100 {
		t.Fatalf("after 100 increments: Total %d, Counts %v", j.Total, j.Counts)
	}
}

func jobNodeConcurrentIncrements(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, 5*waitLong)
	createJob(t, s, newRunJob("busy", base, 2), []string{"a.example.com", "b.example.com"})
	inc := func(node string) func() (int, error) {
		return func() (int, error) {
			n, err := s.UpdateJobNode(ctx, "busy", node, func(n *farm.RunJobNode) error {
				if n.ExitCode == nil {
					n.ExitCode = new(int)
				}
				*n.ExitCode++
				return nil
			})
			if err != nil {
				return 0, err
			}
			return *n.ExitCode, nil
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { incrementConcurrently(t, "node a updates", inc("a.example.com")) })
	wg.Go(func() { incrementConcurrently(t, "node b updates", inc("b.example.com")) })
	wg.Wait()
	for _, n := range listJobNodes(t, s, farm.RunJobNodeQuery{Job: "busy"}) {
		if n.ExitCode == nil || *n.ExitCode != 100 {
			t.Fatalf("node %s after 100 increments: %s", n.Node, jsonString(n))
		}
	}
}

func jobCopies(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	j := newRunJob("copy", base, 1)
	createJob(t, s, j, []string{"a.example.com"})
	j.Counts[farm.JobNodeFailed] = 7 // the caller's map after CreateJob
	j.Counts = map[string]int{farm.JobNodeQueued: 1}
	var kept *farm.RunJob
	got, err := s.UpdateJob(ctx, j.ID, func(cur *farm.RunJob) error {
		kept = cur
		return nil
	})
	must(t, "update", err)
	got.Counts[farm.JobNodeFailed] = 8
	kept.Counts[farm.JobNodeFailed] = 9
	g, err := s.GetJob(ctx, j.ID)
	must(t, "get", err)
	g.Counts[farm.JobNodeFailed] = 10
	for _, l := range wantJobList(t, s, farm.RunJobQuery{}, j.ID) {
		l.Counts[farm.JobNodeFailed] = 11
	}
	wantRunJob(t, s, j)
	n, err := s.UpdateJobNode(ctx, j.ID, "a.example.com", func(n *farm.RunJobNode) error {
		n.ExitCode = new(int)
		return nil
	})
	must(t, "update node", err)
	*n.ExitCode = 5
	nodes := listJobNodes(t, s, farm.RunJobNodeQuery{Job: j.ID})
	if nodes[0].ExitCode == nil || *nodes[0].ExitCode != 0 {
		t.Fatalf("stored node changed with the caller's copy: %s", jsonString(nodes[0]))
	}
}

func jobListPages(t *testing.T, s farm.RunJobStore) {
	// 23 jobs over 8 created times: ties are broken by id, descending.
	var jobs []farm.RunJob
	for i := range 23 {
		j := newRunJob(fmt.Sprintf("job-%02d", (i*7)%23), base.Add(time.Duration(i/3)*time.Minute+time.Duration(i/3)), 1)
		createJob(t, s, j, []string{"a.example.com"})
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b farm.RunJob) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	want := jobIDs(jobs)
	for _, limit := range []int{1, 2, 5, 23, 0, farm.MaxNodePage} {
		got := wantJobList(t, s, farm.RunJobQuery{Limit: limit}, want...)
		for i := range got {
			wantEqual(t, "listed job", got[i], jobs[i])
		}
	}
	// A job created later is listed first, whatever its id.
	late := newRunJob("aaa-late", base.Add(time.Hour), 1)
	createJob(t, s, late, []string{"a.example.com"})
	wantJobList(t, s, farm.RunJobQuery{Limit: 4}, append([]string{late.ID}, want...)...)
}

func jobNodePages(t *testing.T, s farm.RunJobStore) {
	names := jobNodeNames(57) // more than two batches of 25
	shuffled := slices.Clone(names)
	for i := range shuffled {
		k := (i * 31) % len(shuffled)
		shuffled[i], shuffled[k] = shuffled[k], shuffled[i]
	}
	createJob(t, s, newRunJob("many", base, len(names)), shuffled)
	createJob(t, s, newRunJob("other", base, 2), []string{"node000.example.com", "zzz.example.com"})
	for _, limit := range []int{1, 7, 25, 57, 0, farm.MaxNodePage} {
		got := listJobNodes(t, s, farm.RunJobNodeQuery{Job: "many", Limit: limit})
		var certs []string
		for _, n := range got {
			certs = append(certs, n.Node)
		}
		if !slices.Equal(certs, names) {
			t.Fatalf("nodes of job many in pages of %d: %v, want %v", limit, certs, names)
		}
	}
	// A query may start anywhere: after a certname that is not in the job too.
	for after, want := range map[string][]string{
		"node054.example.com": names[55:],
		"node0545":            names[55:],
		"node056.example.com": nil,
		"a":                   names,
	} {
		got := listJobNodes(t, s, farm.RunJobNodeQuery{Job: "many", After: after, Limit: 2})
		var certs []string
		for _, n := range got {
			certs = append(certs, n.Node)
		}
		if !slices.Equal(certs, want) {
			t.Fatalf("nodes of job many after %q: %v, want %v", after, certs, want)
		}
	}
}

func jobInvalid(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	for _, id := range []string{"", "-x", "a/b", "a b", "../x", strings.Repeat("x", 65)} {
		wantErrIs(t, fmt.Sprintf("create job %q", id), s.CreateJob(ctx, newRunJob(id, base, 0), nil), farm.ErrInvalid)
		_, err := s.GetJob(ctx, id)
		wantErrIs(t, fmt.Sprintf("get job %q", id), err, farm.ErrInvalid)
		_, err = s.UpdateJob(ctx, id, func(*farm.RunJob) error { return nil })
		wantErrIs(t, fmt.Sprintf("update job %q", id), err, farm.ErrInvalid)
		_, err = s.UpdateJobNode(ctx, id, "a.example.com", func(*farm.RunJobNode) error { return nil })
		wantErrIs(t, fmt.Sprintf("update node of job %q", id), err, farm.ErrInvalid)
		_, err = s.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: id})
		wantErrIs(t, fmt.Sprintf("list nodes of job %q", id), err, farm.ErrInvalid)
	}
	wantErrIs(t, "create a job without a created time", s.CreateJob(ctx, farm.RunJob{ID: "no-time"}, nil), farm.ErrInvalid)
	for _, nodes := range [][]string{{""}, {"Upper.example.com"}, {"a.example.com", "../etc"}, {"a.example.com", "a.example.com"}} {
		err := s.CreateJob(ctx, newRunJob("bad-nodes", base, len(nodes)), nodes)
		wantErrIs(t, fmt.Sprintf("create a job of nodes %q", nodes), err, farm.ErrInvalid)
	}
	_, err := s.GetJob(ctx, "bad-nodes")
	wantErrIs(t, "get a job whose creation was refused", err, farm.ErrNotFound)
	createJob(t, s, newRunJob("good", base, 1), []string{"a.example.com"})
	_, err = s.UpdateJobNode(ctx, "good", "A.example.com", func(*farm.RunJobNode) error { return nil })
	wantErrIs(t, "update node with an invalid certname", err, farm.ErrInvalid)
	for _, limit := range []int{-1, farm.MaxNodePage + 1} {
		_, err = s.ListJobs(ctx, farm.RunJobQuery{Limit: limit})
		wantErrIs(t, fmt.Sprintf("list jobs limit %d", limit), err, farm.ErrInvalid)
		_, err = s.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: "good", Limit: limit})
		wantErrIs(t, fmt.Sprintf("list job nodes limit %d", limit), err, farm.ErrInvalid)
	}
	wantJobList(t, s, farm.RunJobQuery{}, "good")
}

// jobEndedContext: a call whose context has ended returns its error, and
// CreateJob, UpdateJob and UpdateJobNode change nothing (nor call fn).
func jobEndedContext(t *testing.T, s farm.RunJobStore) {
	ctx := ctxFor(t, waitLong)
	job := newRunJob("ended", base, 1)
	node := jobNodeNames(1)[0]
	must(t, "create", s.CreateJob(ctx, job, []string{node}))
	ended, cancel := context.WithCancel(ctx)
	cancel()
	wantErrIs(t, "create with an ended context", s.CreateJob(ended, newRunJob("ended-too", base, 0), nil), context.Canceled)
	_, err := s.GetJob(ended, job.ID)
	wantErrIs(t, "get with an ended context", err, context.Canceled)
	called := false
	_, err = s.UpdateJob(ended, job.ID, func(j *farm.RunJob) error { called = true; j.State = farm.JobFinished; return nil })
	wantErrIs(t, "update job with an ended context", err, context.Canceled)
	_, err = s.UpdateJobNode(ended, job.ID, node, func(n *farm.RunJobNode) error { called = true; n.State = farm.JobNodeFinished; return nil })
	wantErrIs(t, "update job node with an ended context", err, context.Canceled)
	if called {
		t.Fatal("an update with an ended context called fn")
	}
	_, err = s.ListJobs(ended, farm.RunJobQuery{})
	wantErrIs(t, "list jobs with an ended context", err, context.Canceled)
	_, err = s.ListJobNodes(ended, farm.RunJobNodeQuery{Job: job.ID})
	wantErrIs(t, "list job nodes with an ended context", err, context.Canceled)
	got, err := s.GetJob(ctx, job.ID)
	must(t, "get", err)
	if got.State != farm.JobRunning {
		t.Fatalf("job state %q after an update with an ended context, want %q", got.State, farm.JobRunning)
	}
	_, err = s.GetJob(ctx, "ended-too")
	wantErrIs(t, "get the job a create with an ended context would have made", err, farm.ErrNotFound)
	page, err := s.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: job.ID})
	must(t, "list job nodes", err)
	if len(page.Nodes) != 1 || page.Nodes[0].State != farm.JobNodeQueued {
		t.Fatalf("job nodes after an update with an ended context: %+v, want one queued", page.Nodes)
	}
}
