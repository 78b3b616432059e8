package sqsqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/compilefarm/compilefarm/internal/emulator"
	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

func newQueue(t *testing.T, maxReceiveCount int, visibility time.Duration) (*sqsqueue.Queue, sqsqueue.QueueURLs) {
	t.Helper()
	urls := freshQueues(t, maxReceiveCount)
	opts := urls.Options()
	opts.VisibilityTimeout = visibility
	return sqsqueue.New(client(t), opts), urls
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// job is farmtest.NewJob at a fixed enqueue time with nanoseconds, which
// the message encoding must keep.
func job(certname string, seq uint64, lane farm.Lane) farm.Job {
	return farmtest.NewJob(certname, seq, lane, time.Date(2024, 5, 17, 9, 30, 12, 123456789, time.UTC))
}

func mustDo(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func receive(t *testing.T, q *sqsqueue.Queue, within time.Duration) farm.Delivery {
	t.Helper()
	d, err := q.Receive(ctxT(t, within))
	mustDo(t, "receive", err)
	return d
}

func wantNothing(t *testing.T, q *sqsqueue.Queue, within time.Duration, why string) {
	t.Helper()
	d, err := q.Receive(ctxT(t, within))
	if err == nil {
		t.Fatalf("%s: received %s seq %d (attempt %d), want nothing", why, d.Certname, d.Seq, d.Attempts)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: receive: %v, want the deadline", why, err)
	}
}

func sameJob(t *testing.T, what string, got, want farm.Job) {
	t.Helper()
	got.EnqueuedAt, want.EnqueuedAt = got.EnqueuedAt.UTC().Round(0), want.EnqueuedAt.UTC().Round(0)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

func wantStats(t *testing.T, q *sqsqueue.Queue, what string, ud, ui, bd, bi int) {
	t.Helper()
	st, err := q.Stats(ctxT(t, 10*time.Second))
	mustDo(t, "stats", err)
	if len(st) != 2 || st[0].Lane != farm.LaneUrgent || st[1].Lane != farm.LaneBulk {
		t.Fatalf("%s: stats %+v, want urgent then bulk", what, st)
	}
	u, b := st[0], st[1]
	if u.Depth != ud || u.InFlight != ui || b.Depth != bd || b.InFlight != bi {
		t.Fatalf("%s: urgent depth %d in flight %d, bulk depth %d in flight %d; want %d %d, %d %d",
			what, u.Depth, u.InFlight, b.Depth, b.InFlight, ud, ui, bd, bi)
	}
	for _, s := range st {
		if s.OldestAge != 0 {
			t.Fatalf("%s: lane %s OldestAge %v, want 0 (not available from SQS)", what, s.Lane, s.OldestAge)
		}
	}
}

// A delivery neither acked nor retried comes back after the visibility
// timeout, as the next attempt, with a new receipt handle.
func TestRedeliveryAfterVisibilityTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	q, _ := newQueue(t, 10, time.Second)
	j := job("lost.example.com", 1, farm.LaneBulk)
	mustDo(t, "enqueue", q.Enqueue(ctxT(t, 10*time.Second), j))
	d1 := receive(t, q, 10*time.Second)
	at := time.Now()
	wantStats(t, q, "in flight", 0, 0, 0, 1)
	d2 := receive(t, q, 10*time.Second)
	if waited := time.Since(at); waited < 900*time.Millisecond {
		t.Fatalf("redelivered after %v, before the 1s visibility timeout", waited)
	}
	sameJob(t, "redelivered job", d2.Job, j)
	if d1.Attempts != 1 || d2.Attempts != 2 || d1.ID == d2.ID {
		t.Fatalf("deliveries: attempts %d then %d, IDs equal %v; want 1, 2, different", d1.Attempts, d2.Attempts, d1.ID == d2.ID)
	}
	mustDo(t, "ack", q.Ack(ctxT(t, 10*time.Second), d2))
	wantStats(t, q, "after ack", 0, 0, 0, 0)
}

// A job received maxReceiveCount times is moved to its lane's dead-letter
// queue by SQS and is not handed out again.
func TestDeadLetterAfterMaxReceiveCount(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	const maxReceives = 3
	for _, lane := range []farm.Lane{farm.LaneUrgent, farm.LaneBulk} {
		t.Run(string(lane), func(t *testing.T) {
			q, urls := newQueue(t, maxReceives, 2*time.Second)
			j := job("poison.example.com", 7, lane)
			mustDo(t, "enqueue", q.Enqueue(ctxT(t, 10*time.Second), j))
			for attempt := 1; attempt <= maxReceives; attempt++ {
				d := receive(t, q, 10*time.Second)
				if d.Attempts != attempt {
					t.Fatalf("delivery %d has Attempts %d", attempt, d.Attempts)
				}
				mustDo(t, "retry", q.Retry(ctxT(t, 10*time.Second), d, 0))
			}
			wantNothing(t, q, 1500*time.Millisecond, "job received maxReceiveCount times")
			wantStats(t, q, "after dead-lettering", 0, 0, 0, 0)

			dlqName := queueName(urls.DLQ(lane))
			in := inspectQueue(t, dlqName)
			if len(in.Messages.Ready) != 1 {
				t.Fatalf("dead-letter queue %s holds %d ready messages, want 1: %+v", dlqName, len(in.Messages.Ready), in.Messages)
			}
			var got map[string]any
			mustDo(t, "decode dead-lettered body", json.Unmarshal([]byte(in.Messages.Ready[0].Body), &got))
			if got["certname"] != j.Certname || got["seq"] != float64(j.Seq) || got["lane"] != string(lane) {
				t.Fatalf("dead-lettered body %v is not the job", got)
			}
			// And the SDK sees it there too.
			out, err := client(t).ReceiveMessage(ctxT(t, 10*time.Second), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(urls.DLQ(lane)), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			})
			mustDo(t, "receive from the dead-letter queue", err)
			if len(out.Messages) != 1 || !strings.Contains(aws.ToString(out.Messages[0].Body), `"certname":"poison.example.com"`) {
				t.Fatalf("dead-letter queue gave %d messages: %+v", len(out.Messages), out.Messages)
			}
		})
	}
}

func queueName(url string) string { return url[strings.LastIndex(url, "/")+1:] }

// Urgent jobs are handed out before bulk ones, however old the bulk ones
// are, and a receiver waiting on empty queues gets an urgent job at once
// and a bulk job within the wait time.
func TestUrgentBeforeBulk(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	q, _ := newQueue(t, 10, 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	for i := range 10 {
		mustDo(t, "enqueue bulk", q.Enqueue(ctx, job(fmt.Sprintf("bulk%d.example.com", i), 1, farm.LaneBulk)))
	}
	mustDo(t, "enqueue urgent", q.Enqueue(ctx, job("urgent.example.com", 1, farm.LaneUrgent)))
	d := receive(t, q, 10*time.Second)
	if d.Lane != farm.LaneUrgent {
		t.Fatalf("first delivery %s from lane %s, want the urgent job", d.Certname, d.Lane)
	}
	mustDo(t, "ack", q.Ack(ctx, d))
	for range 10 {
		d := receive(t, q, 10*time.Second)
		if d.Lane != farm.LaneBulk {
			t.Fatalf("got %s from %s, want bulk", d.Certname, d.Lane)
		}
		mustDo(t, "ack", q.Ack(ctx, d))
	}

	for _, tc := range []struct {
		lane  farm.Lane
		limit time.Duration
	}{
		{farm.LaneUrgent, 500 * time.Millisecond},                        // the urgent long poll wakes
		{farm.LaneBulk, sqsqueue.DefaultWaitTime + 500*time.Millisecond}, // the next round's bulk poll
	} {
		got := make(chan farm.Delivery, 1)
		go func() {
			d, err := q.Receive(ctx)
			if err == nil {
				got <- d
			}
		}()
		time.Sleep(300 * time.Millisecond) // the receiver is in its long poll now
		start := time.Now()
		mustDo(t, "enqueue", q.Enqueue(ctx, job("late-"+string(tc.lane)+".example.com", 1, tc.lane)))
		select {
		case d := <-got:
			if took := time.Since(start); took > tc.limit {
				t.Errorf("a waiting receiver got the %s job after %v, want within %v", tc.lane, took, tc.limit)
			}
			mustDo(t, "ack", q.Ack(ctx, d))
		case <-ctx.Done():
			t.Fatalf("a waiting receiver never got the %s job", tc.lane)
		}
	}
}

// The message body is the job as JSON with a version, and the message
// carries attributes for operators.
func TestMessageShape(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	q, urls := newQueue(t, 10, 5*time.Second)
	j := job("web01.example.com", 42, farm.LaneBulk)
	j.Reason = farm.ReasonPrecompile
	j.Slot = farm.SlotCandidate
	mustDo(t, "enqueue", q.Enqueue(ctxT(t, 10*time.Second), j))
	out, err := client(t).ReceiveMessage(ctxT(t, 10*time.Second), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(urls.BulkURL), MaxNumberOfMessages: 1, WaitTimeSeconds: 1,
		MessageAttributeNames: []string{"All"},
	})
	mustDo(t, "receive raw", err)
	if len(out.Messages) != 1 {
		t.Fatalf("bulk queue gave %d messages, want 1", len(out.Messages))
	}
	m := out.Messages[0]
	var body map[string]any
	mustDo(t, "decode body", json.Unmarshal([]byte(aws.ToString(m.Body)), &body))
	want := map[string]any{
		"v":            float64(1),
		"certname":     "web01.example.com",
		"environment":  "production",
		"reason":       "precompile",
		"facts_digest": string(j.FactsDigest),
		"code_id":      "code-42",
		"seq":          float64(42),
		"lane":         "bulk",
		"slot":         "candidate",
		"enqueued_at":  "2024-05-17T09:30:12.123456789Z",
	}
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("message body\n got  %v\n want %v", body, want)
	}
	attrs := map[string]string{}
	for k, v := range m.MessageAttributes {
		attrs[k] = aws.ToString(v.DataType) + ":" + aws.ToString(v.StringValue)
	}
	wantAttrs := map[string]string{
		"certname": "String:web01.example.com", "environment": "String:production", "reason": "String:precompile",
		"lane": "String:bulk", "seq": "Number:42", "code_id": "String:code-42", "slot": "String:candidate",
		"message_version": "Number:1",
	}
	if !reflect.DeepEqual(attrs, wantAttrs) {
		t.Fatalf("message attributes\n got  %v\n want %v", attrs, wantAttrs)
	}

	// A served-slot job has no slot, in the body or the attributes.
	j2 := job("web02.example.com", 1, farm.LaneUrgent)
	mustDo(t, "enqueue", q.Enqueue(ctxT(t, 10*time.Second), j2))
	out, err = client(t).ReceiveMessage(ctxT(t, 10*time.Second), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(urls.UrgentURL), MaxNumberOfMessages: 1, WaitTimeSeconds: 1,
		MessageAttributeNames: []string{"All"},
	})
	mustDo(t, "receive raw", err)
	if len(out.Messages) != 1 {
		t.Fatalf("urgent queue gave %d messages, want 1", len(out.Messages))
	}
	if b := aws.ToString(out.Messages[0].Body); strings.Contains(b, "slot") {
		t.Fatalf("served-slot job body names a slot: %s", b)
	}
	if _, ok := out.Messages[0].MessageAttributes["slot"]; ok {
		t.Fatal("served-slot job has a slot attribute")
	}
}

