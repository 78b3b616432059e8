package localstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/compilefarm/compilefarm/pkg/farm"
	"github.com/compilefarm/compilefarm/pkg/outboxqueue"
)

var _ farm.Outbox = (*Outbox)(nil)

// The outbox lives in three buckets, made by the first Send (a state.db
// without them holds no message, and a program that does not know them
// leaves them alone):
//
//	outbox_messages  message ID (8 bytes, big-endian) → JSON outboxqueue.Stored
//	outbox_bodies    message ID → the body, as sent
//	outbox_dead      the bucket's NextSequence (8 bytes) → JSON deadLetterRecord
//
// A message's record and body are apart so that a Receive, which stores
// the new attempt count, rewrites a small record and not the body.
var (
	bucketOutboxMessages = []byte("outbox_messages")
	bucketOutboxBodies   = []byte("outbox_bodies")
	bucketOutboxDead     = []byte("outbox_dead")
)

// deadLetterRecord is a dead letter as outbox_dead keeps it.
type deadLetterRecord struct {
	Group    string    `json:"group"`
	Body     []byte    `json:"body"`
	SentAt   time.Time `json:"sent_at"`
	Attempts int       `json:"attempts"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// OutboxOptions configures an Outbox handle.
type OutboxOptions struct {
	// VisibilityTimeout is how long a delivery received through this
	// handle may stay unfinished before its message is received again;
	// outboxqueue.DefaultVisibilityTimeout (2 minutes) when zero.
	VisibilityTimeout time.Duration
}

// Outbox is the store's durable farm.Outbox, kept in state.db (on
// pkg/outboxqueue). Every message is on disk, synced, before Send returns,
// and each delivery's attempt count before Receive returns it; a Retry's
// delay is on disk too. After a restart nothing unfinished is lost:
// messages that were in flight are received again at once, their attempts
// counted, and retried ones still wait out their delay. Bodies stay on
// disk until received; only each message's small record is kept in
// memory. A delivery stays in flight for OutboxOptions.VisibilityTimeout
// (2 minutes by default). Dead letters are kept, with their reason, group,
// time and body, until an operator's tool removes them from the bucket;
// DeadLetters lists them. Receive waits without polling; every method
// returns ErrClosed once the store closes. Safe for concurrent use.
type Outbox struct {
	*outboxqueue.Outbox
	s *Store
}

// Outbox returns a handle on the store's one durable outbox. Handles share
// their messages; opts apply to deliveries received through this handle.
func (s *Store) Outbox(opts OutboxOptions) *Outbox {
	return &Outbox{Outbox: s.outbox.Outbox(opts.VisibilityTimeout), s: s}
}

// DeadLetters lists up to max dead letters in the order they were set
// aside (farm.OutboxDeadLetter).
func (o *Outbox) DeadLetters(ctx context.Context, max int) ([]farm.OutboxDeadLetter, error) {
	if err := farm.CheckOutboxDeadLetters(ctx, max); err != nil {
		return nil, err
	}
	out := []farm.OutboxDeadLetter{}
	err := o.s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOutboxDead)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
			r, err := decode[deadLetterRecord](fmt.Sprintf("outbox dead letter %x", k), v)
			if err != nil {
				return err
			}
			out = append(out, farm.OutboxDeadLetter{
				OutboxMessage: farm.OutboxMessage{Group: r.Group, Body: r.Body},
				SentAt:        r.SentAt,
				Attempts:      r.Attempts,
				Reason:        r.Reason,
				At:            r.At,
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list outbox dead letters: %w", o.s.storageErr(err))
	}
	return out, nil
}

// loadOutbox reads the outbox's records and counts its dead letters,
// inside Open's transaction.
func loadOutbox(tx *bolt.Tx) (msgs []outboxqueue.Stored, dead int, err error) {
	if b := tx.Bucket(bucketOutboxMessages); b != nil {
		err = b.ForEach(func(k, v []byte) error {
			m, err := decode[outboxqueue.Stored](fmt.Sprintf("outbox message %x", k), v)
			if err != nil {
				return err
			}
			if len(k) != 8 || m.ID != binary.BigEndian.Uint64(k) {
				return fmt.Errorf("outbox message %x holds the record of message %d: %w", k, m.ID, farm.ErrInvalid)
			}
			msgs = append(msgs, m)
			return nil
		})
	}
	if b := tx.Bucket(bucketOutboxDead); b != nil {
		dead = b.Stats().KeyN
	}
	return msgs, dead, err
}

// outboxBackend is the outboxqueue.Backend of a Store: each call one
// synced bbolt transaction.
type outboxBackend struct{ s *Store }

var _ outboxqueue.Backend = outboxBackend{}

func (ob outboxBackend) update(fn func(msgs, bodies *bolt.Bucket) error) error {
	err := ob.s.db.Update(func(tx *bolt.Tx) error {
		msgs, err := tx.CreateBucketIfNotExists(bucketOutboxMessages)
		if err != nil {
			return err
		}
		bodies, err := tx.CreateBucketIfNotExists(bucketOutboxBodies)
		if err != nil {
			return err
		}
		return fn(msgs, bodies)
	})
	if err != nil {
		return ob.s.storageErr(err)
	}
	return nil
}

func putRecord(b *bolt.Bucket, m outboxqueue.Stored) error {
	v, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode outbox message %d of %s: %v: %w", m.ID, m.Group, err, farm.ErrInvalid)
	}
	return b.Put(binary.BigEndian.AppendUint64(nil, m.ID), v)
}

func getBody(b *bolt.Bucket, m outboxqueue.Stored) ([]byte, error) {
	v := b.Get(binary.BigEndian.AppendUint64(nil, m.ID))
	if v == nil {
		return nil, fmt.Errorf("outbox message %d of %s has no body: %w", m.ID, m.Group, farm.ErrInvalid)
	}
	return bytes.Clone(v), nil // v lives only as long as the transaction
}

// Add stores the records and bodies of new messages.
func (ob outboxBackend) Add(msgs []outboxqueue.Stored, bodies [][]byte) error {
	return ob.update(func(mb, bb *bolt.Bucket) error {
		for i, m := range msgs {
			if err := putRecord(mb, m); err != nil {
				return err
			}
			if err := bb.Put(binary.BigEndian.AppendUint64(nil, m.ID), bodies[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Deliver stores the new attempt counts and reads the bodies.
func (ob outboxBackend) Deliver(msgs []outboxqueue.Stored) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	err := ob.update(func(mb, bb *bolt.Bucket) error {
		for i, m := range msgs {
			if err := putRecord(mb, m); err != nil {
				return err
			}
			var err error
			if out[i], err = getBody(bb, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Update stores a retried message's record.
func (ob outboxBackend) Update(m outboxqueue.Stored) error {
	return ob.update(func(mb, _ *bolt.Bucket) error { return putRecord(mb, m) })
}

// Remove deletes an acked message.
func (ob outboxBackend) Remove(id uint64) error {
	return ob.update(func(mb, bb *bolt.Bucket) error {
		key := binary.BigEndian.AppendUint64(nil, id)
		if err := mb.Delete(key); err != nil {
			return err
		}
		return bb.Delete(key)
	})
}

// DeadLetter moves a message and its body to outbox_dead.
func (ob outboxBackend) DeadLetter(m outboxqueue.Stored, reason string, at time.Time) error {
	return ob.update(func(mb, bb *bolt.Bucket) error {
		body, err := getBody(bb, m)
		if err != nil {
			return err
		}
		dead, err := mb.Tx().CreateBucketIfNotExists(bucketOutboxDead)
		if err != nil {
			return err
		}
		seq, err := dead.NextSequence()
		if err != nil {
			return err
		}
		v, err := json.Marshal(deadLetterRecord{Group: m.Group, Body: body, SentAt: m.SentAt, Attempts: m.Attempts, Reason: reason, At: at})
		if err != nil {
			return fmt.Errorf("encode dead letter of %s: %v: %w", m.Group, err, farm.ErrInvalid)
		}
		if err := dead.Put(binary.BigEndian.AppendUint64(nil, seq), v); err != nil {
			return err
		}
		key := binary.BigEndian.AppendUint64(nil, m.ID)
		if err := mb.Delete(key); err != nil {
			return err
		}
		return bb.Delete(key)
	})
}
