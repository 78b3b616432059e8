package farmtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// QueueCaps says which optional promises of farm.Queue a driver makes.
type QueueCaps struct {
	// Collapses: a waiting job is merged with a newer job for the same node
	// (one delivery, the newer Seq/FactsDigest/CodeID, the more urgent lane,
	// the older EnqueuedAt).
	Collapses bool
	// NodeExclusive: while a job of a node is in flight, no other job of that
	// node is handed out until the delivery is acked, retried or times out.
	NodeExclusive bool
	// RetriedCountsAsInFlight: a retried delivery waiting out its delay is
	// counted in InFlight, not Depth (SQS hides it by changing its
	// visibility).
	RetriedCountsAsInFlight bool
	// NoOldestAge: Stats always reports an OldestAge of 0 (on SQS the age of
	// the oldest message is a CloudWatch metric, not a queue attribute).
	NoOldestAge bool
	// FinishedDeliveryIsNotFound: Ack or Retry of a delivery that is not in
	// flight (acked already, or never handed out) returns farm.ErrNotFound.
	FinishedDeliveryIsNotFound bool
}

// TestQueue checks that a farm.Queue keeps its contract. newQueue returns a
// fresh, empty queue for each subtest; it should set a short visibility
// timeout, about 2 to 5 seconds: the at-least-once subtests wait for it, and
// it must be well above the quarter second the suite watches for deliveries
// that must not happen.
func TestQueue(t *testing.T, newQueue func(t *testing.T) farm.Queue, caps QueueCaps) {
	t.Helper()
	type test struct {
		name string
		run  func(t *testing.T, q farm.Queue)
	}
	tests := []test{
		{"EnqueueReceiveAck", queueBasic},
		{"EnqueueStampsMissingTime", queueStampsTime},
		{"InvalidJobIsInvalid", queueInvalid},
		{"MalformedDeliveryIsInvalid", queueMalformedDelivery},
		{"EndedContextChangesNothing", queueEndedContext},
		{"RetryRedeliversAfterDelay", func(t *testing.T, q farm.Queue) { queueRetryDelay(t, q, caps) }},
		{"RetryWithoutDelay", queueRetryNow},
		{"UrgentBeforeBulk", queueUrgentFirst},
		{"ReceiveHonoursCancel", queueCancel},
		{"ReceiveWakesOnEnqueue", queueWakes},
		{"Stats", func(t *testing.T, q farm.Queue) { queueStats(t, q, caps) }},
		{"UnackedIsRedelivered", queueAtLeastOnce},
		{"ConcurrentProducersAndConsumers", queueConcurrent},
	}
	if caps.Collapses {
		tests = append(tests,
			test{"CollapseWaitingJobs", queueCollapse},
			test{"CollapseWithRetriedJob", queueCollapseRetried},
			test{"DifferentNodesDoNotCollapse", queueNoCollapseAcrossNodes},
			test{"DifferentSlotsDoNotCollapseOrBlock", queueSlots},
		)
	}
	if caps.NodeExclusive {
		tests = append(tests,
			test{"NodeExclusiveUntilAck", queueExclusiveAck},
			test{"NodeExclusiveUntilRetry", func(t *testing.T, q farm.Queue) { queueExclusiveRetry(t, q, caps) }},
			test{"NodeExclusiveUntilVisibilityTimeout", func(t *testing.T, q farm.Queue) { queueExclusiveTimeout(t, q, caps) }},
		)
	}
	if caps.FinishedDeliveryIsNotFound {
		tests = append(tests, test{"FinishedDeliveryIsNotFound", queueFinishedNotFound})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newQueue(t)) })
	}
}

// NewJob returns a job whose fields all depend on its arguments, for
// queue tests.
func NewJob(certname string, seq uint64, lane farm.Lane, at time.Time) farm.Job {
	return farm.Job{
		Certname:    certname,
		Environment: "production",
		Reason:      farm.ReasonFactsChanged,
		FactsDigest: farm.DigestOf(fmt.Appendf(nil, "facts %s %d", certname, seq)),
		CodeID:      fmt.Sprintf("code-%d", seq),
		Seq:         seq,
		Lane:        lane,
		EnqueuedAt:  at,
	}
}

