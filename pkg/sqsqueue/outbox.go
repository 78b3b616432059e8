package sqsqueue

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.Outbox = (*Outbox)(nil)

// DefaultOutboxVisibility is OutboxOptions.VisibilityTimeout when zero.
const DefaultOutboxVisibility = 2 * time.Minute

// maxSQSMessage is what one SQS message carries unless its queue allows
// more (MaximumMessageSize): body and attributes, in bytes.
const maxSQSMessage = 256 << 10

// outboxAttrRoom is the room an outbox message leaves for the attributes a
// dead letter adds (reason, attempts, sent at, message id, encoding).
const outboxAttrRoom = 4 << 10

// MaxOutboxBinaryBody is the largest body that is not SQS text (see
// Outbox) an Outbox carries: base64 makes it a third longer.
const MaxOutboxBinaryBody = (maxSQSMessage - outboxAttrRoom) / 4 * 3

// Message attributes of outbox messages and dead letters.
const (
	// AttrEncoding is "base64" on a message whose body is not SQS text.
	AttrEncoding = "encoding"
	// On a dead letter: DeadLetter's reason (absent when empty), the
	// deliveries it had, when it was sent (RFC 3339, UTC) and the
	// outbox message's MessageId.
	AttrDeadReason    = "reason"
	AttrDeadAttempts  = "attempts"
	AttrDeadSentAt    = "sent_at"
	AttrDeadMessageID = "message_id"
)

// OutboxOptions configures an Outbox.
type OutboxOptions struct {
	// QueueURL is the outbox's FIFO queue, DeadLetterURL the FIFO queue
	// DeadLetter moves messages to (EnsureOutboxQueues makes both).
	QueueURL, DeadLetterURL string
	// VisibilityTimeout is how long a delivery stays in flight before SQS
	// hands its message out again: whole seconds (rounded up), at most
	// 12 hours; DefaultOutboxVisibility when zero.
	VisibilityTimeout time.Duration
	// Logger receives deliveries returned to the queue unclaimed and
	// bodies that fail to decode; discarded when nil.
	Logger *slog.Logger
}

// Outbox is farm.Outbox on an SQS FIFO queue: the message's Group is its
// MessageGroupId, so SQS keeps a group's order and hands out none of a
// group while one is in flight, across every fleet task that drains the
// queue. Each message has its own MessageDeduplicationId, so two equal
// messages are both kept (and the SDK's own retries of one SendMessage are
// not). A body travels as it is when it is SQS text (valid UTF-8 of the
// characters a message may hold, as JSON always is) and base64-encoded,
// with the attribute encoding=base64, otherwise; such a body may be at
// most MaxOutboxBinaryBody bytes (ErrInvalid, nothing sent).
//
// The visibility timeout is OutboxOptions.VisibilityTimeout, 2 minutes by
// default. Attempts is the message's ApproximateReceiveCount, SentAt its
// SentTimestamp (milliseconds). A delivery's ID is its receipt handle,
// which this Outbox remembers with the message until the delivery is
// finished or its visibility timeout passes (counted from the
// ReceiveMessage answer, less a tenth of the timeout up to a second, so
// that it passes here before it does at SQS): an ID it does not hold
// (finished, timed out, or received by another Outbox) is ErrNotFound
// without a call to SQS, since DeleteMessage may accept a stale receipt
// handle and do nothing.
//
// Receive waits in long polls of whole seconds, at most 20 each: a wait
// below a second is one short poll, and a Receive returns none up to a
// second before its wait ends. (A poll of 0 seconds leaves the queue's
// ReceiveMessageWaitTimeSeconds in charge: keep it 0, SQS's default.) It returns at most 10 messages (SQS's most
// per call). As Queue does, a Receive whose ctx ends while its
// ReceiveMessage call is on the wire does not cancel the call: what the
// call brings is parked for the next Receive of this Outbox, or returned
// to the queue (ChangeMessageVisibility 0) when none claims it within
// min(5 s, visibility timeout/2).
//
// Retry is ChangeMessageVisibility to the delay (whole seconds, rounded
// up, at most 12 hours): the message stays in flight for SQS, so its group
// waits. DeadLetter sends the message to the FIFO dead-letter queue (same
// group, same body and encoding; the reason, attempts, sent time and
// MessageId as attributes; the MessageId as its deduplication ID, so a
// second DeadLetter of the same message within 5 minutes adds no copy),
// then deletes it from the outbox. The outbox queue has no redrive policy
// on purpose: a message retried all the while PuppetDB is down must not be
// dead-lettered by its receive count. SQS deletes a message older than the
// queue's MessageRetentionPeriod (EnsureOutboxQueues: 14 days, SQS's
// most).
//
// Stats: Backlog is the outbox queue's ApproximateNumberOfMessages +
// ApproximateNumberOfMessagesNotVisible + ApproximateNumberOfMessagesDelayed,
// DeadLetters the same three of the dead-letter queue; approximate (on AWS
// they lag by up to a minute), and OldestAge is always 0 (the CloudWatch
// metric ApproximateAgeOfOldestMessage, which the stack's alarm reads).
// Dead letters are read with SQS's own tools (console, CLI, a redrive).
//
// Calls (our bill): Send is one SendMessage per message; Receive one
// ReceiveMessage per long poll (an idle drainer waiting 20 s a time: 3 a
// minute), plus one ChangeMessageVisibility per message of an abandoned
// poll none claims; Ack one DeleteMessage; Retry one
// ChangeMessageVisibility; DeadLetter one SendMessage (to the dead-letter
// queue) and one DeleteMessage; Stats two GetQueueAttributes. A PuppetDB
// command delivered at the first attempt thus costs SendMessage,
// its share of a ReceiveMessage (up to 10 a call) and DeleteMessage.
//
// IAM: sqs:SendMessage, sqs:ReceiveMessage, sqs:DeleteMessage,
// sqs:ChangeMessageVisibility and sqs:GetQueueAttributes on the outbox
// queue; sqs:SendMessage and sqs:GetQueueAttributes on the dead-letter
// queue. Safe for concurrent use.
type Outbox struct {
	client     *sqs.Client
	url, dlq   string
	visibility time.Duration // whole seconds
	parkTTL    time.Duration
	log        *slog.Logger

	mu     sync.Mutex
	flying map[string]*outboxFlight // receipt handle → its delivery, until finished or timed out
	parked []*parkedOutbox
	wake   chan struct{} // closed and replaced when deliveries are parked
}

