// Package sqsqueue is the farm's compile queue on Amazon SQS: one standard
// queue per lane (urgent, bulk), each with a dead-letter queue that takes a
// job after maxReceiveCount deliveries (the queues' RedrivePolicy).
//
// A job travels as a small JSON document (see message) with message
// attributes for operators. The driver makes the farm.Queue promises SQS
// can keep: at least once, urgent before bulk, redelivery after the
// visibility timeout. It does not collapse jobs of one node nor keep a
// node's jobs apart (farmtest.QueueCaps{}); the node store's sequence
// checks make a duplicate or stale compile harmless.
//
// Inbox (inbox.go) is the PCP broker's farm.Inbox on SQS: one short-lived
// queue per fleet task. Outbox (outbox.go) is farm.Outbox on a FIFO queue
// with a FIFO dead-letter queue: the PuppetDB sink's commands, in order
// per node.
package sqsqueue

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.Queue = (*Queue)(nil)

// DefaultWaitTime is Options.WaitTime when zero.
const DefaultWaitTime = time.Second

// maxVisibility is SQS's limit on a visibility timeout (12 hours).
const maxVisibility = 12 * time.Hour

// Options configures a Queue.
type Options struct {
	// UrgentURL and BulkURL are the lanes' queue URLs (standard queues).
	UrgentURL, BulkURL string
	// VisibilityTimeout is how long a delivery stays hidden before SQS
	// hands its job out again unless it is acked or retried. Rounded up to
	// whole seconds, at most 12 hours; zero leaves the queues' own
	// VisibilityTimeout attribute in charge.
	VisibilityTimeout time.Duration
	// WaitTime is how long one long poll of the urgent queue waits when
	// both lanes are empty: a bulk job enqueued meanwhile waits at most
	// this long, an urgent job not at all. Whole seconds from 1 to 20;
	// DefaultWaitTime when zero.
	WaitTime time.Duration
	// Logger receives messages Receive cannot decode and deliveries it
	// returns to the queue; discarded when nil.
	Logger *slog.Logger
}

// Queue is a farm.Queue on two SQS queues. Safe for concurrent use.
//
// Receive takes from the urgent queue first: each round is a short poll of
// urgent, then a short poll of bulk, then a long poll (Options.WaitTime)
// of urgent, so a waiting urgent job is never behind a bulk one and an
// urgent job enqueued while receivers wait is handed out at once.
//
// A Receive whose context ends while its ReceiveMessage call is on the wire
// does not cancel the call (a cancelled call can still take a message that
// then stays hidden for the visibility timeout): the call finishes in the
// background and a message it brings is parked and handed to the next
// Receive of this Queue, with its Attempts unchanged, or returned to its
// queue (ChangeMessageVisibility 0) when no Receive claims it within
// min(5s, visibility timeout/2).
//
// A message that is not a valid job (foreign body, other version) is
// logged and left alone: it comes back after the visibility timeout and,
// after maxReceiveCount receives, SQS moves it to the dead-letter queue.
type Queue struct {
	client     *sqs.Client
	urls       map[farm.Lane]string
	visibility int32 // seconds; 0: the queue's attribute
	wait       int32 // seconds
	parkTTL    time.Duration
	log        *slog.Logger

	mu     sync.Mutex
	parked []*parkedDelivery
	wake   chan struct{} // closed and replaced when a delivery is parked
}

type parkedDelivery struct {
	d     farm.Delivery
	timer *time.Timer
}

// New returns a Queue on the queues named in opts.
func New(client *sqs.Client, opts Options) *Queue {
	q := &Queue{
		client: client,
		urls:   map[farm.Lane]string{farm.LaneUrgent: opts.UrgentURL, farm.LaneBulk: opts.BulkURL},
		log:    opts.Logger,
		wake:   make(chan struct{}),
	}
	if q.log == nil {
		q.log = slog.New(slog.DiscardHandler)
	}
	q.visibility = seconds(min(opts.VisibilityTimeout, maxVisibility))
	wait := opts.WaitTime
	if wait <= 0 {
		wait = DefaultWaitTime
	}
	q.wait = min(max(seconds(wait), 1), 20)
	q.parkTTL = 5 * time.Second
	if q.visibility > 0 {
		q.parkTTL = min(q.parkTTL, time.Duration(q.visibility)*time.Second/2)
	}
	return q
}