func wantJob(t *testing.T, what string, got, want farm.Job) {
	t.Helper()
	if g, w := normalize(got), normalize(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

// wantRedelivery checks that d2 delivers job j again after d1: the next
// attempt, under a new delivery ID.
func wantRedelivery(t *testing.T, d1, d2 farm.Delivery, j farm.Job) {
	t.Helper()
	wantJob(t, "redelivered job", d2.Job, j)
	if d2.Attempts != d1.Attempts+1 {
		t.Fatalf("redelivery has Attempts %d, want %d", d2.Attempts, d1.Attempts+1)
	}
	if d2.ID == d1.ID {
		t.Fatalf("redelivery reuses delivery ID %q", d1.ID)
	}
}

func enqueue(t *testing.T, q farm.Queue, jobs ...farm.Job) {
	t.Helper()
	ctx := ctxFor(t, waitLong)
	for _, j := range jobs {
		must(t, "enqueue "+j.Certname, q.Enqueue(ctx, j))
	}
}

// receiveWithin calls Receive with ctx and fails the test, instead of
// hanging it, when Receive outlives ctx by more than a grace period.
func receiveWithin(ctx context.Context, t *testing.T, q farm.Queue) (farm.Delivery, error) {
	t.Helper()
	type result struct {
		d   farm.Delivery
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := q.Receive(ctx)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		return r.d, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-done:
		return r.d, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("Receive has not returned 10s after its context ended (%v)", ctx.Err())
		return farm.Delivery{}, nil
	}
}

// receive waits (generously) for a delivery.
func receive(t *testing.T, q farm.Queue) farm.Delivery {
	t.Helper()
	d, err := receiveWithin(ctxFor(t, waitLong), t, q)
	must(t, "receive", err)
	if d.ID == "" {
		t.Fatalf("delivery of %s has no ID", d.Certname)
	}
	return d
}

// receiveNothing checks that nothing is handed out for a while.
func receiveNothing(t *testing.T, q farm.Queue, why string) {
	t.Helper()
	d, err := receiveWithin(ctxFor(t, waitShort), t, q)
	if err == nil {
		t.Fatalf("%s: received %s seq %d (attempt %d), want nothing", why, d.Certname, d.Seq, d.Attempts)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: receive returned %v, want the context's deadline error", why, err)
	}
}

func ack(t *testing.T, q farm.Queue, d farm.Delivery) {
	t.Helper()
	must(t, fmt.Sprintf("ack %s seq %d", d.Certname, d.Seq), q.Ack(ctxFor(t, waitLong), d))
}

type laneStats map[farm.Lane]farm.QueueStats

func stats(t *testing.T, q farm.Queue) laneStats {
	t.Helper()
	st, err := q.Stats(ctxFor(t, waitLong))
	must(t, "stats", err)
	if len(st) > 0 && st[0].Lane != farm.LaneUrgent {
		t.Fatalf("stats begin with lane %q, want the urgent lane first: %+v", st[0].Lane, st)
	}
	m := laneStats{}
	for _, s := range st {
		if _, dup := m[s.Lane]; dup {
			t.Fatalf("stats list lane %q twice: %+v", s.Lane, st)
		}
		m[s.Lane] = s
	}
	for _, l := range []farm.Lane{farm.LaneUrgent, farm.LaneBulk} {
		if _, ok := m[l]; !ok {
			t.Fatalf("stats have no entry for lane %q: %+v", l, st)
		}
	}
	return m
}

func wantCounts(t *testing.T, q farm.Queue, what string, urgentDepth, urgentInFlight, bulkDepth, bulkInFlight int) laneStats {
	t.Helper()
	m := stats(t, q)
	u, b := m[farm.LaneUrgent], m[farm.LaneBulk]
	if u.Depth != urgentDepth || u.InFlight != urgentInFlight || b.Depth != bulkDepth || b.InFlight != bulkInFlight {
		t.Fatalf("%s: urgent depth %d in flight %d, bulk depth %d in flight %d; want %d %d, %d %d",
			what, u.Depth, u.InFlight, b.Depth, b.InFlight, urgentDepth, urgentInFlight, bulkDepth, bulkInFlight)
	}
	for _, s := range m {
		if s.Depth == 0 && s.OldestAge != 0 {
			t.Fatalf("%s: lane %s is empty but OldestAge is %v", what, s.Lane, s.OldestAge)
		}
	}
	return m
}

func queueBasic(t *testing.T, q farm.Queue) {
	j := NewJob("web01.example.com", 1, farm.LaneUrgent, time.Now().Add(-time.Second))
	enqueue(t, q, j)
	d := receive(t, q)
	wantJob(t, "delivered job", d.Job, j)
	if d.Attempts != 1 {
		t.Fatalf("first delivery has Attempts %d, want 1", d.Attempts)
	}
	wantCounts(t, q, "while in flight", 0, 1, 0, 0)
	ack(t, q, d)
	wantCounts(t, q, "after ack", 0, 0, 0, 0)
	receiveNothing(t, q, "after ack")
}

// queueStampsTime: a job enqueued without EnqueuedAt gets the enqueue
// time, so queue age means something.
func queueStampsTime(t *testing.T, q farm.Queue) {
	j := NewJob("web01.example.com", 1, farm.LaneBulk, time.Time{})
	before := time.Now()
	enqueue(t, q, j)
	after := time.Now()
	d := receive(t, q)
	at := d.EnqueuedAt
	if at.IsZero() || at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
		t.Fatalf("job enqueued between %v and %v without EnqueuedAt was delivered with EnqueuedAt %v", before, after, at)
	}
	ack(t, q, d)
}

// queueInvalid: a job that cannot be compiled or routed (bad certname,
// unknown lane) is refused with ErrInvalid, and nothing is enqueued.
func queueInvalid(t *testing.T, q farm.Queue) {
	ctx := ctxFor(t, waitLong)
	for _, tc := range []struct {
		name string
		job  farm.Job
	}{
		{"bad certname", NewJob("Bad/Name", 1, farm.LaneUrgent, base)},
		{"empty certname", NewJob("", 1, farm.LaneUrgent, base)},
		{"no lane", NewJob("ok.example.com", 1, "", base)},
		{"unknown lane", NewJob("ok.example.com", 1, "whenever", base)},
	} {
		err := q.Enqueue(ctx, tc.job)
		wantErrIs(t, "enqueue job with "+tc.name, err, farm.ErrInvalid)
	}
	wantCounts(t, q, "after refused jobs", 0, 0, 0, 0)
}

// queueMalformedDelivery: Ack and Retry of a delivery Receive cannot have
// returned (no ID, a lane other than the two) are ErrInvalid and leave
// the real delivery in flight.
func queueMalformedDelivery(t *testing.T, q farm.Queue) {
	ctx := ctxFor(t, waitLong)
	enqueue(t, q, NewJob("malformed.example.com", 1, farm.LaneUrgent, base))
	d := receive(t, q)
	noID, noLane := d, d
	noID.ID = ""
	noLane.Lane = "whenever"
	for name, bad := range map[string]farm.Delivery{"without an ID": noID, "with an unknown lane": noLane} {
		wantErrIs(t, "ack a delivery "+name, q.Ack(ctx, bad), farm.ErrInvalid)
		wantErrIs(t, "retry a delivery "+name, q.Retry(ctx, bad, 0), farm.ErrInvalid)
	}
	wantCounts(t, q, "after refused acks and retries", 0, 1, 0, 0)
	ack(t, q, d)
	wantCounts(t, q, "after ack", 0, 0, 0, 0)
}

// queueEndedContext: a call whose context has ended returns its error,
// and Enqueue, Ack and Retry change nothing.
func queueEndedContext(t *testing.T, q farm.Queue) {
	enqueue(t, q, NewJob("ctx.example.com", 1, farm.LaneUrgent, base))
	d := receive(t, q)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	wantErrIs(t, "enqueue with an ended context", q.Enqueue(ended, NewJob("other.example.com", 1, farm.LaneBulk, base)), context.Canceled)
	wantErrIs(t, "ack with an ended context", q.Ack(ended, d), context.Canceled)
	wantErrIs(t, "retry with an ended context", q.Retry(ended, d, 0), context.Canceled)
	_, err := q.Stats(ended)
	wantErrIs(t, "stats with an ended context", err, context.Canceled)
	wantCounts(t, q, "after calls with an ended context", 0, 1, 0, 0)
	receiveNothing(t, q, "the delivery is still in flight and nothing else was enqueued")
	ack(t, q, d)
	wantCounts(t, q, "after ack", 0, 0, 0, 0)
}

func queueRetryDelay(t *testing.T, q farm.Queue, caps QueueCaps) {
	j := NewJob("retry.example.com", 3, farm.LaneUrgent, base)
	enqueue(t, q, j)
	d1 := receive(t, q)
	const delay = 400 * time.Millisecond
	retried := time.Now()
	must(t, "retry", q.Retry(ctxFor(t, waitLong), d1, delay))
	if caps.RetriedCountsAsInFlight {
		wantCounts(t, q, "right after retry", 0, 1, 0, 0)
	} else {
		wantCounts(t, q, "right after retry", 1, 0, 0, 0)
	}
	d2 := receive(t, q)
	if waited := time.Since(retried); waited < delay {
		t.Fatalf("retried delivery came back after %v, before its %v delay", waited, delay)
	}
	wantRedelivery(t, d1, d2, j)
	ack(t, q, d2)
	wantCounts(t, q, "after ack", 0, 0, 0, 0)
}

func queueRetryNow(t *testing.T, q farm.Queue) {
	j := NewJob("again.example.com", 1, farm.LaneBulk, base)
	enqueue(t, q, j)
	d := receive(t, q)
	for attempt := 2; attempt <= 4; attempt++ {
		must(t, "retry", q.Retry(ctxFor(t, waitLong), d, 0))
		d = receive(t, q)
		wantJob(t, "redelivered job", d.Job, j)
		if d.Attempts != attempt {
			t.Fatalf("delivery after %d retries has Attempts %d, want %d", attempt-1, d.Attempts, attempt)
		}
	}
	ack(t, q, d)
	wantCounts(t, q, "after ack", 0, 0, 0, 0)
}

func queueUrgentFirst(t *testing.T, q farm.Queue) {
	// Bulk jobs are older, so only the lane can put urgent ones first.
	for i := range 5 {
		enqueue(t, q, NewJob(fmt.Sprintf("bulk%d.example.com", i), 1, farm.LaneBulk, base.Add(time.Duration(i)*time.Second)))
	}
	for i := range 3 {
		enqueue(t, q, NewJob(fmt.Sprintf("urgent%d.example.com", i), 1, farm.LaneUrgent, base.Add(time.Hour)))
	}
	var got []farm.Delivery
	next := func(want farm.Lane) {
		t.Helper()
		d := receive(t, q)
		got = append(got, d)
		if d.Lane != want {
			t.Fatalf("delivery %d: %s from lane %s, want lane %s", len(got), d.Certname, d.Lane, want)
		}
	}
	for range 3 {
		next(farm.LaneUrgent)
	}
	next(farm.LaneBulk)
	enqueue(t, q, NewJob("late-urgent.example.com", 1, farm.LaneUrgent, base.Add(2*time.Hour)))
	next(farm.LaneUrgent)
	for range 4 {
		next(farm.LaneBulk)
	}
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d.Certname] {
			t.Fatalf("%s delivered twice", d.Certname)
		}
		seen[d.Certname] = true
		ack(t, q, d)
	}
	wantCounts(t, q, "after acking all", 0, 0, 0, 0)
}

