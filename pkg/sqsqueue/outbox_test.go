package sqsqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/farm/farmtest"
	"github.com/compilefarm/compilefarm/pkg/sqsqueue"
)

// outboxSuiteVisibility is the visibility timeout the contract suite runs
// with (it asks for 2 to 5 seconds).
const outboxSuiteVisibility = 2 * time.Second

// freshOutboxQueues makes a new pair of outbox queues for the test, named
// as freshQueues names its queues.
func freshOutboxQueues(t *testing.T) (sqsqueue.OutboxQueueURLs, string) {
	t.Helper()
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = fmt.Sprintf("o%d-%s", queueCounter.Add(1), name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	urls, err := sqsqueue.EnsureOutboxQueues(ctx, client(t), name)
	if err != nil {
		t.Fatalf("ensure outbox queues %s: %v", name, err)
	}
	return urls, name
}

func newOutbox(t *testing.T, urls sqsqueue.OutboxQueueURLs) *sqsqueue.Outbox {
	opts := urls.Options()
	opts.VisibilityTimeout = outboxSuiteVisibility
	return sqsqueue.NewOutbox(client(t), opts)
}

// TestOutboxContract runs farm.Outbox's contract suite against an SQS FIFO
// queue, with the promises SQS makes: all but an oldest-message age (a
// CloudWatch metric, not a queue attribute); its dead letters are read
// with SQS's tools, and it has no restart to survive (the queue is the
// state).
func TestOutboxContract(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	farmtest.TestOutbox(t, func(t *testing.T) farm.Outbox {
		urls, _ := freshOutboxQueues(t)
		return newOutbox(t, urls)
	}, farmtest.OutboxCaps{NoOldestAge: true})
}

func ctxOutbox(t *testing.T) context.Context { return ctxT(t, 30*time.Second) }

// receiveOutbox waits up to 30 s for deliveries.
func receiveOutbox(t *testing.T, o *sqsqueue.Outbox, limit int) []farm.OutboxDelivery {
	t.Helper()
	ctx := ctxOutbox(t)
	for {
		ds, err := o.Receive(ctx, limit, 20*time.Second)
		mustDo(t, "receive from the outbox", err)
		if len(ds) > 0 {
			return ds
		}
	}
}

func wantOutboxStats(t *testing.T, o *sqsqueue.Outbox, backlog, dead int) {
	t.Helper()
	st, err := o.Stats(ctxOutbox(t))
	mustDo(t, "outbox stats", err)
	if st.Backlog != backlog || st.DeadLetters != dead || st.OldestAge != 0 {
		t.Fatalf("outbox stats %+v, want backlog %d, %d dead letters, no age", st, backlog, dead)
	}
}

// TestOutboxQueues: EnsureOutboxQueues makes two FIFO queues with the
// outbox's attributes, again without harm; a JSON body travels as it is,
// one that is not text in base64.
func TestOutboxQueues(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	ctx := ctxOutbox(t)
	urls, name := freshOutboxQueues(t)
	again, err := sqsqueue.EnsureOutboxQueues(ctx, client(t), name)
	if err != nil || again != urls {
		t.Fatalf("ensure the outbox queues again: %+v, %v; want %+v", again, err, urls)
	}
	queue, dlq := sqsqueue.OutboxQueueNames(name)
	for _, q := range []string{queue, dlq} {
		a := inspectQueue(t, q).Attributes
		if a["FifoQueue"] != "true" || a["ContentBasedDeduplication"] != "false" || a["MessageRetentionPeriod"] != "1209600" ||
			a["MaximumMessageSize"] != "262144" || a["RedrivePolicy"] != "" {
			t.Errorf("queue %s has attributes %v", q, a)
		}
	}
	for _, bad := range []string{"", "a.b", strings.Repeat("n", 72)} {
		if _, err := sqsqueue.EnsureOutboxQueues(ctx, client(t), bad); !errors.Is(err, farm.ErrInvalid) {
			t.Errorf("ensure outbox queues named %q: %v, want ErrInvalid", bad, err)
		}
	}
	o := newOutbox(t, urls)
	mustDo(t, "send", o.Send(ctx,
		farm.OutboxMessage{Group: "a", Body: []byte(`{"command":"replace facts"}`)},
		farm.OutboxMessage{Group: "b", Body: []byte{0, 1, 2}},
	))
	bodies := map[string]bool{}
	for _, m := range inspectQueue(t, queue).Messages.Ready {
		bodies[m.Body] = true
	}
	if len(bodies) != 2 || !bodies[`{"command":"replace facts"}`] || !bodies["AAEC"] {
		t.Fatalf("queued bodies %v, want the JSON as it is and AAEC (base64)", bodies)
	}
}

// TestOutboxBinaryBodies: a body that is not text goes base64 up to
// MaxOutboxBinaryBody; a longer one is refused before anything is sent.
func TestOutboxBinaryBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	ctx := ctxOutbox(t)
	urls, _ := freshOutboxQueues(t)
	o := newOutbox(t, urls)
	largest := bytes.Repeat([]byte{0xfe}, sqsqueue.MaxOutboxBinaryBody)
	err := o.Send(ctx, farm.OutboxMessage{Group: "a", Body: []byte("first")}, farm.OutboxMessage{Group: "a", Body: append(largest, 0xfe)})
	if !errors.Is(err, farm.ErrInvalid) {
		t.Fatalf("send a binary body over MaxOutboxBinaryBody: %v, want ErrInvalid", err)
	}
	wantOutboxStats(t, o, 0, 0)
	mustDo(t, "send the largest binary body", o.Send(ctx, farm.OutboxMessage{Group: "a", Body: largest}))
	d := receiveOutbox(t, o, 1)[0]
	if !bytes.Equal(d.Body, largest) {
		t.Fatalf("received %d bytes, want the %d sent", len(d.Body), len(largest))
	}
	// It fits in the dead-letter queue too, with the longest reason.
	mustDo(t, "dead-letter it", o.DeadLetter(ctx, d.ID, strings.Repeat("r", 2*farm.MaxOutboxReason)))
	wantOutboxStats(t, o, 0, 1)
}