// Retry hides the message for the delay: SQS counts it as in flight, and
// hands it out again after the delay as the next attempt.
func TestRetryHidesTheMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	q, _ := newQueue(t, 10, 5*time.Second)
	j := job("retry.example.com", 3, farm.LaneUrgent)
	mustDo(t, "enqueue", q.Enqueue(ctxT(t, 10*time.Second), j))
	d1 := receive(t, q, 10*time.Second)
	retried := time.Now()
	mustDo(t, "retry", q.Retry(ctxT(t, 10*time.Second), d1, 400*time.Millisecond)) // rounded up to 1s
	wantStats(t, q, "right after retry", 0, 1, 0, 0)
	d2 := receive(t, q, 10*time.Second)
	if waited := time.Since(retried); waited < 900*time.Millisecond {
		t.Fatalf("retried delivery came back after %v, before its delay (rounded up to 1s)", waited)
	}
	sameJob(t, "redelivered job", d2.Job, j)
	if d2.Attempts != 2 || d2.ID == d1.ID {
		t.Fatalf("redelivery: attempts %d, same ID %v; want 2, a new ID", d2.Attempts, d2.ID == d1.ID)
	}
	mustDo(t, "ack", q.Ack(ctxT(t, 10*time.Second), d2))
	wantStats(t, q, "after ack", 0, 0, 0, 0)
}