func queueCancel(t *testing.T, q farm.Queue) {
	t.Run("AlreadyCancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := receiveWithin(ctx, t, q)
		wantErrIs(t, "receive with a cancelled context", err, context.Canceled)
	})
	t.Run("CancelledWhileBlocked", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := q.Receive(ctx)
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			wantErrIs(t, "receive cancelled while blocked", err, context.Canceled)
		case <-time.After(waitLong):
			t.Fatal("receive did not return after its context was cancelled")
		}
	})
	t.Run("Deadline", func(t *testing.T) {
		receiveNothing(t, q, "empty queue")
	})
	t.Run("CancelledReceiveTakesNothing", func(t *testing.T) {
		j := NewJob("after-cancel.example.com", 1, farm.LaneUrgent, base)
		enqueue(t, q, j)
		d := receive(t, q)
		wantJob(t, "job enqueued after cancelled receives", d.Job, j)
		if d.Attempts != 1 {
			t.Fatalf("job enqueued after cancelled receives has Attempts %d, want 1", d.Attempts)
		}
		ack(t, q, d)
	})
}

func queueWakes(t *testing.T, q farm.Queue) {
	got := make(chan farm.Delivery, 1)
	errc := make(chan error, 1)
	go func() {
		d, err := q.Receive(ctxFor(t, waitLong))
		if err != nil {
			errc <- err
			return
		}
		got <- d
	}()
	time.Sleep(100 * time.Millisecond) // let the receiver block
	j := NewJob("wake.example.com", 1, farm.LaneBulk, base)
	enqueue(t, q, j)
	select {
	case d := <-got:
		wantJob(t, "job received by a blocked receiver", d.Job, j)
		ack(t, q, d)
	case err := <-errc:
		t.Fatalf("blocked receive: %v", err)
	case <-time.After(waitLong):
		t.Fatal("a receiver blocked on an empty queue never got the job enqueued later")
	}
}