// TestOutboxDeadLetterQueue: DeadLetter moves the message to the FIFO
// dead-letter queue, in its group, with its body and encoding, the reason,
// attempts, sent time and MessageId as attributes.
func TestOutboxDeadLetterQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	ctx := ctxOutbox(t)
	urls, _ := freshOutboxQueues(t)
	o := newOutbox(t, urls)
	body := []byte("\x00binary\xff")
	mustDo(t, "send", o.Send(ctx, farm.OutboxMessage{Group: "web01.example.com", Body: body}, farm.OutboxMessage{Group: "web01.example.com", Body: []byte("next")}))
	d := receiveOutbox(t, o, 10)[0]
	mustDo(t, "retry", o.Retry(ctx, d.ID, 0))
	d = receiveOutbox(t, o, 10)[0]
	reason := "PuppetDB answered 400:\x00 command is invalid"
	mustDo(t, "dead-letter", o.DeadLetter(ctx, d.ID, reason))
	wantOutboxStats(t, o, 1, 1)
	if next := receiveOutbox(t, o, 10); len(next) != 1 || string(next[0].Body) != "next" || next[0].Attempts != 1 {
		t.Fatalf("after the dead letter, received %+v, want next on its first attempt", next)
	}
	out, err := client(t).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(urls.DeadLetterURL),
		MaxNumberOfMessages:         10,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
	})
	mustDo(t, "receive from the dead-letter queue", err)
	if len(out.Messages) != 1 {
		t.Fatalf("the dead-letter queue holds %d messages, want 1", len(out.Messages))
	}
	m := out.Messages[0]
	attr := func(name string) string { return aws.ToString(m.MessageAttributes[name].StringValue) }
	sentAt, err := time.Parse(time.RFC3339Nano, attr(sqsqueue.AttrDeadSentAt))
	switch {
	case m.Attributes["MessageGroupId"] != "web01.example.com":
		t.Errorf("dead letter in group %q", m.Attributes["MessageGroupId"])
	case aws.ToString(m.Body) != "AGJpbmFyef8=" || attr(sqsqueue.AttrEncoding) != "base64":
		t.Errorf("dead letter body %q, encoding %q; want the base64 of the body", aws.ToString(m.Body), attr(sqsqueue.AttrEncoding))
	case attr(sqsqueue.AttrDeadReason) != farm.OutboxReason(reason):
		t.Errorf("dead letter reason %q, want %q", attr(sqsqueue.AttrDeadReason), farm.OutboxReason(reason))
	case attr(sqsqueue.AttrDeadAttempts) != "2":
		t.Errorf("dead letter attempts %q, want 2", attr(sqsqueue.AttrDeadAttempts))
	case err != nil || !sentAt.Equal(d.SentAt):
		t.Errorf("dead letter sent_at %q (%v), want %v", attr(sqsqueue.AttrDeadSentAt), err, d.SentAt)
	case attr(sqsqueue.AttrDeadMessageID) == "":
		t.Errorf("dead letter has no message_id")
	}
}

