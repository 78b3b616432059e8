package localstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/localstore"
)

// The crash test re-executes the test binary as a child process (the
// helper-process pattern): with crashChildEnv set to a data dir, TestMain
// runs crashChild instead of the tests.
const crashChildEnv = "LOCALSTORE_CRASH_CHILD_DIR"

const (
	crashJobs     = 60 // enqueued by the child
	crashReceived = 6  // of which received (in flight at the kill)
	crashAcked    = 2  // of which acked
)

func crashCertname(i int) string { return fmt.Sprintf("node%03d.example.com", i) }

// crashMessages are sent to the outbox by the child, which receives the
// first (in flight at the kill).
var crashMessages = []farm.OutboxMessage{
	{Group: "crash-a.example.com", Body: []byte(`{"n":1}`)},
	{Group: "crash-b.example.com", Body: []byte(`{"n":1}`)},
	{Group: "crash-a.example.com", Body: []byte(`{"n":2}`)},
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		if err := crashChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(2)
		}
		select {} // wait for SIGKILL, never closing the store
	}
	os.Exit(m.Run())
}

// crashChild fills dir, reports "ready" on stdout and returns with the store
// still open.
func crashChild(dir string) error {
	ctx := context.Background()
	s, err := localstore.Open(ctx, dir, localstore.Options{Logger: quiet})
	if err != nil {
		return err
	}
	q := s.Queue(localstore.QueueOptions{VisibilityTimeout: time.Hour})
	for i := range crashJobs {
		lane := farm.LaneBulk
		if i%4 == 0 {
			lane = farm.LaneUrgent
		}
		j := farm.Job{Certname: crashCertname(i), Environment: "production", Reason: farm.ReasonNewNode, Lane: lane, Seq: uint64(i + 1), CodeID: "code-1"}
		if err := q.Enqueue(ctx, j); err != nil {
			return err
		}
	}
	for i := range crashReceived {
		d, err := q.Receive(ctx)
		if err != nil {
			return err
		}
		if i < crashAcked {
			if err := q.Ack(ctx, d); err != nil {
				return err
			}
		}
	}
	if _, err := s.UpdateNode(ctx, "crash.example.com", func(n *farm.Node) error { n.RequestSeq = 42; return nil }); err != nil {
		return err
	}
	if err := s.PutEnvironment(ctx, farm.Environment{Name: "production", CodeID: "code-1"}); err != nil {
		return err
	}
	if _, err := s.Put(ctx, farm.SpaceContent, []byte("written before the crash")); err != nil {
		return err
	}
	job := farm.RunJob{ID: "crash-job", Created: time.Now(), State: farm.JobRunning, Total: 2}
	if err := s.CreateJob(ctx, job, []string{crashCertname(0), crashCertname(1)}); err != nil {
		return err
	}
	if _, err := s.UpdateJobNode(ctx, job.ID, crashCertname(1), func(n *farm.RunJobNode) error {
		n.State = farm.JobNodeRunning
		return nil
	}); err != nil {
		return err
	}
	ob := s.Outbox(localstore.OutboxOptions{VisibilityTimeout: time.Hour})
	if err := ob.Send(ctx, crashMessages...); err != nil {
		return err
	}
	if ds, err := ob.Receive(ctx, 1, time.Second); err != nil || len(ds) != 1 || string(ds[0].Body) != `{"n":1}` || ds[0].Group != crashMessages[0].Group {
		return fmt.Errorf("receive from the outbox: %v, %v", ds, err)
	}
	_, err = fmt.Println("ready")
	return err
}

