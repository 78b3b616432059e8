package farm

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxOutboxBody bounds an OutboxMessage's body: what one SQS message
// carries, less room for its attributes. Larger payloads are kept in the
// content store and the message names them.
const MaxOutboxBody = 240 << 10

// MaxOutboxReason bounds the reason DeadLetter keeps (OutboxReason).
const MaxOutboxReason = 1 << 10

// OutboxMessage is one message for a system outside the farm (a site's
// PuppetDB), kept until it is delivered.
type OutboxMessage struct {
	// Group orders messages: those of one group are delivered in the order
	// they were sent (the certname, for PuppetDB's commands).
	Group string
	// Body is the message, opaque bytes to the outbox; at most
	// MaxOutboxBody bytes. A driver may carry a body that is not UTF-8
	// text in an encoding that takes more room (SQS: base64, a third
	// more) and refuse, as Validate does, one that no longer fits: its doc
	// says from what size. JSON always travels as it is.
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
	// ID names this delivery to Ack, Retry and DeadLetter of the Outbox
	// that received it (an SQS receipt handle): valid until the delivery
	// is finished or its visibility timeout passes.
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

// OutboxDeadLetter is a message DeadLetter set aside, as an operator sees
// it. Drivers that keep dead letters themselves list them with a method
//
//	DeadLetters(ctx context.Context, max int) ([]OutboxDeadLetter, error)
//
// in the order they were set aside, at most max (ErrInvalid below 1),
// copies the caller may change; on SQS they are the messages of the
// dead-letter queue, read with SQS's own tools.
type OutboxDeadLetter struct {
	OutboxMessage
	SentAt   time.Time // when the message was sent
	Attempts int       // its deliveries, the last one included
	Reason   string    // DeadLetter's reason, as OutboxReason keeps it
	At       time.Time // when it was set aside
}

// OutboxReason returns reason as an Outbox keeps it for DeadLetter:
// characters an SQS message attribute cannot hold (invalid UTF-8, control
// characters other than tab, newline and carriage return, U+FFFE and
// U+FFFF) replaced with U+FFFD, then cut to at most MaxOutboxReason bytes
// at a character boundary.
func OutboxReason(reason string) string {
	reason = strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return r
		case r < 0x20 || r == 0xfffe || r == 0xffff:
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(reason, string(utf8.RuneError)))
	if len(reason) <= MaxOutboxReason {
		return reason
	}
	cut := MaxOutboxReason
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

// Outbox keeps messages for an outside system durably until a drainer
// delivers them, in order per group: the PuppetDB sink's commands (the
// embedded store's bbolt file in `broker dev`, an SQS FIFO queue with a
// dead-letter queue on AWS).
//
// Send stores every message durably before it returns, in order, as a
// copy (changing a Body afterwards, or a delivered one, changes nothing
// kept); it stores none and returns ErrInvalid when one fails Validate
// (or the driver's own size limit, see OutboxMessage.Body). On another
// error (the backend failing) the messages before the one that failed may
// be stored, in order, and the others not: the error says so, and sending
// them all again may store some twice.
//
// Receive returns up to max messages (max below 1 is ErrInvalid; a driver
// may return fewer, SQS at most 10), waiting up to wait for the first;
// none (and no error) when none is ready by then. Messages of one group
// come in the order sent: Receive never returns a message while an earlier
// one of its group is in flight (received and not finished) or waiting out
// a Retry, and returns a group's messages in order within one call. A
// delivery is finished by exactly one of Ack (delivered: gone for good),
// Retry (received again, with Attempts one higher, after at least after;
// it stays its group's first, so the group waits for it) or DeadLetter
// (set aside, with the reason as OutboxReason keeps it, for an operator;
// gone from the backlog, counted in DeadLetters). A delivery left
// unfinished for the driver's visibility timeout (its doc states it) is
// received again, as after Retry: a drainer that dies loses nothing. When
// a caller cannot deliver a message it must finish the group's later
// deliveries from the same Receive with Retry too, or they would overtake
// it.
//
// Ack, Retry and DeadLetter of an ID that is not an unfinished delivery
// (finished already, or its visibility timeout passed, or never returned
// by this Outbox) return ErrNotFound and change nothing. A call whose ctx
// ended returns an error wrapping ctx.Err(); one whose ctx had ended
// before it was called changes nothing, and a Receive whose ctx ends while
// it waits loses nothing (what it was taking is received again). Stats
// counts as OutboxStats says; SQS's counts are approximate.
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

// The checks every Outbox method makes before it reaches its backend, as
// in checks.go: ctx's error once it is done, ErrInvalid for arguments the
// contract refuses.

// CheckOutboxSend checks a Send of msgs: each must pass Validate.
func CheckOutboxSend(ctx context.Context, msgs []OutboxMessage) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("send %d outbox messages: %w", len(msgs), err)
	}
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("send outbox message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return nil
}

// CheckOutboxReceive checks a Receive of up to max messages: max at least
// 1. A Receive that waits checks its ctx again each time it wakes.
func CheckOutboxReceive(ctx context.Context, max int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("receive outbox messages: %w", err)
	}
	if max < 1 {
		return fmt.Errorf("receive %d outbox messages: ask for at least 1: %w", max, ErrInvalid)
	}
	return nil
}

// CheckOutboxAck checks an Ack of delivery id: only its ctx, and an empty
// id is no delivery (ErrNotFound).
func CheckOutboxAck(ctx context.Context, id string) error {
	return checkOutboxFinish(ctx, "ack", id)
}

// CheckOutboxRetry checks a Retry of delivery id (as CheckOutboxAck); any
// delay is accepted, one below zero meaning at once.
func CheckOutboxRetry(ctx context.Context, id string, after time.Duration) error {
	return checkOutboxFinish(ctx, "retry", id)
}

// CheckOutboxDeadLetter checks a DeadLetter of delivery id (as
// CheckOutboxAck); any reason is accepted (OutboxReason says what is
// kept).
func CheckOutboxDeadLetter(ctx context.Context, id, reason string) error {
	return checkOutboxFinish(ctx, "dead-letter", id)
}

func checkOutboxFinish(ctx context.Context, op, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s outbox delivery %s: %w", op, id, err)
	}
	if id == "" {
		return fmt.Errorf("%s outbox delivery: no delivery ID: %w", op, ErrNotFound)
	}
	return nil
}

// CheckOutboxStats checks a Stats: only its ctx.
func CheckOutboxStats(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("outbox stats: %w", err)
	}
	return nil
}

// CheckOutboxDeadLetters checks a driver's DeadLetters listing of up to
// max (see OutboxDeadLetter): max at least 1.
func CheckOutboxDeadLetters(ctx context.Context, max int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list outbox dead letters: %w", err)
	}
	if max < 1 {
		return fmt.Errorf("list %d outbox dead letters: ask for at least 1: %w", max, ErrInvalid)
	}
	return nil
}
