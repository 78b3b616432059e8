package localstore

import (
	"context"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/jobqueue"
)

// QueueOptions configures a Queue handle.
type QueueOptions struct {
	// VisibilityTimeout is how long a delivery received through this handle
	// may stay neither acked nor retried before its job is handed out again;
	// jobqueue.DefaultVisibilityTimeout when zero.
	VisibilityTimeout time.Duration
}

// Queue is the store's durable compile queue, kept in state.db. Every job is
// on disk before Enqueue returns, and each delivery's attempt count is on
// disk before Receive returns it; after a restart no job is lost and jobs
// that were in flight are waiting again. A newer job of a node collapses into
// its waiting job; a node never has two jobs in flight; urgent before bulk,
// oldest EnqueuedAt first within a lane. Receive blocks without polling: it
// wakes on Enqueue, Ack and Retry, and on a timer for delayed retries and
// visibility timeouts. Safe for concurrent use.
type Queue struct {
	s          *Store
	visibility time.Duration
}

// Queue returns a handle on the store's one durable queue. Handles share
// their jobs; opts apply to deliveries received through this handle.
func (s *Store) Queue(opts QueueOptions) *Queue {
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = jobqueue.DefaultVisibilityTimeout
	}
	return &Queue{s: s, visibility: opts.VisibilityTimeout}
}

// Enqueue stores job durably, collapsing it with a waiting job of the same
// node. A zero EnqueuedAt is set to now. A job with an invalid certname or
// an unknown lane is refused with farm.ErrInvalid.
func (q *Queue) Enqueue(ctx context.Context, job farm.Job) error { return q.s.q.Enqueue(ctx, job) }

// Receive blocks until a job is ready or ctx ends (or the store closes).
func (q *Queue) Receive(ctx context.Context) (farm.Delivery, error) {
	return q.s.q.Receive(ctx, q.visibility)
}

// Ack deletes d's job. A delivery no longer in flight (finished already, or
// timed out) gives farm.ErrNotFound.
func (q *Queue) Ack(ctx context.Context, d farm.Delivery) error { return q.s.q.Ack(ctx, d) }

// Retry hands d's job out again after the delay, collapsing it with a newer
// waiting job of its node. A delivery no longer in flight gives
// farm.ErrNotFound.
func (q *Queue) Retry(ctx context.Context, d farm.Delivery, after time.Duration) error {
	return q.s.q.Retry(ctx, d, after)
}

// Stats returns one entry per lane, urgent first.
func (q *Queue) Stats(ctx context.Context) ([]farm.QueueStats, error) { return q.s.q.Stats(ctx) }