func TestCrashLosesNoQueuedJob(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("child said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = cmd.Wait()
			t.Fatalf("child did not get ready: %v", err)
		}
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = cmd.Wait()
		t.Fatal("child did not get ready within a minute")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill child %d: %v", pid, err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := open(t, dir)
	if n, err := s.GetNode(ctx, "crash.example.com"); err != nil || n.RequestSeq != 42 {
		t.Fatalf("node written before the crash: %+v, %v", n, err)
	}
	if _, err := s.GetEnvironment(ctx, "production"); err != nil {
		t.Fatalf("environment written before the crash: %v", err)
	}
	if ok, err := s.Has(ctx, farm.SpaceContent, farm.DigestOf([]byte("written before the crash"))); err != nil || !ok {
		t.Fatalf("content written before the crash: %v, %v", ok, err)
	}
	if page, err := s.ListJobs(ctx, farm.RunJobQuery{}); err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != "crash-job" {
		t.Fatalf("jobs after the crash: %+v, %v", page, err)
	}
	if page, err := s.ListJobNodes(ctx, farm.RunJobNodeQuery{Job: "crash-job"}); err != nil || len(page.Nodes) != 2 || page.Nodes[1].State != farm.JobNodeRunning {
		t.Fatalf("job nodes after the crash: %+v, %v", page, err)
	}

	q := s.Queue(localstore.QueueOptions{VisibilityTimeout: time.Hour})
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := crashJobs - crashAcked
	if depth := st[0].Depth + st[1].Depth; depth != want || st[0].InFlight+st[1].InFlight != 0 {
		t.Fatalf("stats after the crash: %+v, want %d waiting, none in flight", st, want)
	}
	got := map[string]farm.Delivery{}
	for range want {
		d, err := q.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after the crash (%d of %d so far): %v", len(got), want, err)
		}
		if _, dup := got[d.Certname]; dup {
			t.Fatalf("%s delivered twice", d.Certname)
		}
		got[d.Certname] = d
		if err := q.Ack(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	// The child received the first crashReceived jobs (urgent ones first,
	// in enqueue order) and acked crashAcked of them; the others were in
	// flight and must come back with their attempt counted.
	var order []int
	for i := 0; i < crashJobs; i += 4 {
		order = append(order, i)
	}
	for i := range crashJobs {
		if i%4 != 0 {
			order = append(order, i)
		}
	}
	for pos, i := range order {
		c := crashCertname(i)
		d, ok := got[c]
		switch {
		case pos < crashAcked:
			if ok {
				t.Errorf("%s was acked before the crash but delivered again", c)
			}
		case !ok:
			t.Errorf("%s was lost in the crash", c)
		case d.Seq != uint64(i+1):
			t.Errorf("%s came back with seq %d, want %d", c, d.Seq, i+1)
		case pos < crashReceived && d.Attempts != 2:
			t.Errorf("%s was in flight at the crash; attempts %d, want 2", c, d.Attempts)
		case pos >= crashReceived && d.Attempts != 1:
			t.Errorf("%s was waiting at the crash; attempts %d, want 1", c, d.Attempts)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer rcancel()
	if d, err := q.Receive(rctx); err == nil {
		t.Fatalf("extra delivery after the crash: %+v", d)
	}
	checkOutboxAfterCrash(ctx, t, s)
}

// checkOutboxAfterCrash: every message the child sent is there, the one
// in flight at the kill received again on its second attempt, each group
// in order.
func checkOutboxAfterCrash(ctx context.Context, t *testing.T, s *localstore.Store) {
	ob := s.Outbox(localstore.OutboxOptions{VisibilityTimeout: time.Hour})
	if st, err := ob.Stats(ctx); err != nil || st.Backlog != len(crashMessages) {
		t.Fatalf("outbox stats after the crash: %+v, %v; want a backlog of %d", st, err, len(crashMessages))
	}
	var got []string
	for range crashMessages {
		ds, err := ob.Receive(ctx, 1, time.Second)
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive from the outbox after the crash (%v so far): %d messages, %v", got, len(ds), err)
		}
		got = append(got, fmt.Sprintf("%s %s attempt %d", ds[0].Group, ds[0].Body, ds[0].Attempts))
		if err := ob.Ack(ctx, ds[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		`crash-a.example.com {"n":1} attempt 2`,
		`crash-b.example.com {"n":1} attempt 1`,
		`crash-a.example.com {"n":2} attempt 1`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("outbox after the crash delivered %q, want %q", got, want)
	}
}