// seconds rounds d up to whole seconds (SQS's unit), never below zero.
func seconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32((d + time.Second - 1) / time.Second)
}

// Enqueue sends job to its lane's queue. A zero EnqueuedAt is set to now;
// a job with an invalid certname or unknown lane is refused with
// farm.ErrInvalid.
func (q *Queue) Enqueue(ctx context.Context, job farm.Job) error {
	if err := farm.CheckEnqueue(ctx, job); err != nil {
		return err
	}
	if job.EnqueuedAt.IsZero() {
		job.EnqueuedAt = time.Now().UTC()
	}
	body, attrs, err := encodeJob(job)
	if err != nil {
		return fmt.Errorf("sqsqueue: %w", err)
	}
	_, err = q.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:          aws.String(q.urls[job.Lane]),
		MessageBody:       aws.String(body),
		MessageAttributes: attrs,
	})
	return translate(fmt.Sprintf("send job of %s to the %s queue", job.Certname, job.Lane), err, false)
}

type pollStep struct {
	lane farm.Lane
	wait int32
}

// Receive blocks until a job is available (urgent first) or ctx ends.
// Attempts is the message's ApproximateReceiveCount and ID its receipt
// handle. Errors talking to SQS are returned (farm.ErrTransient for
// throttling, 5xx and network failures); callers back off and call again.
func (q *Queue) Receive(ctx context.Context) (farm.Delivery, error) {
	steps := [...]pollStep{{farm.LaneUrgent, 0}, {farm.LaneBulk, 0}, {farm.LaneUrgent, q.wait}}
	for {
		if err := farm.CheckQueueReceive(ctx); err != nil {
			return farm.Delivery{}, err
		}
		if d, ok := q.takeParked(); ok {
			return d, nil
		}
	round:
		for _, st := range steps {
			d, got, woken, err := q.poll(ctx, st)
			switch {
			case err != nil:
				return farm.Delivery{}, err
			case got:
				return d, nil
			case woken:
				break round // something was parked: take it first
			}
		}
	}
}

type pollResult struct {
	d   farm.Delivery
	got bool
	err error
}

// poll makes one ReceiveMessage call, detached from ctx (see Queue). It
// returns early, handing the call's outcome to parkLater, when ctx ends or
// a delivery is parked.
func (q *Queue) poll(ctx context.Context, st pollStep) (d farm.Delivery, got, woken bool, err error) {
	q.mu.Lock()
	wake := q.wake
	q.mu.Unlock()
	res := make(chan pollResult, 1)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(st.wait)*time.Second+30*time.Second)
	go func() {
		defer cancel()
		res <- q.receiveOne(cctx, st)
	}()
	select {
	case r := <-res:
		if r.err != nil && ctx.Err() != nil {
			return farm.Delivery{}, false, false, ctx.Err()
		}
		return r.d, r.got, false, r.err
	case <-ctx.Done():
		go q.parkLater(res)
		return farm.Delivery{}, false, false, ctx.Err()
	case <-wake:
		go q.parkLater(res)
		return farm.Delivery{}, false, true, nil
	}
}

func (q *Queue) receiveOne(ctx context.Context, st pollStep) pollResult {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(q.urls[st.lane]),
		MaxNumberOfMessages:         1,
		WaitTimeSeconds:             st.wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameSentTimestamp},
	}
	if q.visibility > 0 {
		in.VisibilityTimeout = q.visibility
	}
	out, err := q.client.ReceiveMessage(ctx, in)
	if err != nil {
		return pollResult{err: translate(fmt.Sprintf("receive from the %s queue", st.lane), err, false)}
	}
	for _, m := range out.Messages {
		job, err := decodeJob(aws.ToString(m.Body))
		if err != nil {
			q.log.Error("sqsqueue: message is not a compile job; leaving it for the dead-letter queue",
				"lane", st.lane, "message_id", aws.ToString(m.MessageId), "err", err)
			continue
		}
		// The lane is the queue the job travels in (it is what Ack and
		// Retry address).
		job.Lane = st.lane
		attempts, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		return pollResult{d: farm.Delivery{Job: job, ID: aws.ToString(m.ReceiptHandle), Attempts: max(attempts, 1)}, got: true}
	}
	return pollResult{}
}

// parkLater waits for an abandoned poll and parks what it brought.
func (q *Queue) parkLater(res <-chan pollResult) {
	r := <-res
	if r.got {
		q.park(r.d)
	}
}

