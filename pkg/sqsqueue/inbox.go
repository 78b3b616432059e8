package sqsqueue

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Inbox is farm.Inbox on SQS: one standard queue per task, named
// InboxOptions.Prefix + the task's name (InboxQueueName), created by Open
// and deleted by Close. A message travels base64 encoded in the body.
//
// Calls: Open is one CreateQueue (MessageRetentionPeriod 60 s, SQS's
// minimum: PCP messages expire in seconds; VisibilityTimeout 10 s). Post is
// one SendMessage, plus one GetQueueUrl the first time this Inbox posts to
// a task (URLs are cached; a missing queue is farm.ErrNotFound and drops
// the cached URL). Receive is one ReceiveMessage long poll (WaitTimeSeconds
// 20, MaxNumberOfMessages 10) per 20 s of waiting, and one
// DeleteMessageBatch per batch received, before Receive returns it. Close
// is one DeleteQueue. An idle task thus makes three calls a minute.
//
// As Queue does, Receive never cancels a ReceiveMessage call on the wire (a
// cancelled call can still take messages, which would then be hidden until
// they expire): when ctx ends first, the call finishes in the background and
// the next Receive of the task on this Inbox takes what it brought.
//
// IAM: sqs:CreateQueue, sqs:GetQueueUrl, sqs:SendMessage,
// sqs:ReceiveMessage, sqs:DeleteMessage and sqs:DeleteQueue on
// arn:aws:sqs:REGION:ACCOUNT:PREFIX*. Safe for concurrent use.
type Inbox struct {
	client *sqs.Client
	prefix string
	wait   int32
	log    *slog.Logger

	mu    sync.Mutex
	urls  map[string]string     // task → queue URL
	polls map[string]*inboxPoll // task → its ReceiveMessage call, until a Receive takes its outcome
}

// InboxOptions configures an Inbox.
type InboxOptions struct {
	// Prefix starts every inbox queue's name ("compilefarm-prod-pcp-", what
	// the stack's IAM policy allows): 1 to 60 letters, digits, '-' or '_'.
	Prefix string
	// WaitTime is how long one ReceiveMessage long poll waits: whole
	// seconds from 1 to 20, 20 when zero.
	WaitTime time.Duration
	// Logger receives what Receive drops or could not delete; discarded
	// when nil.
	Logger *slog.Logger
}

var _ farm.Inbox = (*Inbox)(nil)

// inboxRetention and inboxVisibility are the attributes of an inbox
// queue (seconds); see Inbox.
const (
	inboxRetention  = 60
	inboxVisibility = 10
	inboxBatch      = 10
)

// NewInbox returns an Inbox on client. An invalid Prefix makes every
// method fail with farm.ErrInvalid.
func NewInbox(client *sqs.Client, opts InboxOptions) *Inbox {
	in := &Inbox{client: client, prefix: opts.Prefix, log: opts.Logger, urls: map[string]string{}, polls: map[string]*inboxPoll{}}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	in.wait = 20
	if opts.WaitTime > 0 {
		in.wait = min(max(seconds(opts.WaitTime), 1), 20)
	}
	return in
}