// The counts of the contract suite's Stats subtest, with SQS's semantics:
// a retried message is in flight and OldestAge is 0.
func TestStatsCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	q, _ := newQueue(t, 10, 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	wantStats(t, q, "empty", 0, 0, 0, 0)
	for _, j := range []farm.Job{
		job("u1.example.com", 1, farm.LaneUrgent), job("u2.example.com", 1, farm.LaneUrgent),
		job("b1.example.com", 1, farm.LaneBulk), job("b2.example.com", 1, farm.LaneBulk), job("b3.example.com", 1, farm.LaneBulk),
	} {
		mustDo(t, "enqueue", q.Enqueue(ctx, j))
	}
	wantStats(t, q, "after 2 urgent, 3 bulk", 2, 0, 3, 0)
	ds := []farm.Delivery{receive(t, q, 10*time.Second), receive(t, q, 10*time.Second)}
	wantStats(t, q, "two urgent in flight", 0, 2, 3, 0)
	mustDo(t, "ack", q.Ack(ctx, ds[0]))
	wantStats(t, q, "one urgent acked", 0, 1, 3, 0)
	ds = ds[1:]
	ds = append(ds, receive(t, q, 10*time.Second))
	wantStats(t, q, "one bulk in flight", 0, 1, 2, 1)
	ds = append(ds, receive(t, q, 10*time.Second), receive(t, q, 10*time.Second))
	wantStats(t, q, "all in flight", 0, 1, 0, 3)
	mustDo(t, "retry", q.Retry(ctx, ds[len(ds)-1], 10*time.Minute))
	wantStats(t, q, "one bulk retried later (hidden: in flight)", 0, 1, 0, 3)
	for _, d := range ds[:len(ds)-1] {
		mustDo(t, "ack", q.Ack(ctx, d))
	}
	wantStats(t, q, "after acks", 0, 0, 0, 1)
}

