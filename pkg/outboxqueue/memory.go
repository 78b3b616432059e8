package outboxqueue

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// Memory is a Backend that keeps the bodies and the dead letters in
// memory: the in-memory driver's. The zero value is ready. Safe for
// concurrent use.
type Memory struct {
	mu     sync.Mutex
	bodies map[uint64][]byte
	dead   []farm.OutboxDeadLetter
}

var _ Backend = (*Memory)(nil)

// Add keeps copies of the bodies.
func (m *Memory) Add(msgs []Stored, bodies [][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bodies == nil {
		m.bodies = map[uint64][]byte{}
	}
	for i, s := range msgs {
		m.bodies[s.ID] = bytes.Clone(bodies[i])
	}
	return nil
}

// Deliver returns copies of the bodies.
func (m *Memory) Deliver(msgs []Stored) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([][]byte, len(msgs))
	for i, s := range msgs {
		b, ok := m.bodies[s.ID]
		if !ok {
			return nil, fmt.Errorf("message %d of %s has no body", s.ID, s.Group)
		}
		out[i] = bytes.Clone(b)
	}
	return out, nil
}

// Update has nothing to keep: the Core holds AvailableAt.
func (m *Memory) Update(Stored) error { return nil }

// Remove drops the body.
func (m *Memory) Remove(id uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.bodies, id)
	return nil
}

// DeadLetter moves the body to the dead letters.
func (m *Memory) DeadLetter(s Stored, reason string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = append(m.dead, farm.OutboxDeadLetter{
		OutboxMessage: farm.OutboxMessage{Group: s.Group, Body: m.bodies[s.ID]},
		SentAt:        s.SentAt,
		Attempts:      s.Attempts,
		Reason:        reason,
		At:            at,
	})
	delete(m.bodies, s.ID)
	return nil
}

// DeadLetters lists copies of up to max dead letters, in the order they
// were set aside (see farm.OutboxDeadLetter).
func (m *Memory) DeadLetters(ctx context.Context, max int) ([]farm.OutboxDeadLetter, error) {
	if err := farm.CheckOutboxDeadLetters(ctx, max); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]farm.OutboxDeadLetter, 0, min(max, len(m.dead)))
	for _, d := range m.dead[:min(max, len(m.dead))] {
		d.Body = bytes.Clone(d.Body)
		out = append(out, d)
	}
	return out, nil
}
