package localstore_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/localstore"
)

// testVisibility is short so the at-least-once subtests finish quickly.
const testVisibility = 2 * time.Second

var quiet = slog.New(slog.DiscardHandler)

// open opens a store in dir and closes it when the test ends.
func open(t testing.TB, dir string) *localstore.Store {
	t.Helper()
	s, err := localstore.Open(context.Background(), dir, localstore.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func TestContentStore(t *testing.T) {
	farmtest.TestContentStore(t, func(t *testing.T) farm.ContentStore { return open(t, t.TempDir()) })
}

func TestNodeStore(t *testing.T) {
	farmtest.TestNodeStore(t, func(t *testing.T) farm.NodeStore { return open(t, t.TempDir()) })
	farmtest.TestNodeReports(t, func(t *testing.T) farm.NodeStore { return open(t, t.TempDir()) })
}

func TestEnvironmentStore(t *testing.T) {
	farmtest.TestEnvironmentStore(t, func(t *testing.T) farm.EnvironmentStore { return open(t, t.TempDir()) })
}

func TestQueue(t *testing.T) {
	farmtest.TestQueue(t, func(t *testing.T) farm.Queue {
		return open(t, t.TempDir()).Queue(localstore.QueueOptions{VisibilityTimeout: testVisibility})
	}, farmtest.QueueCaps{Collapses: true, NodeExclusive: true, FinishedDeliveryIsNotFound: true})
}

func TestOutbox(t *testing.T) {
	opts := localstore.OutboxOptions{VisibilityTimeout: testVisibility}
	var (
		mu     sync.Mutex
		stores = map[farm.Outbox]*localstore.Store{} // each outbox's store, for Reopen
	)
	outboxOn := func(s *localstore.Store) farm.Outbox {
		o := s.Outbox(opts)
		mu.Lock()
		stores[o] = s
		mu.Unlock()
		return o
	}
	farmtest.TestOutbox(t, func(t *testing.T) farm.Outbox { return outboxOn(open(t, t.TempDir())) }, farmtest.OutboxCaps{
		ListsDeadLetters: true,
		Reopen: func(t *testing.T, o farm.Outbox) farm.Outbox {
			mu.Lock()
			s := stores[o]
			mu.Unlock()
			if err := s.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			return outboxOn(open(t, s.Dir()))
		},
	})
}

func TestContentLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	data := []byte("hello")
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "content", "catalogs", string(d[:2]), string(d))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("blob not at %s: %v", p, err)
	}
	if string(b) != "hello" {
		t.Fatalf("%s holds %q", p, b)
	}
	entries, err := os.ReadDir(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("%s holds %d entries (temporary files left?), want 1", filepath.Dir(p), len(entries))
	}
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err != nil {
		t.Fatalf("no state.db: %v", err)
	}
}

func TestCorruptContentIsDetected(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	data := []byte(strings.Repeat("catalog ", 1000))
	d, err := s.Put(ctx, farm.SpaceCatalogs, data)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "content", "catalogs", string(d[:2]), string(d))
	for _, tc := range []struct {
		name    string
		corrupt []byte
	}{
		{"flipped byte", append([]byte("C"), data[1:]...)},
		{"truncated", data[:100]},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(p, tc.corrupt, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := s.Get(ctx, farm.SpaceCatalogs, d)
			if !errors.Is(err, farm.ErrInvalid) {
				t.Fatalf("get of corrupt file: %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file %s", err, p)
			}
			// Putting the same bytes again repairs the blob.
			if _, err := s.Put(ctx, farm.SpaceCatalogs, data); err != nil {
				t.Fatalf("put again: %v", err)
			}
			got, err := s.Get(ctx, farm.SpaceCatalogs, d)
			if err != nil || string(got) != string(data) {
				t.Fatalf("get after repairing put: %v", err)
			}
		})
	}
}