func (q *Queue) park(d farm.Delivery) {
	p := &parkedDelivery{d: d}
	q.mu.Lock()
	defer q.mu.Unlock()
	p.timer = time.AfterFunc(q.parkTTL, func() { q.release(p) })
	q.parked = append(q.parked, p)
	close(q.wake)
	q.wake = make(chan struct{})
}

// takeParked hands out a parked delivery, urgent first.
func (q *Queue) takeParked() (farm.Delivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.parked) == 0 {
		return farm.Delivery{}, false
	}
	i := 0
	for k, p := range q.parked {
		if p.d.Lane == farm.LaneUrgent {
			i = k
			break
		}
	}
	p := q.parked[i]
	q.parked = append(q.parked[:i], q.parked[i+1:]...)
	p.timer.Stop() // if it already fired, release finds nothing to do
	return p.d, true
}

// release returns a parked delivery nobody claimed to its queue.
func (q *Queue) release(p *parkedDelivery) {
	q.mu.Lock()
	found := false
	for i, x := range q.parked {
		if x == p {
			q.parked = append(q.parked[:i], q.parked[i+1:]...)
			found = true
			break
		}
	}
	q.mu.Unlock()
	if !found {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.Retry(ctx, p.d, 0); err != nil {
		q.log.Warn("sqsqueue: return an unclaimed delivery to its queue", "node", p.d.Certname, "lane", p.d.Lane, "err", err)
	}
}

// Ack deletes the delivery's message. Like SQS, acking a delivery whose
// receipt handle is stale may succeed without effect (the message is then
// delivered again); a malformed receipt handle gives farm.ErrNotFound.
func (q *Queue) Ack(ctx context.Context, d farm.Delivery) error {
	if err := farm.CheckAck(ctx, d); err != nil {
		return err
	}
	_, err := q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.urls[d.Lane]), ReceiptHandle: aws.String(d.ID)})
	return translate(fmt.Sprintf("ack job of %s", d.Certname), err, true)
}

// Retry makes the delivery's message visible again after the delay
// (ChangeMessageVisibility; rounded up to whole seconds, at most 12 hours).
// The message keeps its receive count, so a job retried maxReceiveCount
// times goes to the dead-letter queue, and while it waits SQS counts it
// as in flight (see Stats). A delivery no longer in flight gives
// farm.ErrNotFound.
func (q *Queue) Retry(ctx context.Context, d farm.Delivery, after time.Duration) error {
	if err := farm.CheckRetry(ctx, d, after); err != nil {
		return err
	}
	_, err := q.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(q.urls[d.Lane]),
		ReceiptHandle:     aws.String(d.ID),
		VisibilityTimeout: seconds(min(after, maxVisibility)),
	})
	return translate(fmt.Sprintf("retry job of %s", d.Certname), err, true)
}

// Stats returns one entry per lane, urgent first, from the queues'
// attributes: Depth is ApproximateNumberOfMessages plus
// ApproximateNumberOfMessagesDelayed, InFlight is
// ApproximateNumberOfMessagesNotVisible. Two differences from the embedded
// queue follow from SQS: a retried job waiting out its delay is hidden, so
// it counts as in flight, not waiting; and the counts are approximate
// (on AWS they lag by up to a minute). OldestAge is always 0: the age of a
// queue's oldest message is not a queue attribute but the CloudWatch
// metric ApproximateAgeOfOldestMessage, which the farm's scaling alarm
// reads directly; reading messages to estimate it would count as receives.
func (q *Queue) Stats(ctx context.Context) ([]farm.QueueStats, error) {
	if err := farm.CheckQueueStats(ctx); err != nil {
		return nil, err
	}
	var out []farm.QueueStats
	for _, lane := range []farm.Lane{farm.LaneUrgent, farm.LaneBulk} {
		res, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(q.urls[lane]),
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			},
		})
		if err != nil {
			return nil, translate(fmt.Sprintf("stats of the %s queue", lane), err, false)
		}
		n := func(name types.QueueAttributeName) int {
			v, _ := strconv.Atoi(res.Attributes[string(name)])
			return v
		}
		out = append(out, farm.QueueStats{
			Lane:     lane,
			Depth:    n(types.QueueAttributeNameApproximateNumberOfMessages) + n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
			InFlight: n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		})
	}
	return out, nil
}
