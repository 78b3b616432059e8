package memstore

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

var _ farm.Inbox = (*Store)(nil)

// inboxBatch is the most messages one Receive returns (farm.Inbox).
const inboxBatch = 10

// inboxes keeps the task inboxes. The zero value is ready.
type inboxes struct {
	mu sync.Mutex
	m  map[string]*inbox
}

// inbox is one task's messages. wake is closed, and replaced, when a
// message arrives or the inbox is closed.
type inbox struct {
	msgs [][]byte
	wake chan struct{}
}

func (b *inbox) notify() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// Open creates task's inbox unless it exists.
func (s *Store) Open(ctx context.Context, task string) error {
	if err := farm.CheckInboxOpen(ctx, task); err != nil {
		return err
	}
	in := &s.inboxes
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.m == nil {
		in.m = map[string]*inbox{}
	}
	if in.m[task] == nil {
		in.m[task] = &inbox{wake: make(chan struct{})}
	}
	return nil
}

// Post queues a copy of msg in task's inbox and wakes its Receive.
func (s *Store) Post(ctx context.Context, task string, msg []byte) error {
	if err := farm.CheckInboxPost(ctx, task, msg); err != nil {
		return err
	}
	in := &s.inboxes
	in.mu.Lock()
	defer in.mu.Unlock()
	b := in.m[task]
	if b == nil {
		return fmt.Errorf("post to inbox %s: %w", task, farm.ErrNotFound)
	}
	b.msgs = append(b.msgs, bytes.Clone(msg))
	b.notify()
	return nil
}

// Receive waits without polling for messages in task's inbox and takes up
// to 10 of them, oldest first.
func (s *Store) Receive(ctx context.Context, task string) ([][]byte, error) {
	in := &s.inboxes
	for {
		if err := farm.CheckInboxReceive(ctx, task); err != nil {
			return nil, err
		}
		in.mu.Lock()
		b := in.m[task]
		if b == nil {
			in.mu.Unlock()
			return nil, fmt.Errorf("receive from inbox %s: %w", task, farm.ErrNotFound)
		}
		if len(b.msgs) > 0 {
			n := min(len(b.msgs), inboxBatch)
			out := b.msgs[:n:n]
			b.msgs = b.msgs[n:]
			in.mu.Unlock()
			return out, nil
		}
		wake := b.wake
		in.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
		}
	}
}

// Close drops task's inbox and its messages and wakes its Receive.
func (s *Store) Close(ctx context.Context, task string) error {
	if err := farm.CheckInboxClose(ctx, task); err != nil {
		return err
	}
	in := &s.inboxes
	in.mu.Lock()
	defer in.mu.Unlock()
	if b := in.m[task]; b != nil {
		delete(in.m, task)
		b.notify()
	}
	return nil
}
