package outboxqueue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/compilefarm/compilefarm/pkg/farm"
)

// failing is a Memory backend whose calls fail while fail is set.
type failing struct {
	Memory
	fail bool
}

var errDisk = errors.New("disk full")

func (f *failing) Add(msgs []Stored, bodies [][]byte) error {
	if f.fail {
		return errDisk
	}
	return f.Memory.Add(msgs, bodies)
}

func (f *failing) Deliver(msgs []Stored) ([][]byte, error) {
	if f.fail {
		return nil, errDisk
	}
	return f.Memory.Deliver(msgs)
}

func (f *failing) Update(m Stored) error {
	if f.fail {
		return errDisk
	}
	return f.Memory.Update(m)
}

func (f *failing) Remove(id uint64) error {
	if f.fail {
		return errDisk
	}
	return f.Memory.Remove(id)
}

func (f *failing) DeadLetter(m Stored, reason string, at time.Time) error {
	if f.fail {
		return errDisk
	}
	return f.Memory.DeadLetter(m, reason, at)
}

// TestBackendFailureChangesNothing: when the backend fails a change, the
// call returns its error and the outbox is as it was.
func TestBackendFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	msg := func(n string) farm.OutboxMessage { return farm.OutboxMessage{Group: "g", Body: []byte(n)} }
	for _, tc := range []struct {
		name string
		call func(o *Outbox, id string) error
	}{
		{"send", func(o *Outbox, _ string) error { return o.Send(ctx, msg("3")) }},
		{"receive", func(o *Outbox, _ string) error {
			_, err := o.Receive(ctx, 10, 0)
			return err
		}},
		{"ack", func(o *Outbox, id string) error { return o.Ack(ctx, id) }},
		{"retry", func(o *Outbox, id string) error { return o.Retry(ctx, id, time.Hour) }},
		{"dead-letter", func(o *Outbox, id string) error { return o.DeadLetter(ctx, id, "refused") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &failing{}
			o := New(b, Options{}).Outbox(time.Hour)
			if err := o.Send(ctx, msg("1"), msg("2")); err != nil {
				t.Fatal(err)
			}
			var id string
			if tc.name != "receive" {
				ds, err := o.Receive(ctx, 1, 0)
				if err != nil || len(ds) != 1 {
					t.Fatalf("receive: %v, %v", ds, err)
				}
				id = ds[0].ID
			}
			b.fail = true
			if err := tc.call(o, id); !errors.Is(err, errDisk) {
				t.Fatalf("%s with a failing backend: %v, want its error", tc.name, err)
			}
			b.fail = false
			st, err := o.Stats(ctx)
			if err != nil || st.Backlog != 2 || st.DeadLetters != 0 {
				t.Fatalf("stats after the failed %s: %+v, %v; want the 2 messages sent", tc.name, st, err)
			}
			if id == "" { // nothing in flight: the first message comes, on its first attempt
				ds, err := o.Receive(ctx, 1, 0)
				if err != nil || len(ds) != 1 || string(ds[0].Body) != "1" || ds[0].Attempts != 1 {
					t.Fatalf("receive after the failed %s: %+v, %v", tc.name, ds, err)
				}
				return
			}
			// The delivery is still in flight, and finishing it works.
			if ds, err := o.Receive(ctx, 10, 0); err != nil || len(ds) != 0 {
				t.Fatalf("after the failed %s, received %+v (%v) while the group is in flight", tc.name, ds, err)
			}
			if err := o.Ack(ctx, id); err != nil {
				t.Fatalf("ack after the failed %s: %v", tc.name, err)
			}
		})
	}
}

// TestClosed: after Close every call fails with the closed error and a
// waiting Receive returns it.
func TestClosed(t *testing.T) {
	ctx := context.Background()
	closed := errors.New("store closed")
	c := New(&Memory{}, Options{Closed: closed})
	o := c.Outbox(0)
	if o.VisibilityTimeout() != DefaultVisibilityTimeout {
		t.Fatalf("visibility timeout %v, want the default %v", o.VisibilityTimeout(), DefaultVisibilityTimeout)
	}
	done := make(chan error, 1)
	go func() {
		_, err := o.Receive(ctx, 1, time.Minute)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, closed) {
			t.Fatalf("waiting receive after close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting Receive did not return after Close")
	}
	if err := o.Send(ctx, farm.OutboxMessage{Group: "g", Body: []byte("x")}); !errors.Is(err, closed) {
		t.Fatalf("send after close: %v", err)
	}
	if err := o.Ack(ctx, "x"); !errors.Is(err, closed) {
		t.Fatalf("ack after close: %v", err)
	}
	if _, err := o.Stats(ctx); !errors.Is(err, closed) {
		t.Fatalf("stats after close: %v", err)
	}
}
