package memstore

import (
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
	jobqueue.Queue
}

// NewQueue returns an empty queue.
func NewQueue(opts QueueOptions) *Queue {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Queue{jobqueue.New(opts.Logger, nil).Queue(opts.VisibilityTimeout)}
}
