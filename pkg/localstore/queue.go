package localstore

import (
	"time"

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
// visibility timeouts; it returns ErrClosed once the store closes. Safe for
// concurrent use.
type Queue struct {
	jobqueue.Queue
}

// Queue returns a handle on the store's one durable queue. Handles share
// their jobs; opts apply to deliveries received through this handle.
func (s *Store) Queue(opts QueueOptions) *Queue {
	return &Queue{s.q.Queue(opts.VisibilityTimeout)}
}