// outboxFlight is a delivery this Outbox received and has not finished.
type outboxFlight struct {
	d         farm.OutboxDelivery
	messageID string
	deadline  time.Time // its visibility timeout, counted from before the receive
}

// parkedOutbox is what an abandoned poll brought, waiting for a Receive.
type parkedOutbox struct {
	ds    []farm.OutboxDelivery
	timer *time.Timer
}

// NewOutbox returns an Outbox on the queues named in opts.
func NewOutbox(client *sqs.Client, opts OutboxOptions) *Outbox {
	o := &Outbox{
		client: client,
		url:    opts.QueueURL,
		dlq:    opts.DeadLetterURL,
		log:    opts.Logger,
		flying: map[string]*outboxFlight{},
		wake:   make(chan struct{}),
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	v := opts.VisibilityTimeout
	if v <= 0 {
		v = DefaultOutboxVisibility
	}
	o.visibility = time.Duration(seconds(min(v, maxVisibility))) * time.Second
	o.parkTTL = min(5*time.Second, o.visibility/2)
	return o
}

// visibilityMargin is how much earlier than SQS this Outbox considers a
// delivery timed out: room for the ReceiveMessage answer's way back.
func (o *Outbox) visibilityMargin() time.Duration { return min(time.Second, o.visibility/10) }

// VisibilityTimeout returns how long a delivery stays in flight.
func (o *Outbox) VisibilityTimeout() time.Duration { return o.visibility }

// sqsText reports whether b may travel as an SQS message body as it is:
// valid UTF-8 of #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and
// #x10000 to #x10FFFF.
func sqsText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9 || r == 0xa || r == 0xd:
		case r >= 0x20 && r <= 0xd7ff:
		case r >= 0xe000 && r <= 0xfffd:
		case r >= 0x10000 && r <= 0x10ffff:
		default:
			return false
		}
	}
	return true
}

