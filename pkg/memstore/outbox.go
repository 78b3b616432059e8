package memstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/outboxqueue"
)

var _ farm.Outbox = (*Outbox)(nil)

// OutboxOptions configures an Outbox.
type OutboxOptions struct {
	// VisibilityTimeout is how long a delivery may stay unfinished before
	// its message is received again; outboxqueue.DefaultVisibilityTimeout
	// (2 minutes) when zero.
	VisibilityTimeout time.Duration
	// Logger receives timed-out deliveries; discarded when nil.
	Logger *slog.Logger
}

// Outbox is an in-memory farm.Outbox (on pkg/outboxqueue): messages in
// order per group, a delivery in flight for OutboxOptions.VisibilityTimeout
// (2 minutes by default), dead letters kept and listed by DeadLetters.
// Receive waits without polling. Nothing survives the process. Safe for
// concurrent use.
type Outbox struct {
	*outboxqueue.Outbox
	mem *outboxqueue.Memory
}

// NewOutbox returns an empty outbox.
func NewOutbox(opts OutboxOptions) *Outbox {
	mem := &outboxqueue.Memory{}
	c := outboxqueue.New(mem, outboxqueue.Options{Logger: opts.Logger})
	return &Outbox{Outbox: c.Outbox(opts.VisibilityTimeout), mem: mem}
}

// DeadLetters lists up to max dead letters in the order they were set
// aside (farm.OutboxDeadLetter).
func (o *Outbox) DeadLetters(ctx context.Context, max int) ([]farm.OutboxDeadLetter, error) {
	return o.mem.DeadLetters(ctx, max)
}