var (
	inboxPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,60}$`)
	queueNameRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)
	unsafeRunes   = regexp.MustCompile(`[^A-Za-z0-9_-]`)
)

// maxQueueName is SQS's limit on a queue's name.
const maxQueueName = 80

// InboxQueueName returns the name of task's queue: prefix+task when that
// is a valid SQS queue name (letters, digits, '-', '_', at most 80);
// otherwise prefix, task with other characters replaced by '_' and cut to
// fit, '-' and 16 hex digits of task's SHA-256, so distinct tasks keep
// distinct queues.
func InboxQueueName(prefix, task string) string {
	if name := prefix + task; queueNameRE.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(task))
	suffix := "-" + hex.EncodeToString(sum[:8])
	safe := unsafeRunes.ReplaceAllString(task, "_")
	if room := maxQueueName - len(prefix) - len(suffix); len(safe) > room {
		safe = safe[:max(room, 0)]
	}
	return prefix + safe + suffix
}

// checkPrefix checks the driver's own argument, the prefix of its queue
// names; the contract's checks are farm's (farm.CheckInboxOpen, ...).
func (in *Inbox) checkPrefix(op, task string) error {
	if !inboxPrefixRE.MatchString(in.prefix) {
		return fmt.Errorf("sqsqueue: %s %s: inbox prefix %q must be 1 to 60 letters, digits, '-' or '_': %w", op, task, in.prefix, farm.ErrInvalid)
	}
	return nil
}

// Open creates task's queue unless it exists.
func (in *Inbox) Open(ctx context.Context, task string) error {
	if err := farm.CheckInboxOpen(ctx, task); err != nil {
		return err
	}
	if err := in.checkPrefix("open inbox", task); err != nil {
		return err
	}
	name := InboxQueueName(in.prefix, task)
	out, err := in.client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(inboxRetention),
			string(types.QueueAttributeNameVisibilityTimeout):      strconv.Itoa(inboxVisibility),
		},
	})
	if err != nil {
		return translate("open inbox "+task+" (create queue "+name+")", err, false)
	}
	in.mu.Lock()
	in.urls[task] = aws.ToString(out.QueueUrl)
	in.mu.Unlock()
	return nil
}

// url returns the URL of task's queue, from the cache or GetQueueUrl
// (farm.ErrNotFound when the queue does not exist).
func (in *Inbox) url(ctx context.Context, op, task string) (string, error) {
	in.mu.Lock()
	u, ok := in.urls[task]
	in.mu.Unlock()
	if ok {
		return u, nil
	}
	name := InboxQueueName(in.prefix, task)
	out, err := in.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", translate(op+" (queue "+name+")", err, false)
	}
	u = aws.ToString(out.QueueUrl)
	in.mu.Lock()
	in.urls[task] = u
	in.mu.Unlock()
	return u, nil
}

// forget drops task's cached URL, if it is still u.
func (in *Inbox) forget(task, u string) {
	in.mu.Lock()
	if in.urls[task] == u {
		delete(in.urls, task)
	}
	in.mu.Unlock()
}

// Post sends msg, base64 encoded, to task's queue.
func (in *Inbox) Post(ctx context.Context, task string, msg []byte) error {
	if err := farm.CheckInboxPost(ctx, task, msg); err != nil {
		return err
	}
	if err := in.checkPrefix("post to inbox", task); err != nil {
		return err
	}
	op := "post to inbox " + task
	u, err := in.url(ctx, op, task)
	if err != nil {
		return err
	}
	_, err = in.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:    aws.String(u),
		MessageBody: aws.String(base64.StdEncoding.EncodeToString(msg)),
	})
	if err = translate(op, err, false); isNotFound(err) {
		in.forget(task, u)
	}
	return err
}

// inboxPoll is one ReceiveMessage call of a task's queue and its outcome,
// the messages already deleted from the queue.
type inboxPoll struct {
	done chan struct{} // closed when msgs and err are set
	msgs [][]byte
	err  error
}

// Receive waits for the outcome of a ReceiveMessage call of task's queue
// (the one on the wire, or a new one) until it brings messages or ctx
// ends; see Inbox.
func (in *Inbox) Receive(ctx context.Context, task string) ([][]byte, error) {
	if err := farm.CheckInboxReceive(ctx, task); err != nil {
		return nil, err
	}
	if err := in.checkPrefix("receive from inbox", task); err != nil {
		return nil, err
	}
	op := "receive from inbox " + task
	for {
		if err := farm.CheckInboxReceive(ctx, task); err != nil { // again after each wait
			return nil, err
		}
		u, err := in.url(ctx, op, task)
		if err != nil {
			return nil, err
		}
		p := in.poll(ctx, task, u)
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("sqsqueue: %s: %w", op, ctx.Err())
		}
		in.mu.Lock()
		mine := in.polls[task] == p
		if mine {
			delete(in.polls, task)
		}
		in.mu.Unlock()
		if !mine { // taken by another Receive, or the inbox was closed
			continue
		}
		if isNotFound(p.err) {
			in.forget(task, u)
		}
		if p.err != nil {
			return nil, p.err
		}
		if len(p.msgs) > 0 {
			return p.msgs, nil
		}
	}
}

// poll returns task's call on the wire, starting one on u if there is none.
func (in *Inbox) poll(ctx context.Context, task, u string) *inboxPoll {
	in.mu.Lock()
	defer in.mu.Unlock()
	if p := in.polls[task]; p != nil {
		return p
	}
	p := &inboxPoll{done: make(chan struct{})}
	in.polls[task] = p
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(in.wait)*time.Second+30*time.Second)
	go func() {
		defer cancel()
		defer close(p.done)
		p.msgs, p.err = in.receiveBatch(cctx, task, u)
	}()
	return p
}

// receiveBatch makes one long poll of u and deletes what it brought.
func (in *Inbox) receiveBatch(ctx context.Context, task, u string) ([][]byte, error) {
	op := "receive from inbox " + task
	out, err := in.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(u),
		MaxNumberOfMessages: inboxBatch,
		WaitTimeSeconds:     in.wait,
	})
	if err != nil {
		return nil, translate(op, err, false)
	}
	if len(out.Messages) == 0 {
		return nil, nil
	}
	msgs := make([][]byte, 0, len(out.Messages))
	entries := make([]types.DeleteMessageBatchRequestEntry, 0, len(out.Messages))
	for i, m := range out.Messages {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		b, err := base64.StdEncoding.DecodeString(aws.ToString(m.Body))
		if err != nil || len(b) == 0 {
			in.log.Warn("sqsqueue: inbox message is not base64; dropped", "task", task, "message_id", aws.ToString(m.MessageId), "error", err)
			continue
		}
		msgs = append(msgs, b)
	}
	del, err := in.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(u), Entries: entries})
	switch {
	case err != nil:
		in.log.Warn("sqsqueue: delete received inbox messages; they may be delivered again", "task", task, "messages", len(entries), "error", translate(op, err, false))
	case len(del.Failed) > 0:
		in.log.Warn("sqsqueue: delete received inbox messages; some may be delivered again", "task", task, "failed", len(del.Failed), "code", aws.ToString(del.Failed[0].Code))
	}
	return msgs, nil
}

// Close deletes task's queue and what is in it; a missing queue is no
// error. What a call on the wire brings afterwards is dropped.
func (in *Inbox) Close(ctx context.Context, task string) error {
	if err := farm.CheckInboxClose(ctx, task); err != nil {
		return err
	}
	if err := in.checkPrefix("close inbox", task); err != nil {
		return err
	}
	op := "close inbox " + task
	u, err := in.url(ctx, op, task)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	in.mu.Lock()
	delete(in.polls, task)
	in.mu.Unlock()
	_, err = in.client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	in.forget(task, u)
	if err = translate(op, err, false); err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, farm.ErrNotFound) }