// encodeOutboxBody returns the SQS body of an outbox message and its
// attributes: the body as it is when it is SQS text, else base64.
func encodeOutboxBody(m farm.OutboxMessage) (string, map[string]types.MessageAttributeValue, error) {
	if sqsText(m.Body) {
		return string(m.Body), nil, nil
	}
	if len(m.Body) > MaxOutboxBinaryBody {
		return "", nil, fmt.Errorf("outbox message for %s is %d bytes that are not text: SQS carries such a body base64-encoded, at most %d bytes: %w",
			m.Group, len(m.Body), MaxOutboxBinaryBody, farm.ErrInvalid)
	}
	return base64.StdEncoding.EncodeToString(m.Body), map[string]types.MessageAttributeValue{
		AttrEncoding: {DataType: aws.String("String"), StringValue: aws.String("base64")},
	}, nil
}

// decodeOutboxBody returns the body of a received message. A body marked
// base64 that does not decode is returned as it travelled, logged: the
// drainer sees a message it cannot read and dead-letters it.
func (o *Outbox) decodeOutboxBody(m types.Message) []byte {
	body := aws.ToString(m.Body)
	if a, ok := m.MessageAttributes[AttrEncoding]; !ok || aws.ToString(a.StringValue) != "base64" {
		return []byte(body)
	}
	b, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		o.log.Error("sqsqueue: outbox message marked base64 does not decode; delivered as it is", "message_id", aws.ToString(m.MessageId), "err", err)
		return []byte(body)
	}
	return b
}

// randomID returns 32 hex digits: a deduplication or receive-attempt ID.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Send sends each message in order, one SendMessage each, stopping at the
// first that fails (the error says how many were sent before it). All are
// encoded first, so a body too long for SQS sends none.
func (o *Outbox) Send(ctx context.Context, msgs ...farm.OutboxMessage) error {
	if err := farm.CheckOutboxSend(ctx, msgs); err != nil {
		return err
	}
	type encoded struct {
		body  string
		attrs map[string]types.MessageAttributeValue
	}
	enc := make([]encoded, len(msgs))
	for i, m := range msgs {
		body, attrs, err := encodeOutboxBody(m)
		if err != nil {
			return fmt.Errorf("sqsqueue: send outbox message %d of %d: %w", i+1, len(msgs), err)
		}
		enc[i] = encoded{body, attrs}
	}
	for i, m := range msgs {
		_, err := o.client.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl:               aws.String(o.url),
			MessageBody:            aws.String(enc[i].body),
			MessageAttributes:      enc[i].attrs,
			MessageGroupId:         aws.String(m.Group),
			MessageDeduplicationId: aws.String(randomID()),
		})
		if err != nil {
			return translate(fmt.Sprintf("send outbox message %d of %d, for %s (the %d before it are sent)", i+1, len(msgs), m.Group, i), err, false)
		}
	}
	return nil
}

// Receive returns what an abandoned poll parked, else long-polls the queue
// until messages come or wait has passed (see Outbox).
func (o *Outbox) Receive(ctx context.Context, limit int, wait time.Duration) ([]farm.OutboxDelivery, error) {
	if err := farm.CheckOutboxReceive(ctx, limit); err != nil {
		return nil, err
	}
	limit = min(limit, 10)
	deadline := time.Now().Add(wait)
	for {
		if err := farm.CheckOutboxReceive(ctx, limit); err != nil {
			return nil, err
		}
		if ds := o.takeParked(limit); len(ds) > 0 {
			return ds, nil
		}
		secs := int32(min(max(time.Until(deadline), 0)/time.Second, 20))
		ds, woken, err := o.poll(ctx, limit, secs)
		switch {
		case err != nil:
			return nil, err
		case len(ds) > 0:
			return ds, nil
		case !woken && time.Until(deadline) < time.Second:
			return nil, nil
		}
	}
}

type outboxPoll struct {
	ds  []farm.OutboxDelivery
	err error
}

// poll makes one ReceiveMessage call, detached from ctx (see Outbox). It
// returns early, leaving the call's outcome to parkLater, when ctx ends or
// deliveries are parked.
func (o *Outbox) poll(ctx context.Context, limit int, secs int32) (ds []farm.OutboxDelivery, woken bool, err error) {
	o.mu.Lock()
	wake := o.wake
	o.mu.Unlock()
	res := make(chan outboxPoll, 1)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(secs)*time.Second+30*time.Second)
	go func() {
		defer cancel()
		ds, err := o.receiveBatch(cctx, limit, secs)
		res <- outboxPoll{ds, err}
	}()
	select {
	case r := <-res:
		if r.err != nil && ctx.Err() != nil {
			return nil, false, fmt.Errorf("sqsqueue: receive outbox messages: %w", ctx.Err())
		}
		return r.ds, false, r.err
	case <-ctx.Done():
		go o.parkLater(res, outboxPoll{})
		return nil, false, fmt.Errorf("sqsqueue: receive outbox messages: %w", ctx.Err())
	case <-wake:
		go o.parkLater(res, outboxPoll{})
		return nil, true, nil
	}
}

