package memstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/jobqueue"
)

var _ farm.Queue = (*Queue)(nil)

// QueueOptions configures a Queue.
type QueueOptions struct {
	// VisibilityTimeout is how long a delivery may stay neither acked nor
	// retried before its job is handed out again; jobqueue.DefaultVisibilityTimeout
	// when zero.
	VisibilityTimeout time.Duration
	// Logger receives timed-out deliveries; discarded when nil.
	Logger *slog.Logger
}

// Queue is an in-memory farm.Queue with the embedded queue's semantics: a
// newer job of a node collapses into its waiting job, a node never has two
// jobs in flight, urgent before bulk, oldest first within a lane. Receive
// blocks without polling. Safe for concurrent use.
type Queue struct {
	c          *jobqueue.Core
	visibility time.Duration
}

// NewQueue returns an empty queue.
func NewQueue(opts QueueOptions) *Queue {
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = jobqueue.DefaultVisibilityTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Queue{c: jobqueue.New(opts.Logger, nil), visibility: opts.VisibilityTimeout}
}

// Enqueue adds job, collapsing it with a waiting job of the same node. A
// zero EnqueuedAt is set to now. A job with an invalid certname or unknown
// lane is refused with farm.ErrInvalid.
func (q *Queue) Enqueue(ctx context.Context, job farm.Job) error { return q.c.Enqueue(ctx, job) }

// Receive blocks until a job is ready or ctx ends.
func (q *Queue) Receive(ctx context.Context) (farm.Delivery, error) {
	return q.c.Receive(ctx, q.visibility)
}

// Ack finishes d for good. A delivery no longer in flight (already finished,
// or timed out) gives farm.ErrNotFound.
func (q *Queue) Ack(ctx context.Context, d farm.Delivery) error { return q.c.Ack(ctx, d) }

// Retry hands d's job out again after the delay (collapsing it with a newer
// waiting job of its node). A delivery no longer in flight gives
// farm.ErrNotFound.
func (q *Queue) Retry(ctx context.Context, d farm.Delivery, after time.Duration) error {
	return q.c.Retry(ctx, d, after)
}

// Stats returns one entry per lane, urgent first.
func (q *Queue) Stats(ctx context.Context) ([]farm.QueueStats, error) { return q.c.Stats(ctx) }