func queueStats(t *testing.T, q farm.Queue, caps QueueCaps) {
	wantCounts(t, q, "empty queue", 0, 0, 0, 0)
	now := time.Now()
	enqueue(t, q,
		NewJob("u1.example.com", 1, farm.LaneUrgent, now.Add(-10*time.Second)),
		NewJob("u2.example.com", 1, farm.LaneUrgent, now.Add(-5*time.Second)),
		NewJob("b1.example.com", 1, farm.LaneBulk, now.Add(-60*time.Second)),
		NewJob("b2.example.com", 1, farm.LaneBulk, now.Add(-30*time.Second)),
		NewJob("b3.example.com", 1, farm.LaneBulk, now.Add(-20*time.Second)),
	)
	m := wantCounts(t, q, "after 2 urgent, 3 bulk", 2, 0, 3, 0)
	wantAge := func(m laneStats, l farm.Lane, atLeast time.Duration) {
		t.Helper()
		if caps.NoOldestAge {
			if age := m[l].OldestAge; age != 0 {
				t.Fatalf("lane %s OldestAge = %v from a driver that says it reports none", l, age)
			}
			return
		}
		// A minute of slack above: only a wrong origin could be that far off.
		if age := m[l].OldestAge; age < atLeast || age > atLeast+time.Minute {
			t.Fatalf("lane %s OldestAge = %v, want about %v", l, age, atLeast)
		}
	}
	wantAge(m, farm.LaneUrgent, 10*time.Second)
	wantAge(m, farm.LaneBulk, 60*time.Second)

	var ds []farm.Delivery
	for range 2 {
		ds = append(ds, receive(t, q))
	}
	m = wantCounts(t, q, "two urgent in flight", 0, 2, 3, 0)
	wantAge(m, farm.LaneBulk, 60*time.Second)
	ack(t, q, ds[0])
	wantCounts(t, q, "one urgent acked", 0, 1, 3, 0)
	ds = ds[1:]
	d := receive(t, q)
	m = wantCounts(t, q, "one bulk in flight", 0, 1, 2, 1)
	if d.Certname == "b1.example.com" {
		wantAge(m, farm.LaneBulk, 30*time.Second)
	} else {
		wantAge(m, farm.LaneBulk, 60*time.Second)
	}
	ds = append(ds, d, receive(t, q), receive(t, q))
	wantCounts(t, q, "all in flight", 0, 1, 0, 3)
	must(t, "retry", q.Retry(ctxFor(t, waitLong), ds[len(ds)-1], 10*time.Minute))
	retried := 0 // the retried bulk job counts as waiting, or as in flight
	if caps.RetriedCountsAsInFlight {
		retried = 1
	}
	wantCounts(t, q, "one bulk retried later", 0, 1, 1-retried, 2+retried)
	for _, d := range ds[:len(ds)-1] {
		ack(t, q, d)
	}
	wantCounts(t, q, "after acks", 0, 0, 1-retried, retried)
}