// receiveBatch makes one ReceiveMessage call and remembers what it brings.
func (o *Outbox) receiveBatch(ctx context.Context, limit int, secs int32) ([]farm.OutboxDelivery, error) {
	out, err := o.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(o.url),
		MaxNumberOfMessages: int32(limit),
		WaitTimeSeconds:     secs,
		VisibilityTimeout:   int32(o.visibility / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
			types.MessageSystemAttributeNameMessageGroupId,
		},
		MessageAttributeNames: []string{AttrEncoding},
		// The SDK retrying this call after a network failure gets the
		// same messages back instead of leaving them hidden.
		ReceiveRequestAttemptId: aws.String(randomID()),
	})
	if err != nil {
		return nil, translate("receive outbox messages", err, false)
	}
	// SQS started the visibility timeout before it answered: the deadline
	// kept here comes a moment earlier than SQS's, so an ID this Outbox
	// holds is one SQS holds too.
	deadline := time.Now().Add(o.visibility - o.visibilityMargin())
	ds := make([]farm.OutboxDelivery, 0, len(out.Messages))
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range out.Messages {
		attempts, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		sent, _ := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		d := farm.OutboxDelivery{
			OutboxMessage: farm.OutboxMessage{
				Group: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
				Body:  o.decodeOutboxBody(m),
			},
			ID:       aws.ToString(m.ReceiptHandle),
			SentAt:   time.UnixMilli(sent).UTC(),
			Attempts: max(attempts, 1),
		}
		o.flying[d.ID] = &outboxFlight{d: d, messageID: aws.ToString(m.MessageId), deadline: deadline}
		d.Body = slices.Clone(d.Body) // the caller's copy; DeadLetter sends the one kept
		ds = append(ds, d)
	}
	return ds, nil
}

// parkLater waits for an abandoned poll (r when it has already ended) and
// parks what it brought.
func (o *Outbox) parkLater(res <-chan outboxPoll, r outboxPoll) {
	if r.ds == nil && r.err == nil {
		r = <-res
	}
	if len(r.ds) == 0 {
		return
	}
	p := &parkedOutbox{ds: r.ds}
	o.mu.Lock()
	defer o.mu.Unlock()
	p.timer = time.AfterFunc(o.parkTTL, func() { o.release(p) })
	o.parked = append(o.parked, p)
	close(o.wake)
	o.wake = make(chan struct{})
}

// takeParked hands out up to limit parked deliveries, in the order they were
// received.
func (o *Outbox) takeParked(limit int) []farm.OutboxDelivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.parked) == 0 {
		return nil
	}
	p := o.parked[0]
	n := min(limit, len(p.ds))
	ds := p.ds[:n:n]
	p.ds = p.ds[n:]
	if len(p.ds) == 0 {
		o.parked = o.parked[1:]
		p.timer.Stop() // if it already fired, release finds nothing to do
	}
	return ds
}

// release returns parked deliveries nobody claimed to the queue, the last
// first so each group keeps its order.
func (o *Outbox) release(p *parkedOutbox) {
	o.mu.Lock()
	i := slices.Index(o.parked, p)
	if i < 0 {
		o.mu.Unlock()
		return
	}
	o.parked = slices.Delete(o.parked, i, i+1)
	ds := p.ds
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range slices.Backward(ds) {
		if err := o.Retry(ctx, d.ID, 0); err != nil {
			o.log.Warn("sqsqueue: return an unclaimed outbox delivery to its queue", "group", d.Group, "err", err)
		}
	}
}