// A Receive cancelled during its long poll leaves the poll running; the
// message it takes is handed to the next Receive as the same attempt, or,
// when nobody asks for it, returned to the queue.
func TestCancelledPollParksItsMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	cancelDuringPoll := func(t *testing.T, q *sqsqueue.Queue) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := q.Receive(ctx); done <- err }()
		time.Sleep(200 * time.Millisecond) // in the urgent long poll
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled receive: %v", err)
		}
	}
	t.Run("Claimed", func(t *testing.T) {
		q, urls := newQueue(t, 10, 4*time.Second)
		cancelDuringPoll(t, q)
		mustDo(t, "enqueue", q.Enqueue(ctxT(t, 10*time.Second), job("parked.example.com", 1, farm.LaneUrgent)))
		time.Sleep(300 * time.Millisecond)
		in := inspectQueue(t, queueName(urls.UrgentURL))
		if len(in.Messages.Inflight) != 1 {
			t.Fatalf("the abandoned poll did not take the job: %+v", in.Messages)
		}
		d := receive(t, q, 10*time.Second)
		if d.Certname != "parked.example.com" || d.Attempts != 1 {
			t.Fatalf("got %s attempt %d, want parked.example.com attempt 1", d.Certname, d.Attempts)
		}
		mustDo(t, "ack", q.Ack(ctxT(t, 10*time.Second), d))
		wantStats(t, q, "after ack", 0, 0, 0, 0)
	})
	t.Run("Unclaimed", func(t *testing.T) {
		q, urls := newQueue(t, 10, 4*time.Second) // parked for at most 2s
		cancelDuringPoll(t, q)
		mustDo(t, "enqueue", q.Enqueue(ctxT(t, 10*time.Second), job("parked.example.com", 1, farm.LaneUrgent)))
		time.Sleep(3 * time.Second) // past the parking time, before the visibility timeout
		in := inspectQueue(t, queueName(urls.UrgentURL))
		if len(in.Messages.Ready) != 1 || in.Messages.Ready[0].ApproximateReceiveCount != 1 {
			t.Fatalf("the unclaimed job is not back in the queue after one receive: %+v", in.Messages)
		}
		d := receive(t, q, 10*time.Second)
		if d.Attempts != 2 {
			t.Fatalf("returned job delivered with Attempts %d, want 2", d.Attempts)
		}
		mustDo(t, "ack", q.Ack(ctxT(t, 10*time.Second), d))
	})
}