func TestInvalidSpace(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	d := farm.DigestOf([]byte("x"))
	for _, sp := range []farm.Space{"", "..", "../x", "Catalogs", "a/b", "."} {
		if _, err := s.Put(ctx, sp, []byte("x")); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("put in space %q: %v, want ErrInvalid", sp, err)
		}
		if _, err := s.Get(ctx, sp, d); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("get from space %q: %v, want ErrInvalid", sp, err)
		}
		if _, err := s.Has(ctx, sp, d); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("has in space %q: %v, want ErrInvalid", sp, err)
		}
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := localstore.Open(ctx, dir, localstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	node := farm.Node{Certname: "web01.example.com", Environment: "production", RequestSeq: 3,
		Catalog: &farm.CatalogRef{Seq: 3, Digest: farm.DigestOf([]byte("c"))}}
	if _, err := s.UpdateNode(ctx, node.Certname, func(n *farm.Node) error { *n = node; return nil }); err != nil {
		t.Fatal(err)
	}
	env := farm.Environment{Name: "production", CodeID: "code-1", DeployedAt: time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)}
	if err := s.PutEnvironment(ctx, env); err != nil {
		t.Fatal(err)
	}
	d, err := s.Put(ctx, farm.SpaceFacts, []byte(`{"os":"debian"}`))
	if err != nil {
		t.Fatal(err)
	}
	q := s.Queue(localstore.QueueOptions{})
	job := farm.Job{Certname: "web01.example.com", Lane: farm.LaneBulk, Seq: 4, CodeID: "code-2", EnqueuedAt: env.DeployedAt}
	if err := q.Enqueue(ctx, job); err != nil {
		t.Fatal(err)
	}
	retried := farm.Job{Certname: "later.example.com", Lane: farm.LaneUrgent, Seq: 1, EnqueuedAt: env.DeployedAt}
	if err := q.Enqueue(ctx, retried); err != nil {
		t.Fatal(err)
	}
	rd, err := q.Receive(ctx)
	if err != nil || rd.Certname != retried.Certname {
		t.Fatalf("receive: %v %+v", err, rd)
	}
	if err := q.Retry(ctx, rd, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	got, err := s.GetNode(ctx, node.Certname)
	if err != nil || got.RequestSeq != 3 || got.Catalog == nil || got.Catalog.Seq != 3 {
		t.Fatalf("node after reopen: %+v, %v", got, err)
	}
	gotEnv, err := s.GetEnvironment(ctx, "production")
	if err != nil || gotEnv.CodeID != env.CodeID || !gotEnv.DeployedAt.Equal(env.DeployedAt) {
		t.Fatalf("environment after reopen: %+v, %v", gotEnv, err)
	}
	if b, err := s.Get(ctx, farm.SpaceFacts, d); err != nil || string(b) != `{"os":"debian"}` {
		t.Fatalf("content after reopen: %q, %v", b, err)
	}
	q = s.Queue(localstore.QueueOptions{})
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Depth != 1 || st[1].Depth != 1 {
		t.Fatalf("stats after reopen: %+v, want one urgent (retried in an hour) and one bulk job", st)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	jd, err := q.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if jd.Certname != job.Certname || jd.Seq != 4 || jd.CodeID != "code-2" || jd.Attempts != 1 {
		t.Fatalf("job after reopen: %+v, want the bulk job, first attempt (the retried one still waits)", jd)
	}
}

func TestSecondOpenWaitsForLock(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	_, err := localstore.Open(context.Background(), dir, localstore.Options{Logger: quiet, LockTimeout: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("a second Open of a data dir in use succeeded")
	}
	if !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second open: %v, want an error saying the dir is in use", err)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	s, err := localstore.Open(ctx, t.TempDir(), localstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	q := s.Queue(localstore.QueueOptions{})
	blocked := make(chan error, 1)
	go func() {
		_, err := q.Receive(ctx)
		blocked <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-blocked:
		if !errors.Is(err, localstore.ErrClosed) {
			t.Fatalf("blocked receive after close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a blocked Receive did not return on Close")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	_, errGet := s.GetNode(ctx, "a.example.com")
	_, errPut := s.Put(ctx, farm.SpaceContent, []byte("x"))
	errEnq := q.Enqueue(ctx, farm.Job{Certname: "a.example.com", Lane: farm.LaneUrgent})
	errEnv := s.PutEnvironment(ctx, farm.Environment{Name: "production"})
	for name, err := range map[string]error{"get node": errGet, "put content": errPut, "enqueue": errEnq, "put environment": errEnv} {
		if !errors.Is(err, localstore.ErrClosed) {
			t.Errorf("%s after close: %v, want ErrClosed", name, err)
		}
	}
}

func TestRunJobStore(t *testing.T) {
	farmtest.TestRunJobStore(t, func(t *testing.T) farm.RunJobStore { return open(t, t.TempDir()) })
}

func TestQueryStore(t *testing.T) {
	farmtest.TestQueryStore(t, func(t *testing.T) farm.QueryStore { return open(t, t.TempDir()) })
}

// Recorded queries and their states survive a restart of the process that
// owns the data directory.
func TestQueriesSurviveReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := localstore.Open(ctx, dir, localstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	q := farm.DigestOf([]byte(`"nodes {}"`))
	if err := s.RecordQueries(ctx, "production", []farm.Digest{q}); err != nil {
		t.Fatal(err)
	}
	set, err := s.SetQueryState(ctx, farm.QueryState{Environment: "production", Query: q, Version: 1,
		Result: farm.DigestOf([]byte("[]")), CheckedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	p, err := s.ListQueries(ctx, farm.QueryList{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Queries) != 1 || p.Queries[0] != set {
		t.Fatalf("after reopening: %+v, want [%+v]", p.Queries, set)
	}
}

// Jobs survive a restart of the process that owns the data directory
// (broker dev): a closed and reopened store lists them as before.
func TestRunJobsSurviveReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := localstore.Open(ctx, dir, localstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2024, 5, 17, 9, 30, 12, 123456789, time.UTC)
	for i, id := range []string{"older", "newer"} {
		j := farm.RunJob{ID: id, Created: created.Add(time.Duration(i) * time.Minute), State: farm.JobRunning, Total: 2}
		if err := s.CreateJob(ctx, j, []string{"a.example.com", "b.example.com"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.UpdateJobNode(ctx, "newer", "b.example.com", func(n *farm.RunJobNode) error {
		n.State = farm.JobNodeFinished
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	page, err := s.ListJobs(ctx, farm.RunJobQuery{Limit: 1})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != "newer" || page.Next == "" {
		t.Fatalf("first page after reopen: %+v, %v", page, err)
	}
	page, err = s.ListJobs(ctx, farm.RunJobQuery{After: page.Next})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != "older" || page.Next != "" {
		t.Fatalf("second page after reopen: %+v, %v", page, err)
	}
	nodes, err := s.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: "newer"})
	if err != nil || len(nodes.Nodes) != 2 || nodes.Nodes[1].State != farm.JobNodeFinished {
		t.Fatalf("nodes after reopen: %+v, %v", nodes, err)
	}
	if _, err := s.ListJobs(ctx, farm.RunJobQuery{After: "not a cursor"}); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("list jobs after a malformed cursor: %v, want ErrInvalid", err)
	}
}