// flight returns the unfinished delivery id, forgetting those whose
// visibility timeout has passed.
func (o *Outbox) flight(op, id string) (*outboxFlight, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	for k, f := range o.flying {
		if !now.Before(f.deadline) {
			delete(o.flying, k)
		}
	}
	f := o.flying[id]
	if f == nil {
		return nil, fmt.Errorf("sqsqueue: %s: it is not a delivery of this outbox in flight (finished, timed out or unknown): %w", op, farm.ErrNotFound)
	}
	return f, nil
}

// finished forgets delivery id.
func (o *Outbox) finished(id string) {
	o.mu.Lock()
	delete(o.flying, id)
	o.mu.Unlock()
}

// Ack deletes the delivery's message.
func (o *Outbox) Ack(ctx context.Context, id string) error {
	if err := farm.CheckOutboxAck(ctx, id); err != nil {
		return err
	}
	op := "ack outbox delivery"
	f, err := o.flight(op, id)
	if err != nil {
		return err
	}
	_, err = o.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(o.url), ReceiptHandle: aws.String(id)})
	if err = translate(op+" of "+f.d.Group, err, true); err == nil || isNotFound(err) {
		o.finished(id)
	}
	return err
}

// Retry makes the delivery's message visible again after the delay.
func (o *Outbox) Retry(ctx context.Context, id string, after time.Duration) error {
	if err := farm.CheckOutboxRetry(ctx, id, after); err != nil {
		return err
	}
	op := "retry outbox delivery"
	f, err := o.flight(op, id)
	if err != nil {
		return err
	}
	_, err = o.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(o.url),
		ReceiptHandle:     aws.String(id),
		VisibilityTimeout: seconds(min(after, maxVisibility)),
	})
	if err = translate(op+" of "+f.d.Group, err, true); err == nil || isNotFound(err) {
		o.finished(id)
	}
	return err
}

// DeadLetter sends the delivery's message to the dead-letter queue, then
// deletes it from the outbox.
func (o *Outbox) DeadLetter(ctx context.Context, id, reason string) error {
	if err := farm.CheckOutboxDeadLetter(ctx, id, reason); err != nil {
		return err
	}
	op := "dead-letter outbox delivery"
	f, err := o.flight(op, id)
	if err != nil {
		return err
	}
	body, attrs, err := encodeOutboxBody(f.d.OutboxMessage)
	if err != nil {
		return fmt.Errorf("sqsqueue: %s: %w", op, err)
	}
	if attrs == nil {
		attrs = map[string]types.MessageAttributeValue{}
	}
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	if reason = farm.OutboxReason(reason); reason != "" {
		attrs[AttrDeadReason] = str(reason)
	}
	attrs[AttrDeadAttempts] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(f.d.Attempts))}
	attrs[AttrDeadSentAt] = str(f.d.SentAt.Format(time.RFC3339Nano))
	attrs[AttrDeadMessageID] = str(f.messageID)
	_, err = o.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:               aws.String(o.dlq),
		MessageBody:            aws.String(body),
		MessageAttributes:      attrs,
		MessageGroupId:         aws.String(f.d.Group),
		MessageDeduplicationId: aws.String(f.messageID),
	})
	if err != nil {
		return translate(op+" of "+f.d.Group+" (send to the dead-letter queue)", err, false)
	}
	_, err = o.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(o.url), ReceiptHandle: aws.String(id)})
	if err = translate(op+" of "+f.d.Group+" (sent to the dead-letter queue; delete it from the outbox)", err, true); err == nil || isNotFound(err) {
		o.finished(id)
	}
	return err
}

// Stats reads both queues' approximate counts.
func (o *Outbox) Stats(ctx context.Context) (farm.OutboxStats, error) {
	if err := farm.CheckOutboxStats(ctx); err != nil {
		return farm.OutboxStats{}, err
	}
	count := func(what, url string) (int, error) {
		res, err := o.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
				types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
			},
		})
		if err != nil {
			return 0, translate("outbox stats of the "+what, err, false)
		}
		n := 0
		for _, a := range []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		} {
			v, _ := strconv.Atoi(res.Attributes[string(a)])
			n += v
		}
		return n, nil
	}
	backlog, err := count("outbox queue", o.url)
	if err != nil {
		return farm.OutboxStats{}, err
	}
	dead, err := count("dead-letter queue", o.dlq)
	if err != nil {
		return farm.OutboxStats{}, err
	}
	return farm.OutboxStats{Backlog: backlog, DeadLetters: dead}, nil
}