// TestOutboxAcrossTasks: two fleet tasks' Outboxes on one queue: a group
// in flight at one is held from the other, and a delivery ID is good only
// with the Outbox that received it.
func TestOutboxAcrossTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	ctx := ctxOutbox(t)
	urls, _ := freshOutboxQueues(t)
	a, b := newOutbox(t, urls), newOutbox(t, urls)
	mustDo(t, "send", a.Send(ctx, farm.OutboxMessage{Group: "g", Body: []byte("1")}, farm.OutboxMessage{Group: "g", Body: []byte("2")}))
	d1 := receiveOutbox(t, a, 10)[0]
	if ds, err := b.Receive(ctx, 10, time.Second); err != nil || len(ds) != 0 {
		t.Fatalf("the other task received %d messages (%v) while the group is in flight", len(ds), err)
	}
	if err := b.Ack(ctx, d1.ID); !errors.Is(err, farm.ErrNotFound) {
		t.Fatalf("ack at the other task: %v, want ErrNotFound", err)
	}
	mustDo(t, "ack", a.Ack(ctx, d1.ID))
	if d2 := receiveOutbox(t, b, 10); string(d2[0].Body) != "2" {
		t.Fatalf("the other task received %q after the ack, want 2", d2[0].Body)
	}
}

// TestOutboxReleasesUnclaimed: what a cancelled Receive's poll brings and
// no Receive of its Outbox claims goes back to the queue well before the
// visibility timeout, for another task to take.
func TestOutboxReleasesUnclaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the SQS emulator; skipped with -short")
	}
	needSQS(t)
	urls, _ := freshOutboxQueues(t)
	opts := urls.Options()
	opts.VisibilityTimeout = time.Minute // a release comes after 5 s, a timeout after 60
	a, b := sqsqueue.NewOutbox(client(t), opts), newOutbox(t, urls)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.Receive(rctx, 1, 20*time.Second)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the long poll is on the wire
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled receive: %v", err)
	}
	mustDo(t, "send", b.Send(ctxOutbox(t), farm.OutboxMessage{Group: "g", Body: []byte("taken by a poll nobody waits for")}))
	ctx := ctxT(t, 20*time.Second)
	for {
		ds, err := b.Receive(ctx, 1, 20*time.Second)
		if err != nil {
			t.Fatalf("the message taken by the cancelled poll did not come back within 20 s: %v", err)
		}
		if len(ds) > 0 {
			mustDo(t, "ack", b.Ack(ctx, ds[0].ID))
			return
		}
	}
}