// A message that is not a job is skipped (and ends in the dead-letter
// queue); the jobs behind it are delivered.
func TestForeignMessageIsSkipped(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	q, urls := newQueue(t, 1, time.Second)
	ctx := ctxT(t, 30*time.Second)
	for _, body := range []string{"not json", `{"v":99,"certname":"x.example.com","lane":"urgent"}`, `{"v":1,"certname":"Bad/Name","lane":"urgent"}`} {
		_, err := client(t).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls.UrgentURL), MessageBody: aws.String(body)})
		mustDo(t, "send foreign message", err)
	}
	j := job("good.example.com", 1, farm.LaneUrgent)
	mustDo(t, "enqueue", q.Enqueue(ctx, j))
	d := receive(t, q, 10*time.Second)
	sameJob(t, "job behind foreign messages", d.Job, j)
	mustDo(t, "ack", q.Ack(ctx, d))
	wantNothing(t, q, 2500*time.Millisecond, "only foreign messages left")
	in := inspectQueue(t, queueName(urls.UrgentDLQURL))
	if len(in.Messages.Ready) != 3 {
		t.Fatalf("dead-letter queue holds %d messages, want the 3 foreign ones: %+v", len(in.Messages.Ready), in.Messages)
	}
}

// Errors come back as the farm's kinds, with no SDK type inside.
func TestErrorKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	q, urls := newQueue(t, 10, 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	noSDK := func(t *testing.T, err error) {
		t.Helper()
		var ae smithy.APIError
		var oe *smithy.OperationError
		if errors.As(err, &ae) || errors.As(err, &oe) {
			t.Fatalf("error %v unwraps to an SDK type", err)
		}
	}
	wantKind := func(t *testing.T, what string, err, kind error) {
		t.Helper()
		if !errors.Is(err, kind) {
			t.Fatalf("%s: got %v, want %v", what, err, kind)
		}
		noSDK(t, err)
	}

	t.Run("InvalidJob", func(t *testing.T) {
		for _, j := range []farm.Job{job("Bad/Name", 1, farm.LaneUrgent), job("", 1, farm.LaneUrgent), job("ok.example.com", 1, ""), job("ok.example.com", 1, "later")} {
			wantKind(t, fmt.Sprintf("enqueue %q lane %q", j.Certname, j.Lane), q.Enqueue(ctx, j), farm.ErrInvalid)
		}
		wantStats(t, q, "after refused jobs", 0, 0, 0, 0)
	})
	t.Run("StaleReceipt", func(t *testing.T) {
		mustDo(t, "enqueue", q.Enqueue(ctx, job("stale.example.com", 1, farm.LaneUrgent)))
		d := receive(t, q, 10*time.Second)
		mustDo(t, "ack", q.Ack(ctx, d))
		wantKind(t, "retry an acked delivery", q.Retry(ctx, d, 0), farm.ErrNotFound)
		bogus := d
		bogus.ID = "no-such-receipt"
		wantKind(t, "retry an unknown receipt", q.Retry(ctx, bogus, 0), farm.ErrNotFound)
		empty := d
		empty.ID = ""
		wantKind(t, "ack without a receipt", q.Ack(ctx, empty), farm.ErrInvalid)
	})
	t.Run("MissingQueue", func(t *testing.T) {
		opts := urls.Options()
		opts.UrgentURL = strings.Replace(opts.UrgentURL, queueName(opts.UrgentURL), "no-such-queue", 1)
		missing := sqsqueue.New(client(t), opts)
		wantKind(t, "enqueue to a missing queue", missing.Enqueue(ctx, job("x.example.com", 1, farm.LaneUrgent)), farm.ErrNotFound)
	})
	t.Run("Unreachable", func(t *testing.T) {
		port, err := emulator.FreePort() // nobody listens there
		mustDo(t, "free port", err)
		dead := sqsqueue.New(newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port), 1), urls.Options())
		wantKind(t, "enqueue to an unreachable endpoint", dead.Enqueue(ctx, job("x.example.com", 1, farm.LaneUrgent)), farm.ErrTransient)
		_, err = dead.Receive(ctx)
		wantKind(t, "receive from an unreachable endpoint", err, farm.ErrTransient)
		_, err = dead.Stats(ctx)
		wantKind(t, "stats from an unreachable endpoint", err, farm.ErrTransient)
	})
}

