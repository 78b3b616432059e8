package farm

import (
	"context"
	"fmt"
	"time"
)

// MaxOutboxBody bounds an OutboxMessage's body: what one SQS message
// carries, less room for its attributes. Larger payloads are kept in the
// content store and the message names them.
const MaxOutboxBody = 240 << 10

// OutboxMessage is one message for a system outside the farm (a site's
// PuppetDB), kept until it is delivered.
type OutboxMessage struct {
	// Group orders messages: those of one group are delivered in the order
	// they were sent (the certname, for PuppetDB's commands).
	Group string
	// Body is the message, opaque to the outbox; at most MaxOutboxBody
	// bytes.
	Body []byte
}

// Validate returns an ErrInvalid error for a message an Outbox refuses: an
// empty or over-long group (more than 128 bytes, SQS's MessageGroupId) or
// an empty or oversized body.
func (m OutboxMessage) Validate() error {
	switch {
	case m.Group == "" || len(m.Group) > 128:
		return fmt.Errorf("outbox message group %q must be 1 to 128 bytes: %w", m.Group, ErrInvalid)
	case len(m.Body) == 0:
		return fmt.Errorf("outbox message for %s is empty: %w", m.Group, ErrInvalid)
	case len(m.Body) > MaxOutboxBody:
		return fmt.Errorf("outbox message for %s is %d bytes, over the %d an outbox carries: %w", m.Group, len(m.Body), MaxOutboxBody, ErrInvalid)
	}
	return nil
}

// OutboxDelivery is a received OutboxMessage.
type OutboxDelivery struct {
	OutboxMessage
	// ID names this delivery to Ack, Retry and DeadLetter (an SQS receipt
	// handle): valid until the delivery is finished or its visibility
	// timeout passes.
	ID string
	// SentAt is when the message was sent; Attempts counts its deliveries,
	// this one included (1 on the first).
	SentAt   time.Time
	Attempts int
}

// OutboxStats describes an outbox's backlog.
type OutboxStats struct {
	Backlog     int           // messages not yet delivered: waiting, in flight or waiting to be retried
	OldestAge   time.Duration // age by SentAt of the oldest of them; 0 when none, or when the driver cannot tell
	DeadLetters int           // messages set aside by DeadLetter
}

// Outbox keeps messages for an outside system durably until a drainer
// delivers them, in order per group: the PuppetDB sink's commands (the
// embedded store's bbolt file in `broker dev`, an SQS FIFO queue with a
// dead-letter queue on AWS).
//
// Send stores every message durably before it returns, in order; it
// stores none and returns ErrInvalid when one fails Validate.
//
// Receive returns up to max messages (at least 1 is asked for), waiting up
// to wait for the first; none (and no error) when none is ready by then.
// Messages of one group come in the order sent: Receive never returns a
// message while an earlier one of its group is in flight (received and not
// finished) or waiting out a Retry, and returns a group's messages in order
// within one call. A delivery is finished by exactly one of Ack (delivered:
// gone for good), Retry (received again, with Attempts one higher, after
// at least after; it stays its group's first, so the group waits for it)
// or DeadLetter (set aside, with the reason, for an operator; gone from the
// backlog). A delivery left unfinished for the driver's visibility timeout
// (its doc states it) is received again, as after Retry: a drainer that
// dies loses nothing. When a caller cannot deliver a message it must
// finish the group's later deliveries from the same Receive with Retry
// too, or they would overtake it.
//
// Ack, Retry and DeadLetter of an ID that is not an unfinished delivery
// (finished already, or its visibility timeout passed) return ErrNotFound
// and change nothing. A call whose ctx ended returns an error wrapping
// ctx.Err(). Stats counts as OutboxStats says; SQS's counts are
// approximate.
//
// Safe for concurrent use, across processes for shared backends (several
// fleet tasks drain one queue; a group is never in flight at two at once).
type Outbox interface {
	Send(ctx context.Context, msgs ...OutboxMessage) error
	Receive(ctx context.Context, max int, wait time.Duration) ([]OutboxDelivery, error)
	Ack(ctx context.Context, id string) error
	Retry(ctx context.Context, id string, after time.Duration) error
	DeadLetter(ctx context.Context, id string, reason string) error
	Stats(ctx context.Context) (OutboxStats, error)
}