// queueAtLeastOnce: a delivery neither acked nor retried comes back after
// the driver's visibility timeout.
func queueAtLeastOnce(t *testing.T, q farm.Queue) {
	j := NewJob("lost-worker.example.com", 2, farm.LaneUrgent, base)
	enqueue(t, q, j)
	d1 := receive(t, q) // and never finished
	d2 := receive(t, q)
	wantRedelivery(t, d1, d2, j)
	ack(t, q, d2)
	wantCounts(t, q, "after acking the redelivery", 0, 0, 0, 0)
}

func queueFinishedNotFound(t *testing.T, q farm.Queue) {
	ctx := ctxFor(t, waitLong)
	enqueue(t, q, farm.Job{Certname: "a.example.com", Lane: farm.LaneUrgent, Seq: 1})
	d := receive(t, q)
	ack(t, q, d)
	for name, err := range map[string]error{
		"ack again":       q.Ack(ctx, d),
		"retry after ack": q.Retry(ctx, d, 0),
		"ack unknown":     q.Ack(ctx, farm.Delivery{Job: farm.Job{Certname: "a.example.com", Lane: farm.LaneUrgent}, ID: "nope"}),
	} {
		if !errors.Is(err, farm.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
}

func queueConcurrent(t *testing.T, q farm.Queue) {
	ctx := ctxFor(t, 4*waitLong)
	const producers, each, consumers = 8, 25, 4
	total := producers * each
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	errc := make(chan error, producers+consumers)
	var pw, cw sync.WaitGroup
	for p := range producers {
		pw.Go(func() {
			for i := range each {
				lane := farm.LaneBulk
				if i%3 == 0 {
					lane = farm.LaneUrgent
				}
				if err := q.Enqueue(ctx, NewJob(fmt.Sprintf("p%d-n%d.example.com", p, i), 1, lane, time.Now())); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	for range consumers {
		cw.Go(func() {
			for {
				d, err := q.Receive(rctx)
				if err != nil {
					if rctx.Err() == nil {
						errc <- err
					}
					return
				}
				if err := q.Ack(ctx, d); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				seen[d.Certname]++
				if len(seen) == total {
					stop()
				}
				mu.Unlock()
			}
		})
	}
	pw.Wait()
	cw.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("%d of %d jobs delivered", len(seen), total)
	}
	wantCounts(t, q, "after all acked", 0, 0, 0, 0)
}

func queueCollapse(t *testing.T, q farm.Queue) {
	const c = "collapse.example.com"
	older, newer := base, base.Add(time.Minute)
	for _, tc := range []struct {
		name        string
		first, then farm.Job
		want        farm.Job
	}{
		{
			name:  "bulk then newer urgent",
			first: NewJob(c, 1, farm.LaneBulk, older),
			then:  NewJob(c, 2, farm.LaneUrgent, newer),
			want:  withLaneAt(NewJob(c, 2, farm.LaneUrgent, newer), farm.LaneUrgent, older),
		},
		{
			name:  "urgent then newer bulk",
			first: NewJob(c, 1, farm.LaneUrgent, older),
			then:  NewJob(c, 2, farm.LaneBulk, newer),
			want:  withLaneAt(NewJob(c, 2, farm.LaneBulk, newer), farm.LaneUrgent, older),
		},
		{
			name:  "newer seq enqueued first",
			first: NewJob(c, 5, farm.LaneBulk, newer),
			then:  NewJob(c, 4, farm.LaneUrgent, older),
			want:  withLaneAt(NewJob(c, 5, farm.LaneBulk, newer), farm.LaneUrgent, older),
		},
		{
			name:  "bulk then bulk",
			first: NewJob(c, 1, farm.LaneBulk, older),
			then:  withReason(NewJob(c, 2, farm.LaneBulk, newer), farm.ReasonCodeChanged),
			want:  withLaneAt(withReason(NewJob(c, 2, farm.LaneBulk, newer), farm.ReasonCodeChanged), farm.LaneBulk, older),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enqueue(t, q, tc.first, tc.then)
			if tc.want.Lane == farm.LaneUrgent {
				wantCounts(t, q, "two jobs of one node enqueued", 1, 0, 0, 0)
			} else {
				wantCounts(t, q, "two jobs of one node enqueued", 0, 0, 1, 0)
			}
			d := receive(t, q)
			wantJob(t, "collapsed job", d.Job, tc.want)
			receiveNothing(t, q, "the collapsed job was the only one")
			ack(t, q, d)
			wantCounts(t, q, "after ack", 0, 0, 0, 0)
		})
	}
}

func withLaneAt(j farm.Job, lane farm.Lane, at time.Time) farm.Job {
	j.Lane, j.EnqueuedAt = lane, at
	return j
}

func withReason(j farm.Job, reason string) farm.Job {
	j.Reason = reason
	return j
}

// queueCollapseRetried: a job waiting again after Retry is collapsed with a
// newer job like any waiting job.
func queueCollapseRetried(t *testing.T, q farm.Queue) {
	const c = "flaky.example.com"
	enqueue(t, q, NewJob(c, 1, farm.LaneBulk, base))
	d := receive(t, q)
	must(t, "retry", q.Retry(ctxFor(t, waitLong), d, 0))
	enqueue(t, q, NewJob(c, 2, farm.LaneUrgent, base.Add(time.Minute)))
	wantCounts(t, q, "retried job and newer job", 1, 0, 0, 0)
	d2 := receive(t, q)
	wantJob(t, "collapsed job", d2.Job, withLaneAt(NewJob(c, 2, farm.LaneUrgent, base), farm.LaneUrgent, base))
	receiveNothing(t, q, "the collapsed job was the only one")
	ack(t, q, d2)
}

func queueNoCollapseAcrossNodes(t *testing.T, q farm.Queue) {
	enqueue(t, q,
		NewJob("a.example.com", 1, farm.LaneUrgent, base),
		NewJob("b.example.com", 1, farm.LaneUrgent, base),
		NewJob("a.example.com", 2, farm.LaneUrgent, base),
	)
	wantCounts(t, q, "two nodes", 2, 0, 0, 0)
	d1, d2 := receive(t, q), receive(t, q)
	got := map[string]uint64{d1.Certname: d1.Seq, d2.Certname: d2.Seq}
	if got["a.example.com"] != 2 || got["b.example.com"] != 1 {
		t.Fatalf("deliveries %v, want a seq 2 and b seq 1", got)
	}
	ack(t, q, d1)
	ack(t, q, d2)
}

// queueSlots: a node's candidate precompile and its served catalog's
// compile are different jobs: neither collapses into the other, and both
// may be in flight at once.
func queueSlots(t *testing.T, q farm.Queue) {
	served := NewJob("a.example.com", 2, farm.LaneUrgent, base)
	candidate := NewJob("a.example.com", 1, farm.LaneBulk, base)
	candidate.Slot = farm.SlotCandidate
	enqueue(t, q, candidate, served)
	wantCounts(t, q, "two slots of one node", 1, 0, 1, 0)
	d1 := receive(t, q)
	d2 := receive(t, q)
	if d1.Slot != farm.SlotServed || d1.Seq != 2 || d2.Slot != farm.SlotCandidate || d2.Seq != 1 {
		t.Fatalf("deliveries (%q seq %d), (%q seq %d); want the served slot (urgent) then the candidate", d1.Slot, d1.Seq, d2.Slot, d2.Seq)
	}
	ack(t, q, d1)
	ack(t, q, d2)
}

func queueExclusiveAck(t *testing.T, q farm.Queue) {
	const n1, n2 = "busy.example.com", "other.example.com"
	enqueue(t, q, NewJob(n1, 1, farm.LaneUrgent, base))
	d1 := receive(t, q)
	// The newer urgent job of n1 must not hold back n2's bulk job.
	enqueue(t, q, NewJob(n1, 2, farm.LaneUrgent, base.Add(time.Second)), NewJob(n2, 1, farm.LaneBulk, base.Add(time.Second)))
	wantCounts(t, q, "n1 in flight, n1 and n2 waiting", 1, 1, 1, 0)
	d2 := receive(t, q)
	if d2.Certname != n2 {
		t.Fatalf("while %s is in flight, received %s seq %d, want %s", n1, d2.Certname, d2.Seq, n2)
	}
	receiveNothing(t, q, n1+" is still in flight")
	ack(t, q, d2)
	receiveNothing(t, q, n1+" is still in flight after another node's ack")
	ack(t, q, d1)
	d3 := receive(t, q)
	wantJob(t, "job of the node after its ack", d3.Job, NewJob(n1, 2, farm.LaneUrgent, base.Add(time.Second)))
	ack(t, q, d3)
	wantCounts(t, q, "after acks", 0, 0, 0, 0)
}

func queueExclusiveRetry(t *testing.T, q farm.Queue, caps QueueCaps) {
	const c = "busy.example.com"
	enqueue(t, q, NewJob(c, 1, farm.LaneUrgent, base))
	d1 := receive(t, q)
	enqueue(t, q, NewJob(c, 2, farm.LaneUrgent, base.Add(time.Second)))
	receiveNothing(t, q, c+" is in flight")
	must(t, "retry", q.Retry(ctxFor(t, waitLong), d1, 0))
	if caps.Collapses {
		d := receive(t, q)
		wantJob(t, "retried job collapsed with the newer one", d.Job, NewJob(c, 2, farm.LaneUrgent, base))
		receiveNothing(t, q, "the collapsed job was the only one")
		ack(t, q, d)
		return
	}
	seqs := map[uint64]bool{}
	for range 2 {
		d := receive(t, q)
		seqs[d.Seq] = true
		receiveNothing(t, q, c+" is in flight again")
		ack(t, q, d)
	}
	if !seqs[1] || !seqs[2] {
		t.Fatalf("after retry, delivered seqs %v, want 1 and 2", seqs)
	}
}

func queueExclusiveTimeout(t *testing.T, q farm.Queue, caps QueueCaps) {
	const c = "slow.example.com"
	enqueue(t, q, NewJob(c, 1, farm.LaneUrgent, base))
	receive(t, q) // and never finished
	enqueue(t, q, NewJob(c, 2, farm.LaneBulk, base.Add(time.Second)))
	d2 := receive(t, q) // after the visibility timeout
	if d2.Certname != c {
		t.Fatalf("received %s, want %s", d2.Certname, c)
	}
	if caps.Collapses {
		wantJob(t, "timed-out job collapsed with the newer one", d2.Job, NewJob(c, 2, farm.LaneUrgent, base))
		receiveNothing(t, q, "the collapsed job was the only one")
	} else {
		receiveNothing(t, q, c+" is in flight again")
	}
	ack(t, q, d2)
}