// EnsureQueues is idempotent and updates the redrive policy of queues
// that exist.
func TestEnsureQueues(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	c := client(t)
	ctx := ctxT(t, 30*time.Second)
	prefix := fmt.Sprintf("ensure%d", queueCounter.Add(1))
	first, err := sqsqueue.EnsureQueues(ctx, c, prefix, 3)
	mustDo(t, "ensure", err)
	again, err := sqsqueue.EnsureQueues(ctx, c, prefix, 7)
	mustDo(t, "ensure again", err)
	if first != again {
		t.Fatalf("queue URLs changed: %+v then %+v", first, again)
	}
	for _, lane := range []farm.Lane{farm.LaneUrgent, farm.LaneBulk} {
		name, dlq := sqsqueue.QueueNames(prefix, lane)
		in := inspectQueue(t, name)
		var policy map[string]any
		mustDo(t, "decode RedrivePolicy", json.Unmarshal([]byte(in.Attributes["RedrivePolicy"]), &policy))
		if fmt.Sprint(policy["maxReceiveCount"]) != "7" || !strings.HasSuffix(fmt.Sprint(policy["deadLetterTargetArn"]), ":"+dlq) {
			t.Fatalf("queue %s RedrivePolicy %v, want maxReceiveCount 7 to %s", name, policy, dlq)
		}
	}
	for _, bad := range []string{"", "has space", strings.Repeat("x", 70)} {
		if _, err := sqsqueue.EnsureQueues(ctx, c, bad, 3); !errors.Is(err, farm.ErrInvalid) {
			t.Fatalf("prefix %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := sqsqueue.EnsureQueues(ctx, c, prefix, 0); !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("maxReceiveCount 0: %v, want ErrInvalid", err)
	}
}
